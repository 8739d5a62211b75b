"""The server's own figures during the phases: KV use, the queue, preemptions, and the
concurrency each arm was started with, from the engines' snapshots (pure, over records).

- The series: snapshots labelled ``DURING`` (every second or two inside a phase, the phase they
  fall in). Per arm and load level (an episode's snapshots count for its level): KV-cache use
  (0..1) and waiting and running requests, peak and p90 over every sample of every replica
  (numpy's linear quantile); the busiest slot count where the engine has fixed slots.
- Preemptions: the engine's counter, after - before over each phase's edges (the edges keep
  their meaning: the series never enters a delta), summed over the level's phases and replicas.
- A scrape that failed is a snapshot whose ``raw`` says why: its replica is named (run and
  endpoint) with how many failed, and it adds nothing to a figure, never a zero. A figure the
  engine does not publish (llama.cpp has no preemption counter and, in current builds, no KV
  use) is None and listed as not published.
- Admissible concurrency, per arm, from its earliest snapshot that says it: sequences of the
  longest context the KV cache admits as the engine sized it from its memory
  (``kv_admissible_sequences``: vLLM, SGLang), else the fixed slots of an engine whose slots are
  a setting (``slots_total``: llama.cpp, the builtin server), which a draft cannot lower.

    >>> from specpilot.records import MetricSnapshot as S, PhaseRecord as P
    >>> snaps = [S("r", "a", "peak", "during", float(t), "vllm", {"kv_cache_usage": u,
    ...          "requests_waiting": w}) for t, u, w in ((1, 0.2, 0), (2, 0.9, 3), (3, 0.5, 1))]
    >>> c = fleet_cells(snaps, [P("r", "a", "peak", 0.0, 4.0, 1.0, 4)], [])[0]
    >>> c.kv_use_peak, c.waiting_peak, c.samples, c.not_published
    (0.9, 3.0, 3, ('requests_running', 'preemptions'))
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from specpilot.analysis.base.columns import quantiles
from specpilot.backends.protocol import (
    CONTEXT,
    KV_SEQUENCES,
    KV_TOKENS,
    KV_USE,
    PREEMPTIONS,
    RUNNING,
    SLOTS,
    SLOTS_BUSY,
    WAITING,
)
from specpilot.records import DURING, ArmRecord, MetricSnapshot, PhaseRecord, level_of

GAUGES = (("kv_use", KV_USE), ("running", RUNNING), ("waiting", WAITING))
NOT_LEVELS = ("start", "warmup", "drill")  # phases whose snapshots are not a load level's


@dataclass(frozen=True)
class Series:
    """One replica's samples inside one phase: seconds from the phase's start (its ``before``
    edge, else its first sample) and each gauge (None where that scrape did not say)."""

    run_id: str
    phase: str
    t_s: tuple[float, ...]
    kv_use: tuple[float | None, ...]
    running: tuple[float | None, ...]
    waiting: tuple[float | None, ...]


@dataclass(frozen=True)
class FleetCell:
    arm: str
    phase: str  # the load level
    engine: str
    samples: int  # DURING snapshots that answered, every replica
    replicas: int  # runs with at least one answered sample
    interval_s: float | None  # median gap between a replica's consecutive samples
    kv_use_peak: float | None
    kv_use_p90: float | None
    running_peak: float | None
    running_p90: float | None
    waiting_peak: float | None
    waiting_p90: float | None
    slots_busy_peak: float | None
    preemptions: float | None  # counter deltas over the phase edges; None: unknown
    not_published: tuple[str, ...]  # figures the engine did not publish (absent, never zero)
    failed: tuple[str, ...]  # one line per replica whose scrapes failed
    series: tuple[Series, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Admissible:
    """The concurrency an arm was started with (module docstring)."""

    arm: str
    engine: str
    sequences: float | None  # the smallest over its replicas that said it
    sized_by: str | None  # "kv_cache" (from memory) | "slots" (a setting) | None: not published
    context_tokens: float | None
    kv_capacity_tokens: float | None
    replicas: int  # runs that published it
    note: str
    endpoints: tuple[str, ...] = ()  # where it was read (the runs' manifests)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _endpoints(arms: Sequence[ArmRecord]) -> dict[str, str]:
    return {a.run_id: str((a.manifest or {}).get("endpoint") or "") for a in arms}


def _levels(phases: Sequence[PhaseRecord]) -> set[str]:
    return {level_of(p.phase) for p in phases if not p.warmup} - set(NOT_LEVELS)


def _failures(snaps: Sequence[MetricSnapshot], where: dict[str, str]) -> tuple[str, ...]:
    out = []
    for run in sorted({s.run_id for s in snaps if s.failed}):
        bad = [s for s in snaps if s.run_id == run and s.failed]
        of = sum(1 for s in snaps if s.run_id == run)
        at = f" at {where[run]}" if where.get(run) else ""
        out.append(
            f"run {run}{at}: {len(bad)} of {of} scrapes failed, its figures left out "
            f"({bad[0].raw.strip()[:160]})"
        )
    return tuple(out)


def _peak_p90(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(max(values)), quantiles(np.asarray(values), (0.9,))[0]


def _preemptions(snaps: Sequence[MetricSnapshot]) -> float | None:
    """Sum over (run, phase) of after - before of the counter; None when no edge pair has it."""
    edges: dict[tuple[str, str], dict[str, MetricSnapshot]] = {}
    for s in snaps:
        if s.label in ("before", "after") and not s.failed:
            edges.setdefault((s.run_id, s.phase), {})[s.label] = s
    deltas = [
        e["after"].metrics[PREEMPTIONS] - e["before"].metrics[PREEMPTIONS]
        for e in edges.values()
        if "before" in e
        and "after" in e
        and PREEMPTIONS in e["before"].metrics
        and PREEMPTIONS in e["after"].metrics
    ]
    return float(sum(deltas)) if deltas else None


def _series(during: Sequence[MetricSnapshot], snaps: Sequence[MetricSnapshot]) -> list[Series]:
    starts = {(s.run_id, s.phase): s.t for s in snaps if s.label == "before"}
    out = []
    for run, phase in sorted({(s.run_id, s.phase) for s in during}):
        mine = sorted(
            (s for s in during if s.run_id == run and s.phase == phase), key=lambda s: s.t
        )
        t0 = starts.get((run, phase), mine[0].t)
        cols = {ours: tuple(s.metrics.get(theirs) for s in mine) for ours, theirs in GAUGES}
        out.append(Series(run, phase, tuple(round(s.t - t0, 3) for s in mine), **cols))
    return out


def _interval(during: Sequence[MetricSnapshot]) -> float | None:
    gaps: list[float] = []
    for run, phase in {(s.run_id, s.phase) for s in during}:
        t = sorted(s.t for s in during if s.run_id == run and s.phase == phase)
        gaps += [b - a for a, b in itertools.pairwise(t)]
    return float(np.median(gaps)) if gaps else None


def _cell(
    arm: str, level: str, snaps: Sequence[MetricSnapshot], where: dict[str, str]
) -> FleetCell:
    during = [s for s in snaps if s.label == DURING and not s.failed]
    figures: dict[str, tuple[float | None, float | None]] = {}
    for ours, theirs in GAUGES:
        figures[ours] = _peak_p90([s.metrics[theirs] for s in during if theirs in s.metrics])
    busy = [s.metrics[SLOTS_BUSY] for s in during if SLOTS_BUSY in s.metrics]
    pre = _preemptions(snaps)
    answered = [s for s in snaps if not s.failed]
    published = {k for s in answered for k in s.metrics}
    missing = [k for _, k in GAUGES if during and k not in published]
    missing += [PREEMPTIONS] if answered and PREEMPTIONS not in published else []
    engine = next((s.engine for s in answered), "unknown")
    return FleetCell(
        arm=arm,
        phase=level,
        engine=engine,
        samples=len(during),
        replicas=len({s.run_id for s in during}),
        interval_s=_interval(during),
        kv_use_peak=figures["kv_use"][0],
        kv_use_p90=figures["kv_use"][1],
        running_peak=figures["running"][0],
        running_p90=figures["running"][1],
        waiting_peak=figures["waiting"][0],
        waiting_p90=figures["waiting"][1],
        slots_busy_peak=float(max(busy)) if busy else None,
        preemptions=pre,
        not_published=tuple(missing),
        failed=_failures(snaps, where),
        series=tuple(_series(during, snaps)),
    )


def fleet_cells(
    snapshots: Sequence[MetricSnapshot],
    phases: Sequence[PhaseRecord],
    arms: Sequence[ArmRecord],
) -> list[FleetCell]:
    """One cell per (arm, load level) with a snapshot (module docstring); a level whose arm
    has edges but no ``DURING`` sample (scraped at the edges only) has samples 0."""
    levels = _levels(phases)
    where = _endpoints(arms)
    by: dict[tuple[str, str], list[MetricSnapshot]] = {}
    for s in snapshots:
        lv = level_of(s.phase)
        if lv in levels:
            by.setdefault((s.arm, lv), []).append(s)
    return [_cell(arm, lv, snaps, where) for (arm, lv), snaps in sorted(by.items())]


def admissible(snapshots: Sequence[MetricSnapshot], arms: Sequence[ArmRecord]) -> list[Admissible]:
    """Per arm with snapshots: the concurrency it was started with (module docstring)."""
    engines = {a.arm: a.engine for a in arms}
    where = _endpoints(arms)
    out = []
    for arm in sorted({s.arm for s in snapshots}):
        first: dict[str, MetricSnapshot] = {}
        for s in sorted((s for s in snapshots if s.arm == arm and not s.failed), key=lambda s: s.t):
            if KV_SEQUENCES in s.metrics or SLOTS in s.metrics:
                first.setdefault(s.run_id, s)
        got = _admissible(arm, engines.get(arm, "unknown"), list(first.values()))
        urls = tuple(sorted({where[r] for r in first if where.get(r)}))
        out.append(replace(got, endpoints=urls))
    return out


def _admissible(arm: str, engine: str, firsts: list[MetricSnapshot]) -> Admissible:
    kv = [s for s in firsts if KV_SEQUENCES in s.metrics]
    if kv:
        values = sorted({s.metrics[KV_SEQUENCES] for s in kv})
        s = min(kv, key=lambda s: s.metrics[KV_SEQUENCES])
        note = (
            "sequences of the longest context the KV cache admits, as the engine sized it "
            "from its memory at start"
        )
        if len(values) > 1:
            note += f"; its replicas differ ({', '.join(f'{v:g}' for v in values)}): the least"
        return Admissible(
            arm,
            engine,
            values[0],
            "kv_cache",
            s.metrics.get(CONTEXT),
            s.metrics.get(KV_TOKENS),
            len(kv),
            note,
        )
    slots = [s for s in firsts if SLOTS in s.metrics]
    if slots:
        s = min(slots, key=lambda s: s.metrics[SLOTS])
        return Admissible(
            arm,
            engine,
            s.metrics[SLOTS],
            "slots",
            s.metrics.get(CONTEXT),
            None,
            len(slots),
            "fixed slots, a setting of the engine: a draft costs it memory, never slots",
        )
    return Admissible(
        arm, engine, None, None, None, None, 0, "not published by the engine's endpoints"
    )
