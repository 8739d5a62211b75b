"""Levels fitted to the budget (``episodes.fit_budget``): how long each load level given as a
fraction of capacity plays, from the budget and what this machine measured.

A level at utilization u plays at u x the measured capacity, so its wall time per request is
1/rate on every arm: at 0.3 of the 0.55 req/s the default's baseline sustains on the AMD EPYC
AVX-512 kind that is 6 s a request and arm, and on the AVX2 kind four times that. A fixed
duration then means a different pilot (and a different wall time) on every machine. Here the
pilot is planned with the ETA's own plan (``pilot.run.eta_plan``: the engine starts, the probe,
every episode with its simulated drain, the checks) with each level at its **least** length (the
time that holds ``per_level`` requests, one an episode) plus a common ``t`` seconds, capped at
the file's ``duration_s`` (its most); the largest ``t`` whose plan fits ``budget_min`` less
``MARGIN`` is found by bisection.

Equal seconds, not equal requests: a request at 0.3 of capacity costs 2.7x one at 0.8, and the
low level's requests mostly find the engine idle either way (the terminal's fit line states the
requests each episode holds). A machine too slow for even the least length keeps it, and the
budget's own rule (``pilot.run.looks``) drops the last episodes, or refuses the pilot, as for any
pilot.

    >>> cost = lambda s: 300.0 + 3 * sum(s.values())   # 3 arms replay every second
    >>> fit({"off": (50.0, 600.0), "peak": (20.0, 300.0)}, cost, budget_s=800.0)
    {'off': 91.4, 'peak': 61.4}
    >>> fit({"off": (50.0, 600.0)}, cost, budget_s=300.0)
    {'off': 50.0}
    >>> least_s([0.0, 4.0, 9.0, 30.0], 3, 600.0), least_s([0.0, 4.0], 3, 600.0)
    (9.1, 600.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specpilot.workload import Schedule

MARGIN = 0.05  # the share of the budget the fit leaves unplanned (the ETA's own error)
STEPS = 10  # bisection steps: the common extra seconds to 1/1024 of the widest range


def least_s(times: Sequence[float], per_level: int, most: float) -> float:
    """The seconds from a level's start that hold its first ``per_level`` arrivals (``times``:
    its send times at its most length; a trace's or a seeded process's arrivals are the same
    in a shorter play); ``most`` where it holds fewer."""
    t = sorted(times)
    return most if len(t) < per_level else min(most, math.ceil((t[per_level - 1] + 0.05) * 10) / 10)


def lengths(
    schedule: Schedule, names: Iterable[str], per_level: int
) -> dict[str, tuple[float, float]]:
    """Each named level of ``schedule`` (built at its most lengths) -> (its least, its most
    seconds): what ``fit`` ranges over, in the run and in ``--dry-run`` alike."""
    keep = set(names)
    return {
        p.name: (
            least_s(
                [r.send_t for r in schedule.requests if r.phase == p.name], per_level, p.duration_s
            ),
            float(p.duration_s),
        )
        for p in schedule.phases
        if p.name in keep
    }


def fit(
    levels: Mapping[str, tuple[float, float]],
    planned: Callable[[dict[str, float]], float],
    budget_s: float,
    steps: int = STEPS,
) -> dict[str, float]:
    """Each level's seconds: ``levels`` maps a level to (its least, its most seconds);
    ``planned(seconds)``: the pilot's whole ETA (time spent included) with the levels at those
    lengths. Every level gets the same seconds ``t`` over its least (capped at its most), the
    largest ``t`` whose plan fits ``budget_s`` less ``MARGIN``, by bisection: the plan, not a
    rate, says what a longer level costs (a trace's silent stretches inside an episode, the
    drains that grow with the queue)."""

    def at(t: float) -> dict[str, float]:
        # rounded up, never below the least: arrivals are kept while before the length
        return {n: _up(min(most, least + t)) for n, (least, most) in levels.items()}

    goal = budget_s * (1.0 - MARGIN)
    lo, hi = 0.0, max((most - least for least, most in levels.values()), default=0.0)
    if hi <= 0 or planned(at(0.0)) >= goal:
        return at(0.0)
    if planned(at(hi)) <= goal:
        return at(hi)
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if planned(at(mid)) <= goal else (lo, mid)
    return at(lo)


def _up(seconds: float) -> float:
    """``seconds`` rounded up to a tenth (a level's length never cuts an arrival it holds)."""
    return math.ceil(round(seconds * 10, 6)) / 10


def fit_note(
    fitted: Mapping[str, float], rates: Mapping[str, float], per_level: int, budget_min: float
) -> str:
    """The fit in one line for the terminal and the report."""
    parts = [
        f"{n} {s:.0f} s (about {s * rates[n]:.0f} requests, "
        f"{s * rates[n] / per_level:.1f} an episode)"
        for n, s in fitted.items()
    ]
    return (
        f"levels fitted to the budget of {budget_min:g} min at the capacity measured: "
        + "; ".join(parts)
    )
