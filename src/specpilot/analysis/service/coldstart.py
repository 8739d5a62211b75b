"""Cold start apart from the steady state (R6), per arm:

- **start to healthy**: each engine process's start until it answered (``ArmRecord.cold_start_s``,
  timed apart: an endpoint given by URL has none);
- **the first requests after a start**: the warm-up requests each process serves first (they are
  never in the comparison), or where a process was warmed by its fingerprint instead (the episode
  design), its first ``FIRST_AFTER_START`` measured requests; their median TTFT and task time
  against the same arm's steady state (its other measured requests);
- **after the drill's restart** (engines that restart to switch): the first requests sent after
  the switch was in force, against the steady state.

A figure with no request behind it is None, never 0.

    >>> med([3.0, 1.0, 2.0]), med([])
    (2.0, None)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specpilot.records import DRILL_PHASE, DrillRecord, PilotData

FIRST_AFTER_RESTART = 5  # requests after a drill's restart counted as its cold start
FIRST_AFTER_START = 3  # a process's first measured requests, where it served no warm-up


@dataclass(frozen=True)
class Timing:
    requests: int  # answered ones the medians are over
    ttft_s: float | None
    task_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ColdStart:
    arm: str
    processes: int  # runs with a start timed
    start_to_healthy_s: float | None  # median over its processes
    start_to_healthy_max_s: float | None
    first: Timing  # the warm-up requests after each start
    steady: Timing  # its measured requests
    after_restart: Timing | None  # the drill's restart (None: it switched without one)
    text: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Row:
    arm: str
    run_id: str
    warmup: bool
    drill: bool
    ok: bool
    sent: float
    first: float
    done: float


def med(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def cold_starts(data: PilotData) -> list[ColdStart]:
    """One ``ColdStart`` per arm with a timed start or warm-up requests."""
    rows = list(_rows(data))
    out = []
    for arm in sorted({a.arm for a in data.arms}):
        starts = [a.cold_start_s for a in data.arms if a.arm == arm and a.cold_start_s]
        mine = [r for r in rows if r.arm == arm and r.ok]
        early = _first_after_start(mine)
        first = _timing(early)
        if not starts and not first.requests:
            continue
        steady = _timing([r for r in mine if not r.warmup and not r.drill and r not in early])
        restart = _after_restart([d for d in data.drills if d.arm == arm], mine)
        text = _text(arm, starts, first, steady, restart)
        top = max(starts) if starts else None
        out.append(ColdStart(arm, len(starts), med(starts), top, first, steady, restart, text))
    return out


def _first_after_start(rows: Sequence[_Row]) -> list[_Row]:
    """Per process (run): its warm-up requests, or its first measured ones where it had none."""
    out = []
    for run in sorted({r.run_id for r in rows}):
        mine = sorted((r for r in rows if r.run_id == run and not r.drill), key=lambda r: r.sent)
        warm = [r for r in mine if r.warmup]
        out += warm or mine[:FIRST_AFTER_START]
    return out


def _timing(rows: Sequence[_Row]) -> Timing:
    return Timing(
        len(rows), med([r.first - r.sent for r in rows]), med([r.done - r.sent for r in rows])
    )


def _after_restart(drills: Sequence[DrillRecord], rows: Sequence[_Row]) -> Timing | None:
    restarts = [d for d in drills if d.kind == "restart" and d.in_force_t is not None]
    if not restarts:
        return None
    at = restarts[0].in_force_t
    after = sorted(
        (r for r in rows if r.drill and at is not None and r.sent >= at), key=lambda r: r.sent
    )
    return _timing(after[:FIRST_AFTER_RESTART])


def _rows(data: PilotData) -> Iterator[_Row]:
    """Every answered request with its times (records, or the columns of a large file)."""
    cols = data.request_columns
    if cols is not None:
        keys = ("arm", "run_id", "warmup", "phase", "status", "sent_t", "first_content_t", "done_t")
        for arm, run, warm, phase, status, s, f, d in zip(*(cols[k] for k in keys), strict=True):
            if status == "ok" and _finite(s, f, d):
                yield _Row(str(arm), str(run), bool(warm), phase == DRILL_PHASE, True, s, f, d)
        return
    for r in data.requests:
        if r.status == "ok" and _finite(r.sent_t, r.first_content_t, r.done_t):
            assert r.sent_t is not None and r.first_content_t is not None and r.done_t is not None
            drill = r.phase == DRILL_PHASE
            yield _Row(
                r.arm, r.run_id, r.warmup, drill, True, r.sent_t, r.first_content_t, r.done_t
            )


def _finite(*xs: float | None) -> bool:
    return all(x is not None and x == x and abs(x) != float("inf") for x in xs)


def _text(
    arm: str, starts: Sequence[float], first: Timing, steady: Timing, restart: Timing | None
) -> str:
    parts = []
    if starts:
        s = med(starts) or 0.0
        parts.append(
            f"start to healthy {s:.1f} s (median of {len(starts)}, longest {max(starts):.1f} s)"
        )
    parts.append(_against("first requests after a start", first, steady))
    if restart is not None:
        parts.append(_against("first requests after the drill's restart", restart, steady))
    return f"{arm}: " + "; ".join(parts)


def _against(what: str, t: Timing, steady: Timing) -> str:
    if not t.requests or t.ttft_s is None or t.task_s is None:
        return f"{what}: none answered"
    ratio = (
        f" ({t.ttft_s / steady.ttft_s:.2f}x and {t.task_s / steady.task_s:.2f}x the steady state's)"
        if steady.ttft_s and steady.task_s
        else ""
    )
    return f"{what}: TTFT {t.ttft_s:.2f} s, task {t.task_s:.2f} s over {t.requests}{ratio}"
