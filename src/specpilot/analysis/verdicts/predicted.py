"""The planner's prediction against what the pilot achieved, per pooled load level.

Before an episode pilot runs, the planner (``pilot.plan.noise.episode_plan``, the same numbers
``--dry-run`` prints) predicts for each compared arm the smallest effect the pilot will find
with 80% power and the median half-width of its deciding interval, from the noise this machine
measured in its last episode pilot (or a stated prior); the prediction is stored in the design
record. After the run, each pooled cell says what it achieved: its interval's half-width, and
the smallest effect detectable at the noise it measured itself (``analysis.episodes.power.mde`` with
the components of ``episode_noise``, on the same processes, episodes and deciding level).
A ratio outside [1/1.5, 1.5] means the planner's noise did not carry to this pilot: the next
``--dry-run`` reads this pilot's noise instead.

    >>> from specpilot.analysis.comparison.paired import Interval, PairedComparison
    >>> na = Interval(None, None, None)
    >>> c = PairedComparison("b", "planted", "peak", "*", 1.0, 40, 0, 40,
    ...     Interval(0.14, 0.05, 0.24), na, na, na, na, "slower", "", deciding_level=0.9875,
    ...     episode_noise={"process_sd": [0.0, 0.0], "episode_sd": 0.10, "episodes": 14,
    ...                    "processes": [4, 4]})
    >>> pred = {"predicted": [{"arm": "planted", "kind": "planted", "source": "prior",
    ...          "mde": 0.112, "half_width": 0.08, "half_width_80": 0.09}]}
    >>> (r,) = prediction_checks(pred, [c], planted_arm="planted")
    >>> r.within, round(r.achieved_half_width, 3)
    (True, 0.087)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specpilot.analysis.base.columns import ALL
from specpilot.analysis.comparison.paired import PairedComparison
from specpilot.analysis.episodes.power import mde
from specpilot.numbers import pct

FACTOR = 1.5  # a prediction within this factor of the achieved value is "as planned"
FLOOR = 0.01  # components under 1% are told apart by nothing these pilots measure


@dataclass(frozen=True)
class PredictionCheck:
    arm: str
    phase: str
    source: str  # where the planner's noise came from ("measured here (<pilot>)" or "prior")
    predicted_mde: float | None
    achieved_mde: float | None  # at this cell's own measured noise; None: not estimable
    predicted_half_width: float | None  # median over pilots
    predicted_half_width_80: float | None  # wider than this in 1 pilot of 5
    achieved_half_width: float | None  # of the deciding interval, on the relative scale
    ratio: float | None  # predicted / achieved MDE
    within: bool | None  # ratio inside [1/FACTOR, FACTOR]; None: nothing to compare
    text: str
    # the noise component the planner was furthest off on: (name, used, measured); None where
    # the prediction held or nothing compares
    off_component: tuple[str, float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: _finite(v) for k, v in asdict(self).items()}


def _finite(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def achieved_mde(c: PairedComparison, one_pool: bool) -> float | None:
    """The smallest effect this cell's test detects with 80% power at the noise it measured
    (the planner's own computation, fed this pilot's components in place of the cache's)."""
    n = c.episode_noise
    if not n or c.deciding_level is None:
        return None
    s_a, s_b = (float(x) for x in n["process_sd"])
    m_c, m_b = (int(x) for x in n["processes"])
    got = mde(
        s_a,
        s_b,
        float(n["episode_sd"]),
        m_c,
        0 if one_pool else m_b,
        int(n["episodes"]),
        1.0 - c.deciding_level,
        in_place=n.get("design") == "in_place",
        strata_df=int(n.get("strata_df") or 0),
    )
    return got if math.isfinite(got) else None


def half_width(c: PairedComparison) -> float | None:
    """The deciding interval's half-width on the log scale, as a relative change."""
    e = c.task_rel_change
    if e.low is None or e.high is None or e.low <= -1.0:
        return None
    return math.expm1((math.log1p(e.high) - math.log1p(e.low)) / 2.0)


def prediction_checks(
    prediction: Mapping[str, Any] | None,
    comparisons: Sequence[PairedComparison],
    planted_arm: str | None,
) -> list[PredictionCheck]:
    """Per predicted arm and pooled load level: the planner's MDE and half-width beside the
    achieved ones (module docstring). Empty without a stored prediction."""
    if not prediction:
        return []
    out = []
    for row in prediction.get("predicted") or []:
        arm = row["arm"]
        cells = [c for c in comparisons if c.candidate_arm == arm and c.task_group == ALL]
        for c in sorted(cells, key=lambda c: (c.offered_rate or 0.0, c.phase)):
            got = achieved_mde(c, one_pool=arm == planted_arm)
            # the level's own prediction where the machine had measured that level
            p = {**row, **((row.get("by_level") or {}).get(c.phase) or {})}
            pred = _finite(p.get("mde"))
            ratio = pred / got if pred is not None and got else None
            within = None if ratio is None else 1.0 / FACTOR <= ratio <= FACTOR
            hw = half_width(c)
            text = (
                f"{arm} at {c.phase}: predicted to find {pct(pred, 0)} (interval about "
                f"+-{pct(p.get('half_width'), 0)}), achieved {pct(got, 0)} (interval +-{pct(hw, 0)})"
            )
            off = None if within in (None, True) else worst_component(p, c.episode_noise)
            if within is not None:
                text += ": as planned" if within else f": off by more than x{FACTOR:g}"
            if off is not None:
                name, used, measured = off
                text += (
                    f" (its {name}: {pct(used, 0)} used, {pct(measured, 0)} measured: "
                    + ("under-estimated" if measured > used else "over-estimated")
                    + ")"
                )
            out.append(
                PredictionCheck(
                    arm=arm,
                    phase=c.phase,
                    source=str(row.get("source") or "")
                    + (", this level's" if c.phase in (row.get("by_level") or {}) else ""),
                    predicted_mde=pred,
                    achieved_mde=got,
                    predicted_half_width=_finite(p.get("half_width")),
                    predicted_half_width_80=_finite(p.get("half_width_80")),
                    achieved_half_width=hw,
                    ratio=ratio,
                    within=within,
                    text=text,
                    off_component=off,
                )
            )
    return out


def worst_component(
    predicted: Mapping[str, Any], noise: Mapping[str, Any] | None
) -> tuple[str, float, float] | None:
    """The noise component whose measured value is furthest (as a ratio, each floored at
    ``FLOOR``: a process spread pooled into the episode noise is measured as 0) from what the
    planner used: the episode noise, or either arm's process spread. None where nothing
    compares.

        >>> worst_component({"episode_sd": 0.10, "process_sd": [0.02, 0.02]},
        ...                 {"episode_sd": 0.18, "process_sd": [0.03, 0.02]})
        ('episode noise', 0.1, 0.18)
        >>> worst_component({"episode_sd": 0.10, "process_sd": [0.02, 0.02]},   # a process
        ...                 {"episode_sd": 0.02, "process_sd": [0.0, 0.02]})    # pooled: 0
        ('episode noise', 0.1, 0.02)
    """
    if not noise:
        return None
    pairs = [("episode noise", predicted.get("episode_sd"), noise.get("episode_sd"))]
    used_p = list(predicted.get("process_sd") or [])
    got_p = list(noise.get("process_sd") or [])
    names = ("candidate's process spread", "baseline's process spread")
    pairs += [(n, u, g) for n, u, g in zip(names, used_p, got_p, strict=False)]
    best: tuple[float, tuple[str, float, float]] | None = None
    for name, used, got in pairs:
        if used is None or got is None:
            continue
        u, g = float(used), float(got)
        if not (math.isfinite(u) and math.isfinite(g)) or max(u, g) < FLOOR or g == 0.0:
            continue  # both under 1%, or a process spread pooled into the episode noise
        far = abs(math.log(max(g, FLOOR) / max(u, FLOOR)))
        if best is None or far > best[0]:
            best = (far, (name, u, g))
    return best[1] if best else None


__all__ = [
    "FACTOR",
    "PredictionCheck",
    "achieved_mde",
    "half_width",
    "prediction_checks",
    "worst_component",
]
