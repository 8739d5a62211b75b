"""Issue 5's end-to-end test: a ~30 s mixed workload against the real ``specpilot serve``
(``BuiltinBackend``, SmolLM2 without a draft, one slot, a one-request queue) and the real
llama.cpp server (``LlamaCppBackend``, subprocess) at the same time, both writing to one DuckDB
run file. Every scheduled request must come back exactly once, in the store too, including
forced timeouts (a group whose deadline no answer can meet), 429s (the builtin server's tiny
queue) and a server killed mid-run (records up to the kill survive; the rest are
``error``/``not_sent``). The schedule also carries client-side stages (real BM25 retrieval and a
simulated tool call), a trace-replay phase with ``ignore_eos``, and phases on the schedule's
absolute start times.

Figures are printed (``pytest -s``) for the issue note.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

pytest.importorskip("xllamacpp")
pytest.importorskip("fastapi")

from specpilot.backends import response_extras_for
from specpilot.backends.builtin import BuiltinBackend
from specpilot.backends.llamacpp import LlamaCppBackend, LlamaCppConfig
from specpilot.cli import main
from specpilot.loadgen import LoadConfig, LoadRunner, quantile, run_schedule
from specpilot.records import ArmRecord, PilotRecord, ScheduledRequest
from specpilot.store import Store, read_pilot
from specpilot.workload import build_schedule

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
KILL_S = 25.0  # seconds into the run: the burst phase (23 s - 29 s)
MODEL = "smollm2"
FRANCE = "What is the capital of France? Answer in one word."


def _workload(d: Path) -> Path:
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(0.25, 18))
    rows = [f"{x:.3f},{int(rng.integers(20, 200))},{int(rng.integers(4, 10))}" for x in t]
    (d / "trace.csv").write_text("timestamp,input_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    short = {"mean": 8, "dist": "uniform", "min": 4, "max": 10}
    slo = {"ttft_s": 5.0, "deadline_s": 20.0}
    wl = {
        "name": "e2e-mixed",
        "seed": 7,
        "groups": {
            "zh_business": {"output": short, "slo": slo},
            "code": {"output": short, "slo": slo},
            "structured": {"output": {"mean": 8}, "slo": slo},
            # forced timeouts: 200 tokens can never arrive within 0.6 s on this machine
            "longform": {"output": {"mean": 200}, "slo": {"ttft_s": 5.0, "deadline_s": 0.6}},
        },
        "stages": {
            "retrieval": {"kind": "bm25", "docs": "builtin", "top_k": 2, "groups": ["zh_business"]},
            "tool": {
                "kind": "simulated",
                "dist": "uniform",
                "min_s": 0.05,
                "max_s": 0.25,
                "groups": ["code"],
            },
        },
        "warmup": {"requests": 2, "rate": 2.0},
        "phases": [
            {"name": "off_peak", "duration_s": 8, "arrival": {"kind": "poisson", "rate": 0.5}},
            {"name": "peak", "duration_s": 8, "arrival": {"kind": "poisson", "rate": 1.5}},
            {
                "name": "trace",
                "arrival": {
                    "kind": "trace",
                    "path": "trace.csv",
                    "window": "all",
                    "target_rate": 3.0,
                    "use_lengths": "output",
                    "ignore_eos": True,
                },
                "groups": {"zh_business": 1, "code": 1, "structured": 1},
            },
            {"name": "burst", "duration_s": 6, "arrival": {"kind": "gamma", "rate": 3, "cv": 2}},
        ],
    }
    path = d / "w.yaml"
    path.write_text(yaml.safe_dump(wl, allow_unicode=True))
    return path


def _ignore_eos_check(url: str, extras: Any) -> list[Any]:
    """The same greedy question twice: the model stops by itself; with ignore_eos it cannot."""
    items = [
        ScheduledRequest(
            i, 0.0, "eos", "g", "france", [{"role": "user", "content": FRANCE}], 40, ignore_eos=ie
        )
        for i, ie in enumerate((False, True))
    ]
    cfg = LoadConfig.build(url, model=MODEL, progress=False, response_extras=extras)
    return run_schedule(items, cfg).records


class _Arm:
    """One engine's run in its own thread: the load generator, a kill timer, the store."""

    def __init__(self, name: str, backend: Any, sched: Any, store: Store, run_id: str) -> None:
        self.name, self.backend, self.sched, self.store, self.run_id = (
            name,
            backend,
            sched,
            store,
            run_id,
        )
        self.kill_t = 0.0
        self.at_kill: list[Any] = []
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"arm-{name}")

    def _kill(self) -> None:
        self.kill_t = time.perf_counter()
        self.backend.kill()
        self.at_kill = self.store.requests(self.run_id, arm=self.name)  # flushed: durable now

    def _run(self) -> None:
        try:
            cfg = LoadConfig.build(
                self.backend.endpoint,
                model=MODEL,
                run_id=self.run_id,
                arm=self.name,
                timeout_s=15.0,
                enforce_deadlines=True,
                response_extras=response_extras_for(self.name, strict=True),
                abort_after_connect_errors=3,
                progress=False,
            )
            runner = LoadRunner.for_schedule(self.sched, cfg, self.store.sink)
            timer = threading.Timer(KILL_S, self._kill)
            timer.start()
            try:
                self.result = runner.run()
            finally:
                timer.cancel()
        except BaseException as exc:  # re-raised in the test's thread
            self.error = exc


def _check_arm(arm: _Arm, sched: Any, final: list[Any], chunks: list[Any]) -> dict[str, Any]:
    res = arm.result
    recs = res.records
    n = len(sched.requests)
    by_id = {r.request_id: r for r in final}
    # exactly one record per scheduled request, in the result and in the store
    assert len(recs) == n and len(final) == n and len(by_id) == n
    assert set(by_id) == {f"{q.phase}-{q.index:06d}" for q in sched.requests}
    assert sum(res.summary.status_counts.values()) == n
    kill = arm.kill_t
    assert kill > 0, "the kill timer never fired"
    statuses = {r.status for r in recs}
    assert statuses <= {"ok", "timeout", "rejected", "error", "not_sent"}, statuses
    for r in recs:
        stored = by_id[r.request_id]
        assert stored.status == r.status and stored.done_t == pytest.approx(r.done_t)
        if r.done_t is not None and r.done_t < kill:
            assert r.status in ("ok", "timeout", "rejected"), (r.request_id, r.status, r.error)
        if r.sent_t is not None and r.sent_t > kill + 0.01:
            assert r.status == "error", (r.request_id, r.status)  # nothing answers any more
        if r.status == "ok":
            # (its last bytes may be read a moment after the kill: the loop shares 2 busy cores)
            assert r.done_t < kill + 0.1 and r.output_tokens and r.first_content_t > r.sent_t
    # the server's death: in-flight/after requests fail, then the generator stops sending
    assert any(r.status == "error" for r in recs)
    assert any(r.status == "not_sent" for r in recs)
    assert "aborted" in (res.summary.stop_reason or "")
    # records up to the kill survived in the store, unchanged, with their chunks
    assert arm.at_kill, "nothing was durable at the kill"
    for r in arm.at_kill:
        assert by_id[r.request_id].status == r.status
    durable = {r.request_id for r in arm.at_kill}
    settled = [r for r in recs if r.done_t is not None and r.done_t < kill - 1.0]
    assert settled and all(r.request_id in durable for r in settled)
    n_chunks = {}
    for c in chunks:
        n_chunks[c.request_id] = n_chunks.get(c.request_id, 0) + 1
    assert all(n_chunks.get(r.request_id, 0) == r.chunks for r in recs if r.status == "ok")
    # forced timeouts: the longform group can never meet its 0.6 s deadline
    longform = [r for r in recs if r.task_group == "longform" and r.done_t and r.done_t < kill]
    assert longform and all(r.status in ("timeout", "rejected") for r in longform)
    assert any(r.status == "timeout" and "deadline" in r.error for r in longform)
    # client stages ran before each send: BM25 measured, simulated tool waited its planned time
    planned = {f"{q.phase}-{q.index:06d}": q.client_stages for q in sched.requests}
    staged = [r for r in recs if r.sent_t is not None and planned[r.request_id]]
    assert staged
    for r in staged:
        assert set(r.client_stages) == set(planned[r.request_id])
        if "retrieval" in r.client_stages:
            assert 0 < r.client_stages["retrieval"] < 0.1
        if "tool" in r.client_stages:
            assert r.client_stages["tool"] >= planned[r.request_id]["tool"] - 1e-3
        assert r.sent_t - r.scheduled_t >= sum(r.client_stages.values())
    # phases on the schedule's absolute timeline
    starts = {p.name: p.start_s for p in sched.phases}
    base = recs[0].scheduled_t - starts[sched.requests[0].phase] - sched.requests[0].send_t
    for r, q in zip(recs, sched.requests, strict=True):
        if r.status != "not_sent":
            assert r.scheduled_t - base == pytest.approx(starts[q.phase] + q.send_t, abs=1e-6)
    # trace replay asked for exact output lengths: ok answers are exactly max_tokens long
    for r, q in zip(recs, sched.requests, strict=True):
        if q.phase == "trace" and r.status == "ok":
            assert q.ignore_eos and r.output_tokens == q.max_tokens, (r.output_tokens, q.max_tokens)
    lags = [r for r in recs if r.sent_t is not None]
    s = res.summary
    figures = {
        "scheduled": n,
        "status": {k: v for k, v in s.status_counts.items() if v},
        "by_phase": {
            p.name: {
                st: sum(1 for r in recs if r.phase == p.name and r.status == st)
                for st in sorted({r.status for r in recs if r.phase == p.name})
            }
            for p in sched.phases
        },
        "dispatch_lag_ms": {
            "p50": round(1e3 * (s.dispatch_lag_p50_s or 0), 2),
            "p99": round(1e3 * (s.dispatch_lag_p99_s or 0), 2),
            "max": round(1e3 * (s.dispatch_lag_max_s or 0), 2),
        },
        "send_lag_p99_ms": round(1e3 * (s.send_lag_p99_s or 0), 2),
        "ttft_p50_s": quantile(
            [r.first_content_t - r.sent_t for r in recs if r.status == "ok"], 0.5
        ),
        "e2e_p50_s": quantile([r.done_t - r.sent_t for r in recs if r.status == "ok"], 0.5),
        "sent": len(lags),
        "durable_at_kill": len(arm.at_kill),
        "trustworthy": s.trustworthy,
        "reasons": s.reasons,
    }
    # the generator itself kept time (2 busy cores, two engines and two generators at once, and
    # in make test the other worker's tests beside them: p99 115 ms seen there once, so 250 ms;
    # a dispatcher that falls behind by seconds still fails)
    assert s.dispatch_lag_p99_s is not None and s.dispatch_lag_p99_s < 0.25, figures
    return figures


def test_mixed_schedule_on_the_real_builtin_and_llamacpp_servers(tmp_path, capsys):
    from specpilot.engine.loader import default_target_path

    target = default_target_path()
    sched = build_schedule(str(_workload(tmp_path)))
    n = len(sched.requests)
    assert 40 <= n <= 90 and sched.phases[-1].start_s + sched.phases[-1].duration_s < 32
    builtin = BuiltinBackend(
        no_draft=True,
        extra_args=[
            "--threads", "1", "--max-slots", "1", "--max-queued", "1",
            "--served-model-name", MODEL, "--max-seq-len", "2048",
        ],
    )  # fmt: skip
    llama = LlamaCppBackend(
        LlamaCppConfig(model=target, threads=1, n_parallel=2, n_ctx=4096, alias=MODEL)
    )
    started = threading.Thread(target=builtin.start, kwargs={"timeout_s": 120})
    t0 = time.perf_counter()
    started.start()
    try:
        llama.start()
        started.join()
        startup_s = time.perf_counter() - t0
        assert builtin.scrape().metrics is not None  # healthy and scrapable
        # ignore_eos is sent and honoured by both engines
        for be in (builtin, llama):
            plain, forced = _ignore_eos_check(
                be.endpoint, response_extras_for(be.name, strict=True)
            )
            assert plain.status == forced.status == "ok", (plain.error, forced.error)
            assert plain.finish_reason == "stop" and plain.output_tokens < 40, plain
            assert forced.finish_reason == "length" and forced.output_tokens == 40, forced
        manifests = {"builtin": builtin.describe(), "llamacpp": llama.describe()}
        store = Store(tmp_path / "run.duckdb")
        store.add_pilot(PilotRecord("e2e", sched.name, {}, "", "0", time.time(),
                                    schedule=sched.to_dict()))  # fmt: skip
        for n, (name, m) in enumerate(manifests.items()):  # one run per arm
            store.add_arm(ArmRecord("e2e", f"e2e-{name}", name, "extra", name, m.to_dict(),
                                    run_order=n))  # fmt: skip
        for name, be in (("builtin", builtin), ("llamacpp", llama)):
            store.add_snapshots([be.scrape(f"e2e-{name}", name, "all", "before")])
        arms = [
            _Arm("builtin", builtin, sched, store, "e2e-builtin"),
            _Arm("llamacpp", llama, sched, store, "e2e-llamacpp"),
        ]
        for a in arms:
            a.thread.start()
        for a in arms:
            a.thread.join(120)
            assert not a.thread.is_alive(), f"{a.name} run did not end"
            if a.error is not None:
                raise a.error
        store.close()
    finally:
        builtin.stop()
        llama.stop()
    data = read_pilot(tmp_path / "run.duckdb")
    figures: dict[str, Any] = {"startup_s": round(startup_s, 1)}
    with Store(tmp_path / "run.duckdb", read_only=True) as st:
        for a in arms:
            final = st.requests(a.run_id, arm=a.name)
            chunks = st.records("chunks", run_id=a.run_id, arm=a.name)
            figures[a.name] = _check_arm(a, sched, final, chunks)
    stored_manifests = {arm.arm: arm.manifest for arm in data.arms}
    snaps = data.snapshots
    man = manifests["builtin"]
    assert man.models[0].role == "target" and len(man.models[0].sha256 or "") == 64
    assert man.speculative["draft"] is None and "--no-draft" in man.launch
    assert set(stored_manifests) == {"builtin", "llamacpp"}
    assert {s.arm for s in snaps} == {"builtin", "llamacpp"}
    # the builtin engine reports every round: one prefill per ok request, rounds add up
    builtin_ok = [r for r in arms[0].result.records if r.status == "ok"]
    prefills = {p.request_id for p in data.prefills if p.arm == "builtin"}
    rounds = {rr.request_id: rr for rr in data.request_rounds if rr.arm == "builtin"}
    assert builtin_ok and all(r.request_id in prefills for r in builtin_ok)
    # the prefill commits the first token, the rounds the others (warm-up requests are not in
    # the round aggregates: the analysis leaves them out)
    assert any(r.warmup for r in builtin_ok)
    assert not {r.request_id for r in builtin_ok if r.warmup} & set(rounds)
    for r in (r for r in builtin_ok if not r.warmup):
        assert 1 + (rounds[r.request_id].committed if r.request_id in rounds else 0) == (
            r.output_tokens
        ), r.request_id
    b = figures["builtin"]["status"]
    assert b.get("rejected", 0) >= 1  # the one-slot, one-queue server turned requests away
    assert all(
        r.http_status in (429, 503) for r in arms[0].result.records if r.status == "rejected"
    )
    assert any(r.http_status == 429 for r in arms[0].result.records)
    with capsys.disabled():
        print("\nE2E FIGURES " + json.dumps(figures, indent=1, default=str))


def test_load_command_starts_the_engine_for_a_full_manifest(tmp_path, capsys):
    """``specpilot load --start --engine llamacpp``: the run records describe()'s manifest."""
    wl = tmp_path / "w.yaml"
    wl.write_text(
        "seed: 1\ngroups: {structured: {output: {mean: 4}}}\n"
        "phases: [{name: p, duration_s: 1, arrival: {kind: constant, rate: 3}}]\n"
    )
    out = tmp_path / "run.duckdb"
    argv = ["load", "--start", "--engine", "llamacpp", "--engine-opt", "threads=1"]
    argv += ["--engine-opt", "n_ctx=2048", "--workload", str(wl), "--out", str(out)]
    rc = main([*argv, "--quiet", "--run-id", "s1"])
    assert rc == 0, capsys.readouterr().err
    data = read_pilot(out)
    man = data.arms[0].manifest
    recs = data.requests
    # the phase's edges; its series scraped while it ran (label "during") lie between them
    snaps = [s for s in data.snapshots if s.label != "during"]
    during = [s for s in data.snapshots if s.label == "during"]
    assert all(snaps[0].t <= s.t <= snaps[-1].t for s in during)
    assert man["started_by_specpilot"] is True and man["engine"] == "llamacpp"
    assert len(man["models"][0]["sha256"]) == 64 and len(man["tokenizer_sha256"]) == 64
    assert man["launch"][0] == "llama-server" and man["hardware"]["cpu_logical_cores"] >= 1
    assert len(recs) == 3 and all(r.status == "ok" for r in recs)
    assert [s.label for s in snaps] == ["before", "after"]
    assert snaps[1].metrics["generation_tokens"] - snaps[0].metrics.get("generation_tokens", 0) >= 3
    assert snaps[0].rss_bytes > 50e6  # the engine's own process, measured
    assert data.arms[0].cold_start_s > 0 and data.arms[0].strategy.kind == "none"
    # the pilot's manifest of an arm (pilot.plan.arms.arm_manifest): frozen settings and capacity
    # (n_ctx 2048 over the default 2 parallel slots: 1024 tokens each)
    assert man["frozen"]["threads"] == 1 and man["frozen"]["context_limit"] == 1024
    assert man["capacity"] == {"n_parallel": 2} and len(man["frozen_sha256"]) == 64
    assert data.arms[0].arm == "baseline" and data.arms[0].role == "baseline"
    # the engine was stopped: nothing listens on its endpoint any more
    with pytest.raises(httpx.HTTPError):
        httpx.get(man["endpoint"] + "/health", timeout=1.0)
