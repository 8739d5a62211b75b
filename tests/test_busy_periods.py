"""Requests on the server together are one observation (``analysis.clusters``).

The case seen on 2026-12-02 (AMD EPYC AVX-512 kind, the A/A control of two default pilots): in
a 6 s burst every request shared one busy period, and the machine's moment moved every pair's
difference alike (+0.07 to +0.13 in log task time): counted as independent pairs the A/A
control came out "slower" (t = 14). These tests rebuild that shape on seeded synthetic arms:
a shift shared by every request of one busy period, small noise of each request's own.
"""

from __future__ import annotations

import numpy as np
import pytest

from pilot_cases import compare
from specpilot.analysis.clusters import busy_periods
from specpilot.analysis.requests import RequestTable
from specpilot.records import RequestRecord

RUNS = 100


def pilot(
    seed: int,
    *,
    periods: int,
    per: int,
    factor: float = 1.0,
    times: bool = True,
    deadline: float | None = None,
):
    """Two arms replaying one phase: ``periods`` busy periods of ``per`` overlapping requests
    each; every period of an arm's run shares one random shift (sd 5%), each request adds 1%."""
    rng = np.random.default_rng(seed)
    reqs = []
    for arm, f in (("base", 1.0), ("cand", factor)):
        shift = rng.lognormal(0, 0.05, periods)
        for p in range(periods):
            for j in range(per):
                i = p * per + j
                # the period's requests arrive together and take 3 s each; ``times=False``
                # spreads them out in the records, which is the independent-pairs method
                t0 = 30.0 * p + 0.2 * j if times else 100.0 * i
                e2e = 3.0 * f * shift[p] * rng.lognormal(0, 0.01)
                reqs.append(request(arm, i, t0, e2e, deadline))
    return RequestTable.build(reqs)


def request(arm: str, i: int, t0: float, e2e: float, deadline: float | None) -> RequestRecord:
    """The ``i``-th scheduled request of ``arm``'s run: sent at ``t0``, ok after ``e2e``."""
    rid, run = f"burst-{i:06d}", f"run-{arm}"
    return RequestRecord(
        run, arm, "burst", "code", rid, t0, "ok", sent_t=t0, first_content_t=t0 + 0.3,
        done_t=t0 + e2e, output_tokens=40, deadline_s=deadline, prompt_id=f"p{i}",
    )  # fmt: skip


def pooled(t: RequestTable):
    out = compare(t, "base", "cand", resamples=50, seed=1, level=0.95, min_pairs=8)
    return next(c for c in out if c.task_group == "*")


def test_labels_join_what_either_arm_queued_and_split_at_common_idle() -> None:
    key = np.array([0, 0, 0, 0, 1, 1])
    sent = np.array([0.0, 1.0, 10.0, 20.0, 0.0, 1.0])
    done_b = np.array([0.5, 1.5, 25.0, 21.0, 0.5, 1.5])  # baseline: 10 s still busy at 20 s
    done_c = np.array([2.0, 1.5, 11.0, 21.0, 0.5, 1.5])  # candidate: 0 still busy at 1 s
    labels = busy_periods(key, sent, done_b, sent, done_c)
    assert labels.tolist() == [0, 0, 1, 1, 2, 3]  # another run (key) always starts a new one


def test_a_burst_of_one_busy_period_gives_no_direction_to_identical_arms() -> None:
    cells = [pooled(pilot(s, periods=1, per=10)) for s in range(RUNS)]
    assert all(c.clusters == 1 and c.outcome == "insufficient" for c in cells)
    assert "busy period" in cells[0].method


def test_identical_arms_over_many_busy_periods_stay_within_the_nominal_rate() -> None:
    hits = sum(
        pooled(pilot(s, periods=8, per=3)).outcome in ("faster", "slower") for s in range(RUNS)
    )
    assert hits <= 0.05 * RUNS, f"{hits} of {RUNS} A/A cells directional"


def test_counting_queued_requests_as_independent_fails_the_same_test() -> None:
    # the negative control: the same differences recorded as if apart are independent pairs,
    # the method before clustering, and the shared shift makes them directional far too often
    hits = sum(
        pooled(pilot(s, periods=1, per=10, times=False)).outcome in ("faster", "slower")
        for s in range(RUNS)
    )
    assert hits > 0.3 * RUNS, f"only {hits} of {RUNS}: the case lost its teeth"


def test_a_real_slowdown_over_enough_busy_periods_is_still_found() -> None:
    found = sum(
        pooled(pilot(s, periods=10, per=3, factor=1.5)).outcome == "slower" for s in range(20)
    )
    assert found >= 18


def test_requests_late_together_are_one_late_observation() -> None:
    # the candidate's one burst runs past the deadline on every request: one busy period, so
    # one observation of lateness, not ten (McNemar on the pairs: p = 0.002, "slower")
    late = pooled(pilot(0, periods=1, per=10, factor=1.3, deadline=3.5))
    assert late.outcome == "insufficient" and late.p_on_time == 1.0
    apart = pooled(pilot(0, periods=1, per=10, factor=1.3, deadline=3.5, times=False))
    assert apart.outcome == "slower" and apart.p_on_time < 0.01


def test_the_on_time_test_of_many_clusters_is_the_mcnemar_test_in_its_normal_limit() -> None:
    # 8,000 pairs apart (each its own cluster), 6,000 discordant (above SIGN_FLIP_MAX): the
    # candidate late on 3,100 the baseline made, on time on 2,900 it missed; the exact McNemar
    # p (scipy) and the normal limit agree
    from scipy import stats as sp

    from specpilot.analysis.paired import SIGN_FLIP_MAX

    def late(arm: str, i: int) -> bool:
        return (arm == "cand" and i < 3100) or (arm == "base" and 3100 <= i < 6000)

    reqs = [
        request(arm, i, 10.0 * i, 5.0 if late(arm, i) else 2.0, 3.0)
        for arm in ("base", "cand")
        for i in range(8000)
    ]
    c = pooled(RequestTable.build(reqs))
    want = sp.binomtest(2900, 6000, 0.5).pvalue
    assert SIGN_FLIP_MAX < 6000 and c.clusters == 8000
    assert c.p_on_time == pytest.approx(want, rel=0.15)
