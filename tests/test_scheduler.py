"""Scheduler: continuous batching gives each request its own output; admission; cancellation."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from conftest import tiny_model
from specpilot.engine.generate import Engine
from specpilot.engine.sampling import SamplingParams
from specpilot.engine.scheduler import (
    CANCELLED,
    FINISHED,
    QUEUE_TIMEOUT,
    TIMEOUT,
    Draining,
    QueueFull,
    Scheduler,
    SchedulerConfig,
)


def make_engine(slots: int = 3) -> Engine:
    return Engine(tiny_model(11), tiny_model(12, n_layers=1), max_slots=slots, max_seq_len=256)


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, ignore_eos=True)


@pytest.fixture
def sched():
    s = Scheduler(make_engine(), SchedulerConfig(max_queued=4))
    s.start()
    yield s
    s.stop(timeout=10, cancel=True)


def test_continuous_batching_matches_solo_runs_mixed_k(sched: Scheduler) -> None:
    ref_engine = make_engine()  # same seeds, same weights
    prompts = [[5, 6, 7 + i] for i in range(4)]
    ks = [0, 2, 1, 0]
    refs = [
        ref_engine.generate(p, greedy(10), k).output_ids for p, k in zip(prompts, ks, strict=True)
    ]
    tickets = []
    for p, k in zip(prompts, ks, strict=True):  # staggered arrivals join a running batch
        tickets.append(sched.submit(p, greedy(10), k))
        time.sleep(0.005)
    for t in tickets:
        assert t.wait(30)
    assert [t.state.output_ids for t in tickets] == refs  # no cross-talk
    assert all(t.status == FINISHED and t.finish_reason == "length" for t in tickets)
    # 4 requests, 3 slots: the last one waited, and rounds really were batched
    assert max(r.batch_size for t in tickets for r in t.rounds) >= 2
    assert tickets[3].admitted_t >= min(t.finished_t for t in tickets[:3])  # got a freed slot
    assert sched.engine.free_slots == [0, 1, 2]
    for t in tickets:  # each request's own k throughout
        assert t.rounds and {r.proposed for r in t.rounds} <= {t.k}


def test_progress_events_are_incremental_and_end_once(sched: Scheduler) -> None:
    events = []
    done = threading.Event()

    def on_event(_t, ev):
        events.append(ev)
        if ev.done:
            done.set()

    t = sched.submit([1, 2, 3], greedy(12), 2, logprobs=3, on_event=on_event)
    assert done.wait(30)
    assert sum(ev.done for ev in events) == 1 and events[-1].done
    ids = [i for ev in events for i in ev.new_ids]
    assert ids == t.state.output_ids and len(ids) == 12
    lps = [lp for ev in events for lp in ev.new_logprobs]
    assert [lp.token_id for lp in lps] == ids
    assert all(len(lp.top) == 3 and lp.top[0][1] >= lp.logprob - 1e-5 for lp in lps)
    # greedy: the chosen token is the target's argmax, so its log-prob is the top one
    assert all(abs(lp.top[0][1] - lp.logprob) < 1e-5 for lp in lps)


def test_logprobs_equal_target_log_softmax() -> None:
    eng = make_engine(1)
    s = Scheduler(eng, SchedulerConfig())
    s.start()
    try:
        t = s.submit([3, 4, 5], greedy(6), 0, logprobs=0)
        assert t.wait(30)
    finally:
        s.stop(timeout=10)
    toks = t.state.tokens
    target = tiny_model(11)
    target.setup_cache(64, 1)
    logits = target(torch.tensor([toks]), torch.arange(len(toks))[None], torch.tensor([0]))[0]
    lp = torch.log_softmax(logits.float(), -1)
    want = [float(lp[2 + i, toks[3 + i]]) for i in range(6)]
    got = [x.logprob for x in t.state.token_logprobs]
    assert got == pytest.approx(want, abs=1e-4)


def test_queue_full_and_queue_timeout() -> None:
    # a must outlive b's queue timeout by a wide margin: 500 tokens take >= 10x 0.05 s here
    eng = Engine(tiny_model(11), None, max_slots=1, max_seq_len=512)
    s = Scheduler(eng, SchedulerConfig(max_queued=1, queue_timeout_s=0.05))
    s.start()
    try:
        a = s.submit([1, 2], greedy(500), 0)
        while a.state is None:  # a holds the only slot
            time.sleep(0.001)
        b = s.submit([1, 3], greedy(4), 0)
        with pytest.raises(QueueFull) as exc:
            s.submit([1, 4], greedy(4), 0)
        assert exc.value.retry_after_s >= 1
        assert b.wait(10) and b.status == QUEUE_TIMEOUT and b.state is None
        assert s.cancel(a.request_id)
        assert a.wait(10) and a.status == CANCELLED
        assert eng.free_slots == [0]
    finally:
        s.stop(timeout=10)


def test_cancel_leaves_batch_within_one_round_and_frees_slot(sched: Scheduler) -> None:
    other = sched.submit([9, 9], greedy(60), 1)
    victim = sched.submit([7, 7], greedy(200), 0)
    while len(victim.rounds) < 3:
        time.sleep(0.001)
    before = sched.rounds_total
    assert sched.cancel(victim.request_id)
    assert victim.wait(10)
    assert victim.status == CANCELLED and victim.finish_reason == "cancelled"
    assert victim.rounds_after_cancel <= 1
    assert sched.rounds_total - before <= 2  # at most the round in progress, plus one started
    assert victim.state.slot == -1 and len(sched.engine.free_slots) == 2
    assert other.wait(30) and other.status == FINISHED  # the rest of the batch carries on
    assert not sched.cancel(victim.request_id)  # already gone


def test_server_side_timeout() -> None:
    eng = make_engine(1)
    s = Scheduler(eng, SchedulerConfig(request_timeout_s=0.15))
    s.start()
    try:
        t = s.submit([1, 2], greedy(250), 0)
        assert t.wait(10) and t.status == TIMEOUT
        assert 0 < len(t.state.output_ids) < 250 and eng.free_slots == [0]
    finally:
        s.stop(timeout=10)


def test_validation_names_field_and_drain(sched: Scheduler) -> None:
    with pytest.raises(ValueError, match="temperature"):
        sched.submit([1], SamplingParams(temperature=-1.0), 0)
    with pytest.raises(ValueError, match="max_tokens"):
        sched.submit([1] * 250, greedy(100), 0)
    with pytest.raises(ValueError, match="k"):
        sched.submit([1], greedy(3), -1)
    t = sched.submit([1, 2], greedy(8), 1)
    sched.drain()
    with pytest.raises(Draining):
        sched.submit([1, 2], greedy(2), 0)
    assert t.wait(30) and t.status == FINISHED  # in flight finishes during the drain
    sched.resume()
    assert sched.submit([1, 2], greedy(2), 0).wait(30)


def test_batch_size_cap_takes_turns() -> None:
    eng = make_engine(3)
    s = Scheduler(eng, SchedulerConfig(max_batch_size=2))
    s.start()
    try:
        ts = [s.submit([4, i + 1], greedy(6), 0) for i in range(3)]
        for t in ts:
            assert t.wait(30) and t.status == FINISHED
    finally:
        s.stop(timeout=10)
    assert max(r.batch_size for t in ts for r in t.rounds) == 2


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="max_running"):
        Scheduler(make_engine(2), SchedulerConfig(max_running=3))
    with pytest.raises(ValueError, match="queue_timeout_s"):
        Scheduler(make_engine(2), SchedulerConfig(queue_timeout_s=0))
