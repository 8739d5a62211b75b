"""Sequential looks (``analysis.episodes.sequential``): the spending, the stopping rule on the whole
analysis, and seeded simulated pilots with the looks included.

The simulated pilot is the default's shape: 4 processes per arm (sd 7.5% each), 14 episodes per
load level, two levels, an interim look after 8 episodes (``episodes.looks: [8]``); each
episode's mean log ratio has noise sqrt(4%^2 + 15%^2 / 8) (``tests/test_episodes.py``). At each
look a level's cell is tested at the look's alpha shared by Bonferroni over the 2 levels; a level
whose interval excludes 0 stops there. 1,000 pilots per claim.

Figures at these seeds (``pytest -s`` prints them): a false direction somewhere in the family of
2 levels in 4.4% of A/A pilots with the looks (the interim look without the sometimes-pool),
5.2% with one test at the end; with the sometimes-pool at the interim look (two episodes per
process) 8.2%: past the level, so the looks test without it; at the full 5% at both looks,
5.4%. Power for a true +15% at a level: 21.7% with the looks, 25.6% without (the last look's
alpha is 0.0405: the looks' price); 1.2% of levels stop at look 1. For +50% (a speculative arm
1.5x slower): 99.0% / 99.5%, and 39.9% of levels stop at look 1, saving 6 of 14 episodes there.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from specpilot.analysis import AnalysisConfig, analyze
from specpilot.analysis.episodes.estimate import episode_effect
from specpilot.analysis.episodes.sequential import (
    decided_levels,
    final_alpha,
    interim_alpha,
    looks_text,
    nominal_alphas,
    spent,
)
from test_episodes import PILOTS, S_PROC, S_XI, SLACK, _crossed  # the same simulated noise

M, E, LOOK, LEVELS = 4, 14, 8, 2


def test_spending_is_obrien_fleming_and_the_looks_spend_alpha_exactly():
    from statistics import NormalDist

    n = NormalDist()
    for t in (0.25, 0.5, 8 / 14, 0.9):
        z = n.inv_cdf(0.975) / math.sqrt(t)
        assert spent(t, 0.05) == pytest.approx(2 * (1 - n.cdf(z)), rel=1e-9)
    xs = [spent(t / 20, 0.05) for t in range(1, 21)]
    assert all(b > a for a, b in itertools.pairwise(xs)) and xs[-1] == 0.05
    for fractions in ([1.0], [0.5, 1.0], [0.3, 0.6, 1.0], [8 / 14, 0.7]):
        a = nominal_alphas(fractions, 0.05)
        assert sum(a) == pytest.approx(0.05) and all(x >= 0 for x in a)
    # O'Brien-Fleming spends little early: most of alpha is left for the last look
    assert nominal_alphas([8 / 14, 1.0], 0.05)[-1] > 0.04
    ran = [{"alpha": interim_alpha(8 / 14, [], 0.05)}]
    assert interim_alpha(8 / 14, [], 0.05) == pytest.approx(spent(8 / 14, 0.05))
    assert final_alpha(ran, 0.05) == pytest.approx(0.05 - spent(8 / 14, 0.05))


def _level_y(rng: np.random.Generator, n: int, mu: float, seed: int) -> tuple[np.ndarray, list]:
    cb = _crossed(E, M, seed)  # as the pilot assigns processes (pilot.design.crossed)
    a, b = rng.normal(0, S_PROC, (n, M)), rng.normal(0, S_PROC, (n, M))
    c, bb = np.array([x for x, _ in cb]), np.array([y for _, y in cb])
    y = mu + a[:, c] - b[:, bb] + rng.normal(0, S_XI, (n, E))
    return y, cb


def _claims(
    mu: float, seed: int, alphas: list[float], pooled: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Per pilot and level: the look at which a direction was claimed (0: none) and its sign."""
    rng = np.random.default_rng(seed)
    at = np.zeros((PILOTS, LEVELS), dtype=int)
    sign = np.zeros((PILOTS, LEVELS))
    counts = [LOOK, E] if len(alphas) == 2 else [E]
    for lv in range(LEVELS):
        y, cb = _level_y(rng, PILOTS, mu, seed + 7 * lv)
        c, b = [x for x, _ in cb], [z for _, z in cb]
        for i in range(PILOTS):
            for j, (k, alpha) in enumerate(zip(counts, alphas, strict=True)):
                pool = pooled or j == len(counts) - 1  # interim looks: no sometimes-pool
                level = 1 - alpha / LEVELS
                est = episode_effect(y[i, :k], list(range(k)), c[:k], b[:k], level=level, pool=pool)
                lo, hi = est.interval
                if lo > 0 or hi < 0:
                    at[i, lv], sign[i, lv] = j + 1, np.sign(est.estimate)
                    break
    return at, sign


@pytest.fixture(scope="module")
def aa_runs():
    return {
        "looks": _claims(0.0, 31, nominal_alphas([LOOK / E, 1.0], 0.05)),
        "fixed": _claims(0.0, 31, [0.05]),
        "naive": _claims(0.0, 31, [0.05, 0.05]),
        "pooled": _claims(0.0, 31, nominal_alphas([LOOK / E, 1.0], 0.05), pooled=True),
    }


def test_aa_family_error_with_the_looks_holds_alpha(aa_runs):
    rate = {k: float(np.mean((at > 0).any(axis=1))) for k, (at, _) in aa_runs.items()}
    print(f"\nA/A family error over 2 levels: {rate}")
    assert rate["looks"] <= SLACK
    assert rate["fixed"] <= SLACK


def test_negative_controls_looking_without_spending_or_with_the_pooling_inflate_it(aa_runs):
    # the same pilots tested at the full 5% at both looks: every extra look is another chance
    looks, naive = aa_runs["looks"][0], aa_runs["naive"][0]
    assert ((naive > 0).any(axis=1) >= (looks > 0).any(axis=1)).all()
    assert float(np.mean((naive > 0).any(axis=1))) > float(np.mean((looks > 0).any(axis=1)))
    # the interim look with the sometimes-pool (two episodes per process): past the level
    assert float(np.mean((aa_runs["pooled"][0] > 0).any(axis=1))) > SLACK


@pytest.mark.parametrize("effect", [0.15, 0.5])
def test_the_looks_cost_little_power_and_stop_large_effects_early(effect):
    mu = math.log(1 + effect)
    at_l, sign_l = _claims(mu, 41, nominal_alphas([LOOK / E, 1.0], 0.05))
    at_f, sign_f = _claims(mu, 41, [0.05])
    power_l = float(np.mean((at_l > 0) & (sign_l > 0)))
    power_f = float(np.mean((at_f > 0) & (sign_f > 0)))
    early = float(np.mean(at_l == 1))
    print(f"\n+{effect:.0%}: power {power_l:.1%} with the looks, {power_f:.1%} without; "
          f"levels stopped at look 1: {early:.1%}")  # fmt: skip
    assert power_l >= power_f - 0.05  # the looks' price: the last look's smaller alpha
    assert not ((at_l > 0) & (sign_l < 0)).any()  # never the wrong direction
    if effect >= 0.5:  # a speculative arm 1.5x slower: many levels stop at 8 of 14 episodes
        assert early > 0.3


# -- the stopping rule over the whole analysis (hand-built episode pilots) ----------------------


def _analysis(effect: float, planted: float, level: float):
    from test_episode_analysis import _pilot

    cfg = AnalysisConfig(bootstrap_resamples=100, ci_level=level)
    return analyze(_pilot(effect=effect, planted=planted, n=8), cfg)


def test_a_level_is_decided_when_every_pooled_cell_is():
    a = _analysis(-0.3, 0.4, 0.99)
    res = decided_levels(a.comparisons, a.planted, list(a.plan.pairs), ["off_peak", "peak"])
    assert [r.decided for r in res] == [True, True], [r.open_cells for r in res]
    # a planted effect too small to find keeps every level open, naming it
    a = _analysis(-0.3, 0.01, 0.99)
    res = decided_levels(a.comparisons, a.planted, list(a.plan.pairs), ["off_peak", "peak"])
    assert not any(r.decided for r in res)
    assert all("planted +1% not found" in r.open_cells for r in res)
    # no effect, a margin it cannot reach at this size: the candidate's cell stays open
    a = _analysis(0.0, 0.4, 0.99)
    res = decided_levels(a.comparisons, a.planted, list(a.plan.pairs), ["off_peak"])
    assert res[0].open_cells and res[0].open_cells[0].startswith("speculative ")


def test_the_report_is_at_the_last_looks_level_and_says_what_each_look_spent():
    from test_episode_analysis import _pilot

    data = _pilot(effect=-0.3, planted=0.4, n=8)
    a0 = analyze(data, AnalysisConfig(bootstrap_resamples=100))
    alpha1 = interim_alpha(8 / 12, [], 0.05)
    looks = {
        "at": [8, 12],
        "alpha": 0.05,
        "ran": [
            {"look": 1, "fraction": 8 / 12, "alpha": alpha1, "episodes": {"peak": 8},
             "closed": ["peak"]}
        ],
        "skipped": {"peak~09": "decided"},
        "final": {"episodes": {"off_peak": 12, "peak": 8}, "alpha": 0.05 - alpha1,
                  "not_run": {"peak": {"decided": 4}}},
    }  # fmt: skip
    data.pilot.schedule = {"design": {"looks": looks}}
    a = analyze(data, AnalysisConfig(bootstrap_resamples=100))
    assert a.config.ci_level == pytest.approx(1 - (0.05 - alpha1))
    c0 = next(c for c in a0.comparisons if c.task_group == "*")
    c1 = next(c for c in a.comparisons if c.task_group == "*")
    # the same cell, tested at a smaller alpha: a wider interval
    assert c1.task_rel_change.high - c1.task_rel_change.low > (
        c0.task_rel_change.high - c0.task_rel_change.low
    )
    assert a.sequential is not None
    lines = a.sequential["lines"]
    assert lines == looks_text(looks) and len(lines) == 2
    assert "look 1 after peak 8 episodes: tested at alpha 0.0" in lines[0]
    assert "stopped: peak" in lines[0]
    assert "peak 4 (decided)" in lines[1]


def test_the_report_level_moves_only_where_looks_ran_or_episodes_were_dropped():
    from specpilot.analysis.episodes.sequential import report_alpha, thin_levels

    plain = {"at": [14], "alpha": 0.05, "ran": [], "final": {"episodes": {"peak": 14},
             "alpha": 0.05, "not_run": {}}}  # fmt: skip
    assert report_alpha(plain) is None  # no looks, nothing dropped: --config's ci_level holds
    ran = [{"look": 1, "fraction": 8 / 14, "alpha": interim_alpha(8 / 14, [], 0.05),
            "episodes": {"peak": 8}, "closed": []}]  # fmt: skip
    interrupted = {"at": [8, 14], "alpha": 0.05, "ran": ran}
    assert report_alpha(interrupted) == pytest.approx(0.05 - ran[0]["alpha"])
    assert "no final look (the pilot was interrupted)" in looks_text(interrupted)[-1]
    cut = dict(plain, skipped={"peak~14": "budget"})
    cut["final"] = dict(plain["final"], episodes={"peak": 10, "off_peak": 14})
    assert report_alpha(cut) == 0.05
    assert thin_levels(cut, 4) == ["peak"]  # 10 < 3 x 4: tested without the sometimes-pool
    assert thin_levels(cut, 3) == []


def test_the_analysis_settings_are_derived_once_from_the_config_and_the_design():
    """``analysis.settings.effective``: the design's looks set the level and, where a budget
    cut a level, pooling off, each said in a line; a user's own "pooling off" stays off."""
    from specpilot.analysis.config import AnalysisConfig
    from specpilot.analysis.settings import Design, effective

    plain = {"at": [14], "alpha": 0.05, "ran": [], "final": {"episodes": {"peak": 14},
             "alpha": 0.05, "not_run": {}}}  # fmt: skip
    cut = dict(plain, skipped={"peak~14": "budget"})
    cut["final"] = dict(plain["final"], alpha=0.02, episodes={"peak": 10, "off_peak": 14})

    def design(looks: dict) -> Design:
        return Design(per_level=14, processes=4, looks=looks, prediction=None, in_place=None)

    untouched = effective(AnalysisConfig(ci_level=0.9), design(plain))
    assert untouched.config.ci_level == 0.9 and untouched.lines == () and untouched.looks is None
    eff = effective(AnalysisConfig(), design(cut))
    assert eff.config.ci_level == pytest.approx(0.98) and not eff.config.episode_pooling
    assert eff.looks is not None and eff.looks["without_pool"] == ["peak"]
    assert "ci_level 0.98 (given 0.95)" in eff.lines[0]
    assert "episode pooling off (given on): a budget cut peak" in eff.lines[1]
    kept = effective(AnalysisConfig(episode_pooling=False), design(dict(cut, final=dict(
        cut["final"], episodes={"peak": 14, "off_peak": 14}))))  # fmt: skip
    assert not kept.config.episode_pooling and len(kept.lines) == 1  # off as given: no line
