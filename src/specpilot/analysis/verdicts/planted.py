"""The planted effect: did the pilot find a slowdown of known size?

The planted arm is the baseline's processes (in place: the speculative ones switched off)
reached through a proxy that dilates every latency the client sees by exactly 1 + f
(``loadgen.dilate``), replayed in the same episodes and balanced order as every other arm. Its true task-time change against the baseline is +f,
so its comparison shows what this pilot, on this machine, at each load level, can detect: it
is *found* when the comparison calls it "slower" (the same rule, margin and multiplicity as a
candidate's), and its interval should cover +f. A level where it was not found cannot carry a
direction, nor an equivalence claim, for any candidate (``analysis.verdicts.decision``).

    >>> from specpilot.analysis.comparison.paired import Interval, PairedComparison
    >>> c = PairedComparison("b", "planted", "peak", "*", 1.0, 40, 0, 40,
    ...     Interval(0.14, 0.09, 0.20), Interval(None, None, None), Interval(None, None, None),
    ...     Interval(None, None, None), Interval(None, None, None), "slower", "")
    >>> (r,) = planted_results([c], "planted", 0.15)
    >>> r.found, r.covers, r.text
    (True, True, 'this pilot found the planted +15% at peak (1 req/s) as +14.0% [+9.0%, +20.0%]')
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specpilot.analysis.base.columns import ALL
from specpilot.analysis.base.stats import Interval
from specpilot.analysis.comparison.paired import PairedComparison
from specpilot.analysis.verdicts.decision import OUTCOME_WORDS, Verdict
from specpilot.numbers import signed_pct


@dataclass(frozen=True)
class PlantedResult:
    arm: str
    factor: float  # the planted relative slowdown (0.15: every latency x1.15)
    phase: str
    offered_rate: float | None
    estimate: float | None
    low: float | None
    high: float | None
    outcome: str
    found: bool  # called "slower"
    covers: bool  # the deciding interval covers +factor
    text: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def planted_results(
    comparisons: Sequence[PairedComparison], arm: str, factor: float
) -> list[PlantedResult]:
    """Per load level, the planted arm's pooled comparison with the baseline."""
    out = []
    mine = [c for c in comparisons if c.candidate_arm == arm and c.task_group == ALL]
    for c in sorted(mine, key=lambda c: (c.offered_rate or 0.0, c.phase)):
        e = c.task_rel_change
        found = c.outcome == "slower"
        covers = e.low is not None and e.high is not None and e.low <= factor <= e.high
        rate = f" ({c.offered_rate:.3g} req/s)" if c.offered_rate is not None else ""
        shown = (
            f"{e.estimate:+.1%} [{e.low:+.1%}, {e.high:+.1%}]"
            if e.estimate is not None and e.low is not None and e.high is not None
            else "n/a"
        )
        text = (
            f"this pilot found the planted +{factor:.0%} at {c.phase}{rate} as {shown}"
            if found
            else f"this pilot did NOT find the planted +{factor:.0%} at {c.phase}{rate}: {shown} "
            f"-> {c.outcome}; no candidate can get a direction there"
        )
        out.append(
            PlantedResult(
                arm,
                factor,
                c.phase,
                c.offered_rate,
                e.estimate,
                e.low,
                e.high,
                c.outcome,
                found,
                covers,
                text,
            )
        )
    return out


def missed_levels(results: Sequence[PlantedResult]) -> frozenset[str]:
    """The load levels where the planted effect was not found."""
    return frozenset(r.phase for r in results if not r.found)


def request_spread(comparisons: Sequence[PairedComparison], arm: str) -> list[PairedComparison]:
    """Each comparison against the planted arm's baseline with ``request_sd``: how far its
    effect differs between requests beyond the baseline's own measurement noise. Its pairs
    spread inside their episodes (``episode_noise.pair_sd``) by that noise and by the requests
    differing; the planted arm's pairs at the same level and group by the noise alone (one
    factor for every request; crossed over processes, which an episode's centring takes out),
    so the difference of the two variances is the requests' part. An upper bound on what each
    request brings back every time: the candidate's own timing noise (its rounds, its batches)
    counts in it too; ``benchmarks/effect_reproducibility.py`` splits the two across pilots of
    one schedule. None where either spread is missing."""
    mine = [c for c in comparisons if c.candidate_arm == arm]
    base = {c.baseline_arm for c in mine}
    ref = {(c.phase, c.task_group): (c.episode_noise or {}).get("pair_sd") for c in mine}
    out = []
    for c in comparisons:
        own = (c.episode_noise or {}).get("pair_sd")
        meas = ref.get((c.phase, c.task_group))
        if c.candidate_arm == arm or c.baseline_arm not in base or own is None or meas is None:
            out.append(c)
            continue
        out.append(dataclasses.replace(c, request_sd=math.sqrt(max(own**2 - meas**2, 0.0))))
    return out


def as_aa(
    comparisons: Sequence[PairedComparison], arm: str, factor: float
) -> list[PairedComparison]:
    """The planted arm's comparisons with the known dilation taken out: the baseline's
    processes against themselves in other episodes, an A/A contrast (expected to cover 0).
    A cell is directional when its shifted deciding interval excludes 0 (the planted arm's
    "slower" is the dilation; only what is left over counts)."""
    out = []
    for c in comparisons:
        if c.candidate_arm != arm:
            continue
        e = c.task_rel_change
        shift = [
            None if x is None else (1.0 + x) / (1.0 + factor) - 1.0
            for x in (e.estimate, e.low, e.high)
        ]
        est, lo, hi = shift
        if c.outcome == "insufficient" or lo is None or hi is None:
            outcome = "insufficient"
        elif lo > 0:
            outcome = "slower"
        elif hi < 0:
            outcome = "faster"
        else:
            outcome = "no_difference"
        out.append(
            dataclasses.replace(
                c,
                candidate_arm=f"{arm} less its +{factor:.0%}",
                task_rel_change=Interval(est, lo, hi),
                outcome=outcome,
                log_change=None if c.log_change is None else c.log_change - math.log1p(factor),
            )
        )
    return out


def beside(
    v: Verdict,
    planted: Sequence[PlantedResult],
    comparisons: Sequence[PairedComparison],
    within: Sequence[tuple[str, str]],
) -> Verdict:
    """The verdict with the lines printed beside it: what the pilot found of its planted
    slowdown, and the second estimate of the same processes switched off in place (the process
    effect cancels there), named where it disagrees with the direct estimate beyond both
    intervals."""
    pairs = [(k0, c) for k0, c in within if c == v.candidate_arm]
    direct = {
        c.phase: c.task_rel_change
        for c in comparisons
        if (c.baseline_arm, c.candidate_arm) == (v.baseline_arm, v.candidate_arm)
        and c.task_group == ALL
    }
    lines = []
    for k0, cand in pairs:
        for c in comparisons:
            if (c.baseline_arm, c.candidate_arm) != (k0, cand) or c.task_group != ALL:
                continue
            e, d = c.task_rel_change, direct.get(c.phase)
            apart = (
                d is not None
                and None not in (e.low, e.high, d.low, d.high)
                and (e.high < d.low or d.high < e.low)  # type: ignore[operator]
            )
            lines.append(
                f"{c.phase}: {signed_pct(e.estimate)} [{signed_pct(e.low)}, {signed_pct(e.high)}] -> "
                + OUTCOME_WORDS.get(c.outcome, c.outcome)
                + ("; DISAGREES with the direct estimate beyond both intervals" if apart else "")
            )
    return dataclasses.replace(
        v,
        planted="; ".join(r.text for r in planted),
        within=(
            f"the same processes with speculation switched off vs on (the process effect "
            f"cancels): {'; '.join(lines)}"
            if lines
            else ""
        ),
    )
