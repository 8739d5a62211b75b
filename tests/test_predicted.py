"""The planner's prediction beside what the pilot achieved (``analysis.verdicts.predicted``).

Seeded simulations of the default pilot's planted cell (4 processes, 14 episodes, crossed as
``pilot.design.crossed`` assigns them, process sd 7.5%, episode sd 10%, the pooled deciding
level), each fitted as the pilot fits it (``analysis.episodes.onepool``): when the planner predicts from
the noise the pilot really has, its MDE is within a factor of 1.5 of the one each cell achieves
at its own measured noise (issue 33's target for ``--dry-run``); when it predicts from half
that noise, the report says the prediction did not carry.
"""

from __future__ import annotations

import math

import numpy as np

from specpilot.analysis.comparison.paired import Interval, PairedComparison
from specpilot.analysis.episodes.celltest import episode_noise
from specpilot.analysis.episodes.onepool import pool_effect
from specpilot.analysis.episodes.power import half_width, mde
from specpilot.analysis.verdicts.predicted import prediction_checks
from specpilot.pilot.design import crossed

M, E, PROCESS_SD, EPISODE_SD = 4, 14, 0.075, 0.10
LEVEL = 1.0 - 0.05 / 2 / 2
NA = Interval(None, None, None)


def _cell(seed: int, factor: float = 0.15) -> PairedComparison:
    rng = np.random.default_rng(seed)
    base, plant = crossed(E, M, 2, seed)
    p = rng.normal(0.0, PROCESS_SD, M)
    y = math.log1p(factor) + p[plant] - p[base] + rng.normal(0.0, EPISODE_SD, E)
    est = pool_effect(y, np.arange(E), np.array(plant), np.array(base), level=LEVEL)
    lo, hi = est.rel_interval
    return PairedComparison(
        "baseline", "planted", "peak", "*", 1.0, E * 4, 0, E * 4,
        Interval(est.rel_change, lo, hi), NA, NA, NA, NA, "slower", "",
        deciding_level=LEVEL, episode_noise=episode_noise(est),
    )  # fmt: skip


def _prediction(episode_sd: float) -> dict:
    alpha = 1.0 - LEVEL
    hw = half_width(PROCESS_SD, PROCESS_SD, episode_sd, M, 0, E, alpha)
    return {
        "predicted": [
            {
                "arm": "planted",
                "kind": "planted",
                "source": "test",
                "episode_sd": episode_sd,
                "process_sd": [PROCESS_SD, PROCESS_SD],
                "mde": mde(PROCESS_SD, PROCESS_SD, episode_sd, M, 0, E, alpha),
                "half_width": hw[0],
                "half_width_80": hw[1],
            }
        ]
    }


def test_a_prediction_from_the_true_noise_is_within_1_5x_of_what_the_pilots_achieve():
    pred = _prediction(EPISODE_SD)
    rows = [prediction_checks(pred, [_cell(s)], "planted")[0] for s in range(300)]
    ratios = np.array([r.ratio for r in rows])
    assert np.all(np.isfinite(ratios))
    assert 0.85 < float(np.median(ratios)) < 1.2
    assert np.mean([r.within for r in rows]) >= 0.8
    # the predicted median half-width is the achieved intervals' median, within 15%
    achieved = np.median([r.achieved_half_width for r in rows])
    assert abs(pred["predicted"][0]["half_width"] / achieved - 1.0) < 0.15
    # the 80th percentile prediction: about 1 pilot in 5 is wider
    wider = np.mean([r.achieved_half_width > pred["predicted"][0]["half_width_80"] for r in rows])
    assert 0.1 < wider < 0.3


def test_a_prediction_from_half_the_noise_is_flagged_as_not_carrying():
    pred = _prediction(EPISODE_SD / 2)
    rows = [prediction_checks(pred, [_cell(s)], "planted")[0] for s in range(100)]
    assert np.mean([r.within is False for r in rows]) >= 0.8
    flagged = next(r for r in rows if r.within is False)
    assert "off by more than x1.5" in flagged.text and flagged.ratio < 1 / 1.5


def test_a_prediction_off_names_the_noise_component_it_under_estimated():
    """The planner used half the true episode noise (the process spread right): the flagged
    cells name the episode noise as under-estimated, and the pilot's terminal says it."""
    from specpilot.pilot.run.finish import summary

    pred = _prediction(EPISODE_SD / 2)
    rows = [prediction_checks(pred, [_cell(s)], "planted")[0] for s in range(100)]
    flagged = [r for r in rows if r.within is False]
    named = [r.off_component[0] for r in flagged if r.off_component]
    assert named.count("episode noise") >= 0.8 * len(flagged)
    r = next(r for r in flagged if r.off_component and r.off_component[0] == "episode noise")
    assert r.off_component[1] == EPISODE_SD / 2 and r.off_component[2] > EPISODE_SD / 2
    assert "(its episode noise: 5% used," in r.text and "under-estimated)" in r.text
    assert all(r.off_component is None for r in rows if r.within)
    doc = {"pilot": {"name": "p"}, "prediction": [r.to_dict() for r in rows[:20]]}
    lines = [x for x in summary(doc, [], 60.0).splitlines() if x.startswith("planner: ")]
    assert len(lines) == sum(r.within is False for r in rows[:20]) >= 1


def test_a_levels_own_prediction_is_used_where_the_machine_measured_that_level():
    pred = _prediction(EPISODE_SD / 2)
    row = pred["predicted"][0]
    row["by_level"] = {
        "peak": {
            k: _prediction(EPISODE_SD)["predicted"][0][k]
            for k in ("mde", "half_width", "half_width_80")
        }
    }
    rows = [prediction_checks(pred, [_cell(s)], "planted")[0] for s in range(100)]
    assert np.mean([r.within for r in rows]) >= 0.8  # the level's (true) noise, not the mean's
    assert rows[0].source == "test, this level's"
    assert rows[0].predicted_mde == row["by_level"]["peak"]["mde"]


def test_no_stored_prediction_no_rows_and_only_pooled_cells_of_the_predicted_arm():
    c = _cell(0)
    assert prediction_checks(None, [c], "planted") == []
    per_group = PairedComparison(**{**c.__dict__, "task_group": "code"})
    other = PairedComparison(**{**c.__dict__, "candidate_arm": "speculative"})
    got = prediction_checks(_prediction(EPISODE_SD), [c, per_group, other], "planted")
    assert [(r.arm, r.phase) for r in got] == [("planted", "peak")]
    assert got[0].to_dict()["achieved_mde"] == got[0].achieved_mde
