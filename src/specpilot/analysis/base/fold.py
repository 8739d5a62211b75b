"""The episode design's records seen by load level: a pilot that replayed each measured phase
as episodes (phases ``level~01``, ``level~02``, ...; ``pilot.design``) is analysed per level,
the episode kept in each request's id (``level~03-000123``: ``episode_key``) and each run's
episode phases merged into one phase record of the level. A pilot without episodes is
returned unchanged.

    >>> from specpilot.records import PhaseRecord
    >>> ph = [PhaseRecord("r", "a", f"peak~0{k}", 0.0, 10.0, 1.0, 10, status="complete",
    ...                   other_cpu_cores=0.1 * k) for k in (1, 2)]
    >>> (p,) = fold_phases(ph)
    >>> p.phase, p.scheduled, p.offered_rate, p.status, round(p.other_cpu_cores, 2)
    ('peak', 20, 1.0, 'complete', 0.15)
    >>> episode_key("peak~03-000123"), episode_key("peak-000123")
    ('peak~03', '')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from specpilot.records import EPISODE_SEP, PhaseRecord, PilotData, level_of


class _Phased(Protocol):
    phase: str


_R = TypeVar("_R", bound=_Phased)


def has_episodes(data: PilotData) -> bool:
    return any(EPISODE_SEP in p.phase for p in data.phases) or any(
        EPISODE_SEP in r.phase for r in data.requests[:1]
    )


def episode_key(request_id: str) -> str:
    """The episode phase a request id was scheduled in ('' when the pilot had no episodes)."""
    phase = request_id.rsplit("-", 1)[0]
    return phase if EPISODE_SEP in phase else ""


def fold_phases(phases: Sequence[PhaseRecord]) -> list[PhaseRecord]:
    """One record per (run, level): durations and requests added, the earliest start, the
    latest end, complete only when every episode is, CPU figures averaged by duration."""
    groups: dict[tuple[str, str], list[PhaseRecord]] = {}
    for p in phases:
        groups.setdefault((p.run_id, level_of(p.phase)), []).append(p)
    out = []
    for (_, level), ps in groups.items():
        if len(ps) == 1 and ps[0].phase == level:
            out.append(ps[0])
            continue
        dur = [max(p.planned_end_s - p.planned_start_s, 0.0) for p in ps]
        total = sum(dur)
        n = sum(p.scheduled for p in ps)
        status = (
            "complete"
            if all(p.status == "complete" for p in ps)
            else next(p.status for p in ps if p.status != "complete")
        )
        starts = [p.actual_start_t for p in ps if p.actual_start_t is not None]
        ends = [p.actual_end_t for p in ps if p.actual_end_t is not None]
        out.append(
            dataclasses.replace(
                ps[0],
                phase=level,
                planned_start_s=min(p.planned_start_s for p in ps),
                planned_end_s=min(p.planned_start_s for p in ps) + total,
                offered_rate=n / total if total > 0 else 0.0,
                scheduled=n,
                actual_start_t=min(starts) if starts else None,
                actual_end_t=max(ends) if ends and status == "complete" else None,
                status=status,
                other_cpu_cores=_mean(ps, dur, "other_cpu_cores"),
                steal_fraction=_mean(ps, dur, "steal_fraction"),
            )
        )
    return out


def arm_rates(phases: Sequence[PhaseRecord]) -> dict[tuple[str, str], float]:
    """(arm, phase) -> the arm's offered rate there: its runs' rates weighted by their planned
    seconds (their plain mean where none has any). In the episode design each run (one
    process) serves only some episodes of a level, whose local rates differ (seen: 1.59 req/s
    for an off-peak level of 1.23, 1.48 for a peak of 2.14); together the runs cover the level
    once, so this is the level's rate, and with repetitions the mean rate of the phase.

        >>> from specpilot.records import PhaseRecord
        >>> ph = [PhaseRecord(r, "a", "peak", 0.0, 10.0, x, 1) for r, x in (("r0", 0.5), ("r1", 2.5))]
        >>> arm_rates(ph)
        {('a', 'peak'): 1.5}
    """
    acc: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for p in phases:
        dur = max(p.planned_end_s - p.planned_start_s, 0.0)
        acc.setdefault((p.arm, p.phase), []).append((p.offered_rate, dur))
    out = {}
    for key, xs in acc.items():
        total = sum(d for _, d in xs)
        out[key] = (
            sum(r * d for r, d in xs) / total if total > 0 else sum(r for r, _ in xs) / len(xs)
        )
    return out


def _mean(ps: Sequence[PhaseRecord], w: Sequence[float], attr: str) -> float | None:
    xs = [(getattr(p, attr), x) for p, x in zip(ps, w, strict=True) if getattr(p, attr) is not None]
    tot = sum(x for _, x in xs)
    return sum(v * x for v, x in xs) / tot if xs and tot > 0 else None


def fold(data: PilotData) -> PilotData:
    """The pilot's records by load level (module docstring): the requests, their round
    aggregates, chunk gaps, prefills and step cadences, and the phase records. The metric snapshots keep their episode
    phases: an engine's counters are deltas over each episode's edges (``counters``)."""
    if not has_episodes(data):
        return data
    return dataclasses.replace(
        data,
        requests=_by_level(data.requests),
        request_columns=_columns_by_level(data.request_columns),
        request_rounds=_by_level(data.request_rounds),
        request_rounds_columns=_columns_by_level(data.request_rounds_columns),
        chunk_gaps=_by_level(data.chunk_gaps),
        prefills=_by_level(data.prefills),
        step_cadence=_by_level(data.step_cadence),
        phases=fold_phases(data.phases),
    )


def _by_level(records: Sequence[_R]) -> list[_R]:
    return [
        dataclasses.replace(r, phase=level_of(r.phase)) if EPISODE_SEP in r.phase else r  # type: ignore[type-var]
        for r in records
    ]


def _columns_by_level(cols: dict[str, Any] | None) -> dict[str, Any] | None:
    if cols is None or len(cols["phase"]) == 0:
        return cols
    labels, codes = np.unique(
        np.asarray(cols["phase"], dtype=object).astype(str), return_inverse=True
    )
    return {**cols, "phase": np.array([level_of(x) for x in labels], dtype=object)[codes]}
