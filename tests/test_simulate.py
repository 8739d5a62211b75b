"""The serving simulator against queueing theory and the Leviathan expectation (issue 23)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from specpilot.analysis.base.fold import fold
from specpilot.records import RequestRounds
from specpilot.simulate import rounds_needed, simulate
from specpilot.simulate.costs import _committed

TAU = 0.01  # one engine step: a request's service is its steps x TAU


def _erlang_c_wait(c: int, lam: float, mu: float) -> float:
    a = lam / mu
    top = a**c / math.factorial(c) * c / (c - a)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return p_wait / (c * mu - lam)


def _mmc(n: int, c: int, lam: float, seed: int, router: str = "round_robin", replicas: int = 1):
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / lam, n))
    steps = rng.geometric(TAU, n)  # mean 1/TAU steps of TAU s: service ~ exponential, mean 1 s
    r = simulate(arrival, np.zeros(n, dtype=np.int64), steps, step_s=lambda b: TAU,
                 prefill_s=lambda p: 0.0, slots=c, replicas=replicas, router=router)  # fmt: skip
    return arrival, steps, r


def test_speculation_off_matches_erlang_c_and_littles_law():
    c, lam, n = 3, 2.4, 200_000  # utilisation 0.8
    _, steps, r = _mmc(n, c, lam, seed=1)
    assert r.ok.all()
    # a request's service is its prefill step (TAU: no prompt, the step of the batch) and its
    # decode steps: (steps + 1) x TAU, mean 1.01 s; the rest of its E2E is the queue
    wait = r.e2e - (steps + 1) * TAU
    batches = wait[n // 10 :].reshape(20, -1).mean(axis=1)  # warm-up dropped; batch means
    est, se = batches.mean(), batches.std(ddof=1) / math.sqrt(len(batches))
    theory = _erlang_c_wait(c, lam, 1.0 / (1.0 + TAU))
    assert abs(est - theory) < 3 * se + TAU, (est, theory, se)
    assert theory > 0.3  # a queue that matters: the check can fail
    # Little's law: the time-average number present equals arrival rate x mean time in system
    occupancy = sum(r.area) / r.span_s
    assert occupancy == pytest.approx(n / r.span_s * r.e2e.mean(), rel=0.01)


def test_least_loaded_routing_waits_less_than_round_robin():
    kw = {"n": 40_000, "c": 1, "lam": 1.6, "seed": 3, "replicas": 2}
    _, s1, rr = _mmc(router="round_robin", **kw)
    _, s2, ll = _mmc(router="least_loaded", **kw)
    assert (ll.e2e - (s2 + 1) * TAU).mean() < 0.8 * (rr.e2e - (s1 + 1) * TAU).mean()
    assert set(rr.replica.tolist()) == {0, 1} and set(ll.replica.tolist()) == {0, 1}


def test_a_hand_built_round_distribution_gives_leviathans_tokens_per_round():
    k, alpha = 3, 0.7
    p = np.array([alpha**j * (1 - alpha) for j in range(k)] + [alpha**k])  # P(accept exactly j)
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    counts = np.round(p * 100_000).astype(int).tolist()
    rr = [RequestRounds("r", "s", "peak", "code", "q", 10, 10, 30, 21, 31, 0, 0.1, 0,
                        pos_proposed=[10] * k, pos_accepted=[7, 5, 3], accepted_hist=counts)]  # fmt: skip
    values, probs = _committed(rr, [])["code"]
    assert float(values @ probs) == pytest.approx(expected, rel=1e-4)
    tokens = np.full(20_000, 400)
    steps = rounds_needed(tokens, values, probs, np.random.default_rng(0))
    assert (tokens.sum() / steps.sum()) == pytest.approx(expected, rel=0.01)
    assert (steps >= np.ceil(tokens / (k + 1))).all() and (steps <= tokens).all()


def test_the_report_section_gives_a_crossover_only_for_validated_simulations():
    from pilot_cases import full_case
    from specpilot.simulate.section import pilot_simulation

    data = fold(full_case())
    sim = pilot_simulation(data, [("base", "spec")], requests=300)
    by_arm = {v["arm"]: v for v in sim["validations"]}
    assert set(by_arm) == {"base", "spec"}, sim["notes"]
    for v in by_arm.values():
        gated = [c for c in v["checks"] if c["gated"]]
        assert gated and v["validated"] == all(c["within"] for c in gated)
        assert v["profile"].startswith("pilot ")
    (x,) = sim["crossovers"]
    both = by_arm["base"]["validated"] and by_arm["spec"]["validated"]
    assert x["validated"] == both and (x["bracket"] is None or both)
    assert ("not validated" in x["text"]) != both
    (ks,) = sim["k_schedules"]
    ranges = ks["ranges"]
    assert ranges[0][0] == 1 and all(0 <= r[2] <= 3 for r in ranges)
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))  # contiguous
    assert '"num_speculative_tokens_per_batch_size"' in ks["vllm_speculative_config"]


def test_a_trace_replays_at_its_own_gaps_times_the_scale(tmp_path):
    from pilot_cases import full_case
    from specpilot.simulate import calibrate, predict
    from specpilot.simulate.predict import trace_workload

    f = tmp_path / "t.csv"
    f.write_text("timestamp,input_tokens,output_tokens\n0,10,5\n1,20,6\n3,30,7\n")
    w = trace_workload(str(f), time_scale=2.0)
    assert w.arrival_t.tolist() == [0.0, 2.0, 6.0] and w.output_tokens.tolist() == [5, 6, 7]
    assert w.prompt_tokens.tolist() == [10, 20, 30] and set(w.group) == {"*"}
    fig = predict(calibrate(fold(full_case()), "spec"), w)
    assert fig.requests == 3 and fig.ok == 3 and fig.e2e_p50 is not None


def test_a_client_that_gives_up_leaves_the_batch_at_the_next_step_and_frees_its_slot():
    kw = {"step_s": lambda b: 0.1, "prefill_s": lambda p: 0.05, "slots": 1}
    arrival, prompts, steps = np.array([0.0, 0.0]), np.array([10, 10]), np.array([10, 2])
    keep = simulate(arrival, prompts, steps, **kw)
    assert keep.ok.all() and keep.e2e.tolist() == pytest.approx([1.05, 1.30])
    # A's client gives up at 0.35 s: the boundary at 0.35 drops it, B is prefilled by 0.40 and
    # takes two steps; a request that would finish after its client left is no completion
    r = simulate(arrival, prompts, steps, abort_s=np.array([0.35, np.inf]), **kw)
    assert r.status.tolist() == ["timeout", "ok"]
    assert r.ttft[1] == pytest.approx(0.40) and r.e2e[1] == pytest.approx(0.60)
    assert math.isinf(r.e2e[0])
    # a queued request whose client gave up before a slot freed never starts
    q = simulate(arrival, prompts, steps, abort_s=np.array([np.inf, 0.5]), **kw)
    assert q.status.tolist() == ["ok", "timeout"] and math.isinf(q.ttft[1])


def test_a_request_that_did_not_finish_is_replayed_with_what_it_asked_for():
    import dataclasses

    from pilot_cases import full_case
    from specpilot.simulate.predict import measured

    data = fold(full_case())
    spec = [r for r in data.requests if r.arm == "spec" and r.phase == "peak"]
    cut = spec[0]
    cut.status, cut.output_tokens, cut.prompt_tokens = "timeout", 7, None  # what it got
    twin = next(r for r in data.requests if r.arm == "base" and r.request_id == cut.request_id)
    twin.output_tokens, twin.prompt_tokens = 123, 77
    w, _ = measured(data, "spec", "peak")
    i = sorted(spec, key=lambda r: r.scheduled_t).index(cut)
    assert (w.prompt_tokens[i], w.output_tokens[i]) == (77, 123)  # the same slot in another arm
    # with no finished twin anywhere, its planned max_tokens from the schedule
    for r in data.requests:
        if r.request_id == cut.request_id and r is not cut:
            r.status = "error"
    episode, idx = cut.request_id.rsplit("-", 1)  # the schedule names the episode phase
    sched = {"requests": [{"phase": episode, "index": int(idx), "max_tokens": 321}]}
    data = dataclasses.replace(data, pilot=dataclasses.replace(data.pilot, schedule=sched))
    w, _ = measured(data, "spec", "peak")
    assert w.output_tokens[i] == 321 and w.prompt_tokens[i] == 100  # the phase's median prompt


def test_the_step_cost_is_the_measured_step_cadence_where_the_file_has_it():
    from pilot_cases import PHASES, full_case
    from specpilot.records import StepCadence
    from specpilot.simulate import calibrate

    data = fold(full_case())
    p, other = list(PHASES)
    assert calibrate(data, "spec", [p]).step.source == "rounds"  # no cadence: the rounds' times
    data.step_cadence = [
        StepCadence("spec", p, 1, 10, 0.2, 0.19, 0.22),
        StepCadence("spec", p, 3, 30, 0.5, 0.45, 0.6),
        StepCadence("spec", other, 1, 10, 9.9, 9.0, 10.0),  # another phase: not used
    ]
    step = calibrate(data, "spec", [p]).step
    assert step.source == "cadence" and step.samples == 40
    assert (step(1), step(3)) == (0.2, 0.5)  # measured batch sizes: their medians
    assert step(2) == pytest.approx(0.35) and step(5) == pytest.approx(0.8)  # the line between


@pytest.mark.parametrize("sigmas", [6.0, -3.0])  # -3: most rows short, the second draw path
def test_rounds_drawn_in_blocks_match_one_step_at_a_time(monkeypatch, sigmas):
    """``draw_rounds`` draws fewer values than the need (rows sorted by need, a width with
    spare standard deviations, short rows topped up): the steps it returns have the
    distribution of drawing one step at a time until the need is met, and each row's kept
    values reach the need exactly at its step count."""
    from specpilot.simulate import costs

    monkeypatch.setattr(costs, "DRAW_SIGMAS", sigmas)
    values, probs = np.array([1, 2, 4, 7]), np.array([0.4, 0.3, 0.2, 0.1])
    rng = np.random.default_rng(3)
    need = rng.integers(0, 200, 4000)
    steps, seqs = costs.draw_rounds(need, values, probs, np.random.default_rng(4), keep=True)
    assert seqs is not None
    for i in range(0, 4000, 7):
        c = np.cumsum(seqs[i])
        assert steps[i] == (0 if need[i] == 0 else int(np.argmax(c >= need[i])) + 1)
        assert need[i] == 0 or c[steps[i] - 1] >= need[i] > (c[steps[i] - 2] if steps[i] > 1 else 0)
    ref = np.zeros(len(need), dtype=np.int64)  # one step at a time
    for i, m in enumerate(need):
        total = 0
        while total < m:
            total += int(rng.choice(values, p=probs))
            ref[i] += 1
    assert abs(steps.mean() - ref.mean()) < 4 * np.sqrt(ref.var() / len(ref) * 2)
    assert abs(np.quantile(steps, 0.9) - np.quantile(ref, 0.9)) <= 3


def test_the_step_by_step_model_at_a_fixed_k_reproduces_the_event_model():
    """The k-schedule check runs step by step; at a fixed k it must give the event model's
    figures (same arrivals, costs and acceptance), and a schedule that drafts less must commit
    fewer tokens per step."""
    from specpilot.simulate import stepwise

    rng = np.random.default_rng(5)
    n = 3000
    arrival = np.cumsum(rng.exponential(2.2, n))  # about 80% busy at 4 slots
    prompts = rng.integers(50, 300, n)
    outputs = rng.integers(20, 120, n)
    group = np.full(n, "*", dtype=object)
    a_values, p = np.arange(4), np.array([0.4, 0.25, 0.15, 0.2])  # accepted drafts at K = 3
    step = lambda b: 0.1 + 0.03 * b  # noqa: E731
    pre = lambda m: 0.001 * m  # noqa: E731
    abort = np.full(n, 20.0)
    steps = rounds_needed(outputs - 1, a_values + 1.0, p, np.random.default_rng(1))
    ev = simulate(arrival, prompts, steps, step_s=step, prefill_s=pre, slots=4, abort_s=abort)
    sw = stepwise.run(arrival, prompts, outputs, group, accepted={"*": (a_values, p)},
                      k_of_b=lambda b: 3, step_k=lambda b, k: step(b), prefill_s=pre, slots=4,
                      abort_s=abort, seed=1)  # fmt: skip
    # the same seed draws the same acceptance per request in both: the same run, event by event
    assert (sw.status == ev.status).all() and 0.8 < ev.ok.mean() < 0.99  # some give up
    assert np.allclose(sw.e2e[ev.ok], ev.e2e[ev.ok]) and np.allclose(sw.ttft[ev.ok], ev.ttft[ev.ok])
    assert sw.k_steps.keys() == {3}
    one = stepwise.run(arrival, prompts, outputs, group, accepted={"*": (a_values, p)},
                       k_of_b=lambda b: 1 if b > 1 else 3, step_k=lambda b, k: step(b),
                       prefill_s=pre, slots=4, abort_s=abort, seed=1)  # fmt: skip
    assert set(one.k_steps) == {1, 3} and np.mean(one.e2e[one.ok]) > np.mean(sw.e2e[sw.ok])


PROFILE = """\
name: gpu-x
source: vllm bench latency on gpu-x, 2026-11-20
slots: 32
overhead_s: 0.002
plain:
  - {batch: 1, step_s: 0.010}
  - {batch: 32, step_s: 0.020}
speculative:
  k: 3
  steps:
    - {batch: 1, step_s: 0.014}
    - {batch: 32, step_s: 0.050}
prefill:
  - {tokens: 100, seconds: 0.01}
  - {tokens: 1000, seconds: 0.05}
"""


def test_a_hardware_profile_replaces_the_costs_and_keeps_the_pilots_acceptance(tmp_path):
    from pilot_cases import full_case
    from specpilot.simulate import calibrate
    from specpilot.simulate.profile import apply, load_profile

    f = tmp_path / "gpu.yaml"
    f.write_text(PROFILE)
    prof = load_profile(f)
    data = fold(full_case())
    own = calibrate(data, "spec")
    got = apply(own, prof, str(f))
    assert got.committed == own.committed and got.k == own.k  # acceptance: the pilot's
    assert got.slots == 32 and got.overhead_s == 0.002
    assert got.step(1) == 0.014 and got.step(16.5) == pytest.approx(0.032)  # interpolated
    assert got.prefill(550) == pytest.approx(0.03)
    assert (
        "gpu-x" in got.profile
        and "vllm bench latency" in got.profile
        and own.profile in got.profile
    )
    plain = apply(calibrate(data, "base"), prof)
    assert plain.step(32) == 0.020  # a plain arm takes the plain curve


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("source: vllm bench latency on gpu-x, 2026-11-20\n", ""), [":1: source: Field required"]),
        (
            ("    - {batch: 1, step_s: 0.014}", "    - {batch: 1, step_s: -1}"),
            ["gpu.yaml:11: speculative.steps[0].step_s: Input should be greater than 0"],
        ),
        (("slots: 32", "slot: 32"), ["slot", "did you mean 'slots'"]),
    ],
)
def test_a_broken_profile_names_the_field_and_the_line(tmp_path, edit, expected):
    from specpilot.errors import InputFileError
    from specpilot.simulate.profile import load_profile

    f = tmp_path / "gpu.yaml"
    f.write_text(PROFILE.replace(*edit))
    with pytest.raises(InputFileError) as e:
        load_profile(f)
    for part in expected:
        assert part in e.value.describe(), e.value.describe()


def test_a_profile_without_the_arms_k_is_refused(tmp_path):
    from pilot_cases import full_case
    from specpilot.errors import InputFileError
    from specpilot.simulate import calibrate
    from specpilot.simulate.profile import apply, load_profile

    f = tmp_path / "gpu.yaml"
    f.write_text(PROFILE.replace("  k: 3", "  k: 5"))
    with pytest.raises(InputFileError) as e:
        apply(calibrate(fold(full_case()), "spec"), load_profile(f))
    assert "speculative.k is 5, arm spec drafts k=3" in str(e.value)
    assert e.value.fix == "measure the profile at k=3"


def test_the_gate_says_how_far_apart_identical_arms_are_on_the_same_figures():
    """A prediction cannot be checked more closely than the A/A control agrees with the
    baseline: the validation carries that floor and says when it exceeds the gate."""
    import dataclasses

    from pilot_cases import full_case
    from specpilot.simulate import validate
    from specpilot.simulate.predict import measured

    data = fold(full_case())
    _, b = measured(data, "base", "peak")
    _, c = measured(data, "ctl", "peak")
    want = max(abs(c.e2e_p50 - b.e2e_p50) / b.e2e_p50, abs(c.e2e_p99 - b.e2e_p99) / b.e2e_p99)
    v = validate(data, "spec", ["off_peak"], ["peak"])
    assert v.aa_floor == pytest.approx(want) and "cannot validate" not in v.text
    for r in data.requests:  # the control twice as slow at peak: no gate can pass on this file
        if r.arm == "ctl" and r.phase == "peak" and r.done_t is not None:
            r.done_t = r.sent_t + 2 * (r.done_t - r.sent_t)
    v = validate(data, "spec", ["off_peak"], ["peak"])
    assert v.aa_floor > 0.5 and "this file cannot validate a simulation" in v.text
    no_control = dataclasses.replace(data, arms=[a for a in data.arms if a.role != "control"])
    assert validate(no_control, "spec", ["off_peak"], ["peak"]).aa_floor is None
    # a calibration phase that shared the machine more than the predicted one is named
    data.phases = [
        dataclasses.replace(p, other_cpu_cores=1.2 if p.phase == "off_peak" else 0.1)
        for p in data.phases
    ]
    v = validate(data, "spec", ["off_peak"], ["peak"])
    want = "spec/off_peak: 1.20 cores used outside the pilot (0.10 beside spec/peak)"
    assert v.contended == (want,)
    assert v.text.endswith("; measured on a shared machine: " + want)


def test_each_gated_figure_carries_its_own_interval_and_a_coarse_one_is_said():
    """A p99 of a few requests cannot test a 15% gate: its own interval has no upper bound."""
    from pilot_cases import full_case
    from specpilot.simulate import validate

    data = fold(full_case())
    v = validate(data, "spec", ["off_peak"], ["peak"])
    p50, p99 = (next(c for c in v.checks if c.metric == m) for m in ("e2e_p50", "e2e_p99"))
    assert p50.measured_low < p50.measured < p50.measured_high
    ok = sum(r.arm == "spec" and r.phase == "peak" and r.status == "ok" for r in data.requests)
    assert ok < 299 and p99.measured_high is None and p99.coarse
    assert "own 95% interval is wider than the gate on" in v.text


def test_a_plain_arm_without_rounds_is_calibrated_from_its_requests_timings():
    """vLLM without speculation (or any endpoint) reports no rounds: each ok request's decode
    time per token is a step at the number of the arm's requests decoding beside it."""
    import dataclasses

    from pilot_cases import full_case
    from specpilot.records import RequestRecord
    from specpilot.simulate import calibrate
    from specpilot.simulate.costs import _request_steps

    def req(i, first, done, decode):
        return RequestRecord("run-base", "base", "peak", "code", f"peak-{i:06d}", first - 0.5,
                             "ok", sent_t=first - 0.5, first_content_t=first, done_t=done,
                             output_tokens=11, prompt_tokens=50, decode_s=decode,
                             prefill_s=0.4)  # fmt: skip

    data = dataclasses.replace(fold(full_case()), request_rounds=[], step_cadence=[],
                               requests=[req(0, 0.0, 10.0, 10.0), req(1, 5.0, 15.0, 8.0)])  # fmt: skip
    x, y = _request_steps(data, "base", {"peak"})
    assert x.tolist() == [1.5, 1.5] and y.tolist() == pytest.approx([1.0, 0.8])
    costs = calibrate(data, "base", ["peak"])
    assert costs.step.source == "requests" and costs.step(1.5) == pytest.approx(0.9)
    assert costs.k is None and costs.prefill(50) == pytest.approx(0.4)


def test_an_arm_with_totals_only_takes_its_labelled_k_and_gets_no_k_schedule():
    """llama.cpp reports drafted / accepted per response, not which steps drafted: k is the
    arm's own setting (it read the total drafted tokens of a request), and no k schedule is
    derived without per-position acceptance."""
    import dataclasses

    from pilot_cases import full_case
    from specpilot.errors import ConfigError
    from specpilot.simulate import calibrate
    from specpilot.simulate.kschedule import k_schedule

    data = fold(full_case())
    data.request_rounds = [
        dataclasses.replace(r, spec_rounds=0, pos_proposed=[], pos_accepted=[], accepted_hist=[])
        if r.arm == "spec" else r
        for r in data.request_rounds
    ]  # fmt: skip
    rec = next(a for a in data.arms if a.arm == "spec")
    assert rec.strategy.k == 3 and any(
        r.proposed > 3 for r in data.request_rounds if r.arm == "spec"
    )
    assert calibrate(data, "spec").k == 3
    with pytest.raises(ConfigError, match="no per-position acceptance"):
        k_schedule(data, "base", "spec")


def test_the_crossover_says_where_speculation_stops_paying_with_unfinished_requests_counted():
    """A candidate cheaper per token alone but dearer per token in a full batch beats the
    baseline at low rates and stops between two simulated rates; one dearer everywhere beats
    it nowhere (its survivors' p50 is not evidence: unfinished requests count as slowest)."""
    from specpilot.simulate import Workload, crossover
    from specpilot.simulate.costs import ArmCosts, StepCurve, fit_linear

    def arm(name, a, b, committed, k):
        line = fit_linear(np.array([1.0, 8.0]), np.array([a + b, a + 8 * b]))
        return ArmCosts(name, "builtin", StepCurve({}, line), fit_linear(np.array([100.0]), np.array([0.02])),
                        0.0, 8, k, {"*": (np.array([float(committed)]), np.ones(1))})  # fmt: skip

    plain = arm("plain", 0.05, 0.005, 1, None)  # 0.055 s a token alone, 0.0112 a token at 8
    spec = arm("spec", 0.06, 0.03, 2, 3)  # 0.045 s a token alone, 0.0188 a token at 8
    n = 40
    nan = np.full(n, np.nan)
    template = Workload(np.arange(n) * 1.0, np.full(n, 100), np.full(n, 50),
                        np.full(n, "*", dtype=object), nan, nan.copy(), float(n))  # fmt: skip
    rates = [0.05, 0.1, 0.2, 4.0, 8.0]
    x = crossover(plain, spec, template, rates, n=400, seeds=(0, 1, 2))
    assert x.outcome[0] == "beats" and x.outcome[-1] == "loses", x
    assert x.bracket is not None and x.bracket[0] < x.bracket[1] and "stops between" in x.text
    slow = arm("slow", 0.2, 0.03, 1, 3)
    y = crossover(plain, slow, template, rates, n=400, seeds=(0, 1, 2))
    assert set(y.outcome) == {"loses"} and y.bracket is None and "at no simulated rate" in y.text


def test_a_queued_client_that_gives_up_leaves_at_that_moment_not_when_a_slot_frees():
    """Little's law with give-ups: the time integral counts a queued request only until its
    client left, and the least-loaded router does not count it after that."""
    kw = {"step_s": lambda b: 1.0, "prefill_s": lambda p: 0.0, "slots": 1}
    # A holds the one slot for 10 steps; B queues at 0.5 and gives up 1 s later
    r = simulate(np.array([0.0, 0.5]), np.array([0, 0]), np.array([10, 2]),
                 abort_s=np.array([np.inf, 1.0]), **kw)  # fmt: skip
    assert r.status.tolist() == ["ok", "timeout"]
    assert r.area[0] == pytest.approx(10.0 + 1.0)  # not 10 + 9.5: B left at 1.5
    # two replicas: replica 0 busy until 2, replica 1 until 10 with three give-ups queued;
    # F at t = 3 goes to replica 0 (free), not to 1 by counts that include the departed
    arr = np.array([0.0, 0.0, 0.1, 0.2, 0.3, 3.0])
    steps = np.array([2, 10, 1, 1, 1, 1])
    abort = np.array([np.inf, np.inf, 0.1, 0.1, 0.1, np.inf])
    ll = simulate(arr, np.zeros(6, dtype=np.int64), steps, abort_s=abort, replicas=2,
                  router="least_loaded", **kw)  # fmt: skip
    assert ll.replica[0] != ll.replica[1] and ll.replica[5] == ll.replica[0]
    assert ll.e2e[5] == pytest.approx(1.0)  # served at once on the free replica
    with pytest.raises(ValueError, match="slots"):
        simulate(arr, np.zeros(6, dtype=np.int64), steps, slots=0, step_s=lambda b: 1.0,
                 prefill_s=lambda p: 0.0)  # fmt: skip


def test_the_gate_says_when_the_machine_itself_ran_faster_between_phases():
    """Interleaving keeps arms comparable within a phase, not the machine's speed from one
    phase to the next, which a calibration carries over: the gate reports the change of every
    arm's batch-1 step time (the median over arms) and says when it exceeds the tolerance."""
    from pilot_cases import full_case
    from specpilot.records import StepCadence
    from specpilot.simulate import validate
    from specpilot.simulate.validation import phase_speed

    data = fold(full_case())
    data.step_cadence = [
        StepCadence("base", "off_peak", 1, 50, 0.10, 0.09, 0.11),
        StepCadence("base", "peak", 1, 60, 0.05, 0.04, 0.06),  # -50%
        StepCadence("ctl", "off_peak", 1, 50, 0.10, 0.09, 0.11),
        StepCadence("ctl", "peak", 1, 60, 0.06, 0.05, 0.07),  # -40%
        StepCadence("spec", "off_peak", 1, 50, 0.20, 0.18, 0.22),
        StepCadence("spec", "peak", 1, 60, 0.16, 0.15, 0.17),  # -20%
        StepCadence("alt", "peak", 1, 5, 9.0, 8.0, 10.0),  # too few steps to count
    ]
    assert phase_speed(data, ["off_peak"], ["peak"]) == pytest.approx(-0.4)
    v = validate(data, "spec", ["off_peak"], ["peak"])
    assert v.phase_speed == pytest.approx(-0.4)
    assert "the machine's step time at batch 1 moved -40% between the calibration" in v.text
    data.step_cadence = [c for c in data.step_cadence if c.phase == "off_peak"]
    assert phase_speed(data, ["off_peak"], ["peak"]) is None
    assert "step time at batch 1 moved" not in validate(data, "spec", ["off_peak"], ["peak"]).text
