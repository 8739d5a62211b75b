"""R5/R6 load figures per arm, phase and task group, with every scheduled request counted.

Percentiles (p50/p90/p99, numpy's linear method) are over *all* scheduled steady-state requests
of the cell: a request that failed, timed out or was never sent counts as never finishing, so
a percentile that falls among them is reported as not reached (None), never recomputed from
the successful requests alone. Each figure carries the number of requests it is over.

- throughput = output tokens of ok requests / phase duration; requests/s likewise
- goodput = good requests (on time and no failed key check, ``RequestTable``) / phase
  duration; the on-time count beside it is latency only
- ratios (timeout, rejected, error, cancelled, not_sent, on-time) = count / scheduled
- ITL per token = chunk gap / tokens in that chunk (token-weighted), from ok requests' chunks;
  per-chunk gaps and tokens per chunk too (speculative servers send bursts)
- phase duration = actual end - actual start when recorded, else the planned duration;
  repetitions of an arm add their durations
- ``slo_checks``: each of the group's percentile conditions on the cell (``service.slo``):
  p<P>(metric) from the figures above against the threshold; the pooled ``*`` cell has
  none (its groups' thresholds differ)

    >>> from specpilot.records import PhaseRecord, RequestRecord as R
    >>> reqs = [R("r", "a", "p", "g", f"p-{i}", i, "ok", sent_t=i, first_content_t=i + 0.1,
    ...           done_t=i + 1, output_tokens=10) for i in range(3)]
    >>> reqs.append(R("r", "a", "p", "g", "p-3", 3, "timeout", sent_t=3.0))
    >>> cells = load_cells(RequestTable.build(reqs), [PhaseRecord("r", "a", "p", 0, 4, 1.0, 4)])
    >>> c = cells[0]
    >>> c.scheduled, c.ratios["timeout"], c.e2e.p50, c.e2e.p99, c.goodput_rps
    (4, 0.25, 1.0, None, 0.75)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from specpilot.analysis.base.columns import (
    ALL,
    combine,
    count_by,
    quantiles,
    quantiles_by,
    sum_by,
)
from specpilot.analysis.base.fold import arm_rates
from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.service.slo import SLOCheck, check
from specpilot.definitions import SLOCondition
from specpilot.records import STATUSES, ChunkGaps, MetricSnapshot, PhaseRecord, level_of

QS = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Quantiles:
    """p50/p90/p99 over ``n`` rows; ``measured`` of them had a finite value."""

    n: int
    measured: int
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True)
class LoadCell:
    arm: str
    phase: str
    task_group: str  # "*" = every group of the phase
    offered_rate: float | None
    duration_s: float
    scheduled: int
    counts: dict[str, int]  # per status
    ratios: dict[str, float]  # per status, over scheduled
    on_time: int  # latency only (TTFT SLO and deadline met)
    on_time_ratio: float | None
    cold_start_excluded: int
    ttft: Quantiles
    tpot: Quantiles
    e2e: Quantiles
    itl_token: Quantiles | None = None
    chunk_gap: Quantiles | None = None
    tokens_per_chunk: float | None = None
    throughput_tokens_s: float | None = None
    throughput_rps: float | None = None
    goodput_rps: float | None = None
    peak_rss_bytes: int | None = None
    peak_gpu_bytes: int | None = None
    good: int = 0  # on time and quality intact: what goodput counts
    good_ratio: float | None = None
    slo_checks: tuple[SLOCheck, ...] = ()  # the group's percentile conditions on this cell

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "slo_checks": [c.to_dict() for c in self.slo_checks]}


def phase_durations(phases: Sequence[PhaseRecord]) -> dict[tuple[str, str], float]:
    """(arm, phase) -> seconds, repetitions summed; actual edges when both are recorded."""
    out: dict[tuple[str, str], float] = {}
    for p in phases:
        if p.warmup:
            continue
        if p.actual_start_t is not None and p.actual_end_t is not None:
            d = p.actual_end_t - p.actual_start_t
        else:
            d = p.planned_end_s - p.planned_start_s
        out[(p.arm, p.phase)] = out.get((p.arm, p.phase), 0.0) + max(d, 0.0)
    return out


def load_cells(
    table: RequestTable,
    phases: Sequence[PhaseRecord],
    chunk_gaps: Sequence[ChunkGaps] = (),
    snapshots: Sequence[MetricSnapshot] = (),
    conditions: Mapping[str, Sequence[SLOCondition]] | None = None,
) -> list[LoadCell]:
    """Cells per (arm, phase, group) and per (arm, phase, ``*``), steady state only;
    ``conditions``: per group, its percentile conditions (``service.slo.conditions_of``)."""
    durations = phase_durations(phases)
    rates = arm_rates(phases)
    steady = ~table.cold_start
    out: list[LoadCell] = []
    cols = [table.codes(k) for k in ("arm", "phase", "task_group")]
    for pooled in (False, True):
        use = cols[:2] if pooled else cols
        codes, combos = combine([c for c, _ in use], [len(lab) for _, lab in use])
        labels = [
            (
                cols[0][1][combos[0, j]],
                cols[1][1][combos[1, j]],
                ALL if pooled else cols[2][1][combos[2, j]],
            )
            for j in range(combos.shape[1])
        ]
        out.extend(_cells(table, codes, labels, steady, durations, rates))
    itl = _itl(chunk_gaps)
    mem = _peak_memory(snapshots)
    cells = [_with_extras(c, itl, mem) for c in out]
    return [_with_checks(c, (conditions or {}).get(c.task_group, ())) for c in cells]


def _with_checks(c: LoadCell, conditions: Sequence[SLOCondition]) -> LoadCell:
    if not conditions or c.task_group == ALL:
        return c
    q = {"ttft": c.ttft, "tpot": c.tpot, "e2e": c.e2e, "itl": c.itl_token}
    checks = []
    for k in conditions:
        got = q[k.quantity]
        if got is None:  # no chunk records: ITL not measured
            checks.append(check(k, 0, None))
        else:
            checks.append(check(k, got.n, getattr(got, f"p{k.percentile}")))
    return replace(c, slo_checks=tuple(checks))


def _quant(codes: np.ndarray, values: np.ndarray, mask: np.ndarray, n: int) -> list[Quantiles]:
    qs = quantiles_by(codes[mask], values[mask], n, QS)
    rows = count_by(codes, mask, n)
    fin = count_by(codes, mask & np.isfinite(values), n)
    return [Quantiles(int(rows[c]), int(fin[c]), *qs[c]) for c in range(n)]


def _cells(
    t: RequestTable,
    codes: np.ndarray,
    labels: list[Any],
    steady: np.ndarray,
    durations: dict[tuple[str, str], float],
    rates: dict[tuple[str, str], float],
) -> list[LoadCell]:
    n = len(labels)
    sched = count_by(codes, steady, n)
    counts = {s: count_by(codes, steady & (t.status == s), n) for s in STATUSES}
    on_time = count_by(codes, steady & t.on_time, n)
    good = count_by(codes, steady & t.good, n)
    cold = count_by(codes, ~steady, n)
    ok = steady & t.ok
    tokens = sum_by(codes, np.where(ok, t.output_tokens, 0.0), n)
    ttft, e2e = _quant(codes, t.ttft, steady, n), _quant(codes, t.e2e, steady, n)
    tpot = _quant(codes, t.tpot, steady & ~np.isnan(t.tpot), n)
    cells = []
    for c, (arm, phase, group) in enumerate(labels):
        s, dur = int(sched[c]), durations.get((arm, phase), 0.0)
        cells.append(
            LoadCell(
                arm=arm,
                phase=phase,
                task_group=group,
                offered_rate=rates.get((arm, phase)),
                duration_s=dur,
                scheduled=s,
                counts={k: int(v[c]) for k, v in counts.items()},
                ratios={k: float(v[c] / s) if s else 0.0 for k, v in counts.items()},
                on_time=int(on_time[c]),
                on_time_ratio=float(on_time[c] / s) if s else None,
                cold_start_excluded=int(cold[c]),
                ttft=ttft[c],
                tpot=tpot[c],
                e2e=e2e[c],
                throughput_tokens_s=float(tokens[c] / dur) if dur else None,
                throughput_rps=float(counts["ok"][c] / dur) if dur else None,
                goodput_rps=float(good[c] / dur) if dur else None,
                good=int(good[c]),
                good_ratio=float(good[c] / s) if s else None,
            )
        )
    return cells


def _itl(chunk_gaps: Sequence[ChunkGaps]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per (arm, phase, group) and (arm, phase, *): token-weighted ITL, chunk gaps, tokens/chunk.

    Float32 and one (arm, phase) at a time: 50M chunks stay within a few hundred MB; each token
    gets its chunk's gap / tokens (repeated, then sorted), so quantiles are over tokens.
    """
    by_phase: dict[tuple[str, str], dict[str, list[ChunkGaps]]] = {}
    for g in chunk_gaps:
        by_phase.setdefault((g.arm, g.phase), {}).setdefault(g.task_group, []).append(g)
    out = {}
    for (arm, phase), groups in by_phase.items():
        pooled: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for group, gs in groups.items():
            gap = np.concatenate([np.asarray(g.gap_s, dtype=np.float32) for g in gs])
            tok = np.concatenate([np.asarray(g.tokens, dtype=np.int32) for g in gs])
            keep = tok > 0
            gap, tok = gap[keep], tok[keep]
            per_token, gap = _per_token(gap, tok), np.sort(gap)
            pooled.append((per_token, gap, tok))
            out[(arm, phase, group)] = _itl_stats(per_token, gap, tok)
        out[(arm, phase, ALL)] = _itl_stats(
            np.sort(np.concatenate([p[0] for p in pooled])),
            np.sort(np.concatenate([p[1] for p in pooled])),
            np.concatenate([p[2] for p in pooled]),
        )
    return out


def _per_token(gap: np.ndarray, tok: np.ndarray) -> np.ndarray:
    """Sorted per-token gaps: each chunk's gap / its tokens, once per token."""
    if tok.size and int(tok.max()) > 4096:
        raise ValueError(f"a chunk claims {int(tok.max())} tokens: check the chunk records")
    return np.sort(np.repeat(gap / tok.astype(np.float32), tok))


def _itl_stats(per_token: np.ndarray, gap: np.ndarray, tok: np.ndarray) -> dict[str, Any]:
    n_tok = int(tok.sum())
    return {
        "itl_token": Quantiles(n_tok, n_tok, *quantiles(per_token, QS, presorted=True)),
        "chunk_gap": Quantiles(int(gap.size), int(gap.size), *quantiles(gap, QS, presorted=True)),
        "tokens_per_chunk": float(tok.mean()) if tok.size else None,
    }


def _peak_memory(snapshots: Sequence[MetricSnapshot]) -> dict[tuple[str, str], tuple[Any, Any]]:
    """Per (arm, load level): the largest RSS and GPU memory at its phases' edges and in the
    series scraped inside them (an episode's snapshots count for its level)."""
    out: dict[tuple[str, str], tuple[Any, Any]] = {}
    for s in snapshots:
        key = (s.arm, level_of(s.phase))
        rss, gpu = out.get(key, (None, None))
        if s.rss_bytes is not None:
            rss = max(rss or 0, s.rss_bytes)
        if s.gpu_memory_bytes is not None:
            gpu = max(gpu or 0, s.gpu_memory_bytes)
        out[key] = (rss, gpu)
    return out


def _with_extras(
    c: LoadCell,
    itl: dict[tuple[str, str, str], dict[str, Any]],
    mem: dict[tuple[str, str], tuple[Any, Any]],
) -> LoadCell:
    extra = itl.get((c.arm, c.phase, c.task_group), {})
    rss, gpu = mem.get((c.arm, c.phase), (None, None))
    return replace(c, **extra, peak_rss_bytes=rss, peak_gpu_bytes=gpu)
