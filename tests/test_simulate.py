"""The serving simulator against queueing theory and the Leviathan expectation (issue 23)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

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

    data = full_case()
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
    fig = predict(calibrate(full_case(), "spec"), w)
    assert fig.requests == 3 and fig.ok == 3 and fig.e2e_p50 is not None
