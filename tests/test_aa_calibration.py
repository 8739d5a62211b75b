"""A/A calibration: identical arms on a drifting machine must not come out different.

Seeded synthetic pilots of the episode design with a baseline, a candidate that is *the same*
configuration switched in place, and the A/A control on processes of its own, on the default
pilot's shape (4 groups x 3 load levels, 3-20 pairs per cell, 12 episodes on 3 processes per
arm), with per-request noise, processes that differ for their whole life and a machine that is
a few percent faster or slower during each arm's part of each episode (the drift seen on these
shared 2-core VMs). The verdict's method must give a directional cell in at most the nominal
share of pilots; the method it replaced (a paired percentile bootstrap over requests, no
multiplicity correction) must fail the same test on the same data: that is what shows the test
can fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from pilot_cases import Cell, case
from specpilot.analysis import AnalysisConfig, analyze
from specpilot.analysis.base.fold import fold
from specpilot.analysis.base.requests import RequestTable
from specpilot.records import level_of

GROUPS = ("zh_business", "code", "structured", "longform")
PHASES = ("off_peak", "peak", "burst")
PILOTS = 40
DRIFT_SD = 0.04  # log-scale sd of one arm's speed during one episode, and of one process's
CFG = AnalysisConfig(bootstrap_resamples=200)


def aa_pilot(seed: int, spec: float = 1.0, noise: float = 0.03):
    """One synthetic pilot; ``spec`` = the candidate's true factor (1.0: an A/A pair);
    ``noise``: each request's own latency noise per arm (log sd)."""
    rng = np.random.default_rng([seed, 99])
    sizes = {"off_peak": 4, "peak": 8, "burst": 6}
    cells = {
        (g, p): Cell(
            spec=spec,
            n=int(sizes[p] * (2 if g == "zh_business" else 1) + rng.integers(0, 4)),
            noise=noise,
        )
        for g in GROUPS
        for p in PHASES
    }
    d = case(
        cells,
        alternative=False,
        seed=seed,
        rounds=False,
        process_sd=DRIFT_SD,
        episode_sd=DRIFT_SD,
    )
    for ph in d.phases:
        ph.offered_rate = {"off_peak": 0.35, "peak": 0.7, "burst": 1.4}[level_of(ph.phase)]
    return d


def old_method_directional(d, resamples: int = 200) -> bool:
    """The replaced rule: a percentile bootstrap CI of the ratio of sums excluding zero, per
    cell of >= 2 both-ok pairs, requests as the unit and no correction (the negative
    control)."""
    t = RequestTable.build(fold(d).requests)
    rng = np.random.default_rng(0)
    for p in PHASES:
        for g in (*GROUPS, None):
            m = (t.phase == p) & ((t.task_group == g) if g else True)
            b = t.e2e[m & (t.arm == "base")]
            c = t.e2e[m & (t.arm == "spec")]
            if b.size < 2:
                continue
            idx = rng.integers(0, b.size, size=(resamples, b.size))
            ratio = c[idx].sum(axis=1) / b[idx].sum(axis=1) - 1
            lo, hi = np.quantile(ratio, [0.025, 0.975])
            if lo > 0 or hi < 0:
                return True
    return False


def directional(d) -> bool:
    a = analyze(d, CFG)
    return any(
        c.outcome in ("faster", "slower")
        for c in a.comparisons
        if (c.baseline_arm, c.candidate_arm) == ("base", "spec")
    )


@pytest.fixture(scope="module", params=[0.03, 0.25], ids=["quiet-requests", "noisy-requests"])
def pilots(request):
    return [aa_pilot(s, noise=request.param) for s in range(PILOTS)]


def test_identical_arms_on_a_drifting_machine_stay_within_the_nominal_rate(pilots) -> None:
    hits = sum(directional(d) for d in pilots)
    assert hits <= 0.05 * PILOTS, f"{hits} of {PILOTS} A/A pilots gave a directional outcome"


def test_the_replaced_method_fails_the_same_test(pilots) -> None:
    hits = sum(old_method_directional(d) for d in pilots)
    assert hits > 0.3 * PILOTS, f"only {hits} of {PILOTS}: the simulation lost its teeth"


def test_a_real_two_fold_slowdown_is_still_found_on_the_same_machine() -> None:
    # power check: the method is not calibrated by never saying anything
    found = 0
    for s in range(10):
        a = analyze(aa_pilot(s, spec=2.0), CFG)
        found += any(
            c.outcome == "slower" and c.task_group == "*"
            for c in a.comparisons
            if c.candidate_arm == "spec"
        )
    assert found >= 8
