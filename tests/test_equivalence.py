""" "No difference" is an equivalence claim, "undecided" says what the pilot could not tell, and
no printed interval contradicts the outcome beside it (issue: one answer per question).

Seeded hand-built pilots (``pilot_cases.case``) with a known effect per cell: a planted +20%
slowdown is never "no difference" (it was, with 16 pairs: +19.1%, CI +3.0% to +37.7%); a
true zero with enough pairs is "no difference" with its deciding interval inside the margin;
every other cell is undecided, and an undecided cell whose interval excludes 0 says that the
interval did not decide.
"""

from __future__ import annotations

import pytest

from pilot_cases import Cell, case, compare, table
from specpilot.analysis import AnalysisConfig, analyze
from specpilot.analysis.verdicts.decision import cell_text

SEEDS = range(6)


def _cells(spec: float, n: int, noise: float = 0.03) -> dict:
    return {(g, p): Cell(spec=spec, n=n, noise=noise) for g in ("code", "zh") for p in ("a", "b")}


def _comparisons(spec: float, n: int, seed: int, noise: float = 0.03, **settings):
    d = case(_cells(spec, n, noise), alternative=False, control=False, seed=seed)
    return compare(table(d), "base", "spec", resamples=200, seed=seed, **settings)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_planted_slowdown_is_never_no_difference(seed):
    # +20% planted, few pairs (undecided) and enough pairs (slower): never "no difference"
    for n in (6, 16, 60):
        for c in _comparisons(1.2, n, seed, noise=0.15):
            assert c.outcome in ("slower", "insufficient"), (n, c.outcome, c.task_rel_change)
            if c.outcome == "slower":  # by its task time, or less often on time
                low, on = c.task_rel_change.low, c.on_time_diff.estimate
                assert (low is not None and low > 0) or (on is not None and on < 0), c


@pytest.mark.parametrize("seed", SEEDS)
def test_no_difference_only_inside_the_margin(seed):
    for spec, n in ((1.0, 60), (1.0, 12), (1.05, 60), (1.2, 16)):
        for c in _comparisons(spec, n, seed, noise=0.1):
            e = c.task_rel_change
            if c.outcome == "no_difference":
                assert e.low is not None and e.high is not None
                assert e.low > -0.10 and e.high < 0.10, (spec, n, e)
            if spec == 1.2:
                assert c.outcome != "no_difference"


def test_a_true_zero_with_enough_pairs_is_no_difference_and_without_a_margin_undecided():
    out = _comparisons(1.0, 60, 0)
    assert all(c.outcome == "no_difference" for c in out), [c.outcome for c in out]
    assert all("inside the +-10% margin" in cell_text(c) for c in out)
    # margin 0: no interval can lie inside it, so nothing is "no difference": undecided
    none = _comparisons(1.0, 60, 0, equivalence_margin=0.0)
    assert all(c.outcome == "insufficient" for c in none)
    assert all("no equivalence margin is set" in (c.undecided_because or "") for c in none)


@pytest.mark.parametrize("seed", SEEDS)
def test_no_interval_excludes_zero_beside_an_undirected_outcome_unless_labelled(seed):
    # 4 to 60 pairs of a -30% effect, noisy: many cells undecided with intervals off 0
    for n in (4, 7, 10, 60):
        for c in _comparisons(0.7, n, seed, noise=0.4):
            e, text = c.task_rel_change, cell_text(c)
            excludes = e.low is not None and e.high is not None and (e.low > 0 or e.high < 0)
            if c.outcome in ("faster", "slower"):
                assert excludes and "deciding CI" in text
            elif excludes:
                assert "not deciding" in text and "deciding CI" not in text, text
            assert text.endswith(("faster", "slower", "no difference")) or "undecided" in text


def test_the_deciding_interval_is_simultaneous_over_the_cells_tested():
    out = _comparisons(0.7, 60, 0)
    # two families (analysis.comparison.paired._families), half of alpha each: the 2 pooled cells, and the
    # 4 group cells; each with its on-time tests in Tarone's family
    assert all(c.deciding_level is not None and c.deciding_level > 0.95 for c in out)
    pooled = {c.deciding_level for c in out if c.task_group == "*"}
    groups = {c.deciding_level for c in out if c.task_group != "*"}
    assert len(pooled) == 1 and len(groups) == 1 and pooled != groups
    # its half over Tarone's K of at most 2 task + 2 on-time tests
    assert any(abs(min(pooled) - (1 - 0.025 / k)) < 1e-12 for k in (1, 2, 3, 4))
    # simultaneous: the cells' error budgets add up to at most alpha
    assert sum(1 - c.deciding_level for c in out) <= 0.05 + 1e-12


def test_the_setting_reaches_the_verdict_through_the_analysis_config():
    d = case({("code", p): Cell(spec=1.0, n=60) for p in ("off_peak", "peak")}, seed=3)
    wide = analyze(d, AnalysisConfig.model_validate({"verdict": {"equivalence_margin": 0.1}}))
    none = analyze(d, AnalysisConfig.model_validate({"verdict": {"equivalence_margin": 0.0}}))
    outcome = {
        a: {
            c.outcome
            for c in x.comparisons
            if c.candidate_arm == "spec" and c.baseline_arm == "base"
        }
        for a, x in (("wide", wide), ("none", none))
    }
    assert outcome == {"wide": {"no_difference"}, "none": {"insufficient"}}
    assert wide.verdicts[0].verdict == "DO_NOT_ADOPT"  # measured: no gain, inside the margin
    assert none.verdicts[0].verdict == "UNDECIDED"
