"""Paired comparisons of two arms on the same schedule, with bootstrap confidence intervals.

Requests pair on (repetition, phase, request_id): the same schedule slot, hence the same
prompt, in both arms (a prompt_id that differs is counted as unmatched, never paired). Every
matched pair stays in the resampling; the statistics per resample are:

- relative task-time change = sum(candidate task time) / sum(baseline task time) - 1 over pairs
  where both ended ok, task time = the client stages (retrieval, tools) + E2E: what the user
  waits for (a ratio of means: negative is faster);
- relative E2E change (server request only), mean E2E difference (seconds) and relative TTFT
  change, likewise;
- on-time rate difference = candidate's - baseline's over *all* pairs (failures included).

Method: paired percentile bootstrap, pairs resampled with replacement ``resamples`` times
from ``numpy.random.default_rng([seed, crc32(cell)])`` (reproducible per cell whatever the
order); the interval is the ((1 - level) / 2, (1 + level) / 2) quantiles. Cells of more than
1,024 pairs resample 1,024 random buckets of pairs (sums per bucket): the statistics are ratios
of sums, so the resampled variance is that of resampled pairs, at a fraction of the cost. Outcome: "slower"
when the task-time interval lies above zero or the on-time interval below zero (net slower: the
CI excludes zero on the slow side); "faster" when the task-time interval lies below -min_gain
and the on-time rate is not significantly lower; otherwise "no_difference".
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specpilot.analysis.columns import ALL
from specpilot.analysis.requests import RequestTable

CHUNK_ELEMENTS = 4_000_000  # resample indices held at once
BUCKETS = 1024  # above this many pairs, resample random buckets of pairs (see ``bootstrap``)


@dataclass(frozen=True)
class Interval:
    estimate: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class PairedComparison:
    baseline_arm: str
    candidate_arm: str
    phase: str
    task_group: str
    offered_rate: float | None
    pairs: int
    unmatched: int
    both_ok: int
    task_rel_change: Interval  # client stages + E2E: the verdict's measure
    e2e_rel_change: Interval
    e2e_diff_s: Interval
    ttft_rel_change: Interval
    on_time_diff: Interval
    outcome: str  # faster | slower | no_difference | insufficient
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pair_rows(t: RequestTable, base: str, cand: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Row indices (baseline, candidate) of matched pairs, and the unmatched count."""
    arm_c, arm_l = t.codes("arm")
    if base not in arm_l or cand not in arm_l:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 0
    ph_c, ph_l = t.codes("phase")
    rid_c, rid_l = t.codes("request_id")
    key = (t.repetition * len(ph_l) + ph_c) * len(rid_l) + rid_c
    bi = np.flatnonzero(arm_c == arm_l.index(base))
    ci = np.flatnonzero(arm_c == arm_l.index(cand))
    _, ib, ic = np.intersect1d(key[bi], key[ci], return_indices=True)
    b, c = bi[ib], ci[ic]
    pb, pc = t.prompt_id[b], t.prompt_id[c]
    same = (pb == "") | (pc == "") | (pb == pc)  # a different prompt is not a pair
    b, c = b[same], c[same]
    return b, c, int(bi.size + ci.size - 2 * b.size)


def _stat_columns(t: RequestTable, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Per pair: the sums the statistics are ratios of (failed E2E/TTFT zeroed by masks)."""
    ok = np.isfinite(t.e2e[b]) & np.isfinite(t.e2e[c])
    tt = np.isfinite(t.ttft[b]) & np.isfinite(t.ttft[c])
    z = np.zeros(b.size)
    stages = sum(t.client_stages.values(), np.zeros(len(t)))
    return np.stack(
        [
            np.where(ok, t.e2e[c] + stages[c], z),
            np.where(ok, t.e2e[b] + stages[b], z),
            np.where(ok, t.e2e[c], z),
            np.where(ok, t.e2e[b], z),
            ok.astype(float),
            np.where(tt, t.ttft[c], z),
            np.where(tt, t.ttft[b], z),
            t.on_time[c].astype(float) - t.on_time[b].astype(float),
        ],
        axis=1,
    )


NSTATS = 5


def _stats(sums: np.ndarray, n: int) -> np.ndarray:
    """(..., 8) column sums -> (..., 5): rel task, rel E2E, diff E2E, rel TTFT, on-time diff."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.stack(
            [
                sums[..., 0] / sums[..., 1] - 1.0,
                sums[..., 2] / sums[..., 3] - 1.0,
                (sums[..., 2] - sums[..., 3]) / sums[..., 4],
                sums[..., 5] / sums[..., 6] - 1.0,
                sums[..., 7] / max(n, 1),
            ],
            axis=-1,
        )


def bootstrap(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, NSTATS) statistics of pair resamples of ``x`` (n, 8).

    Above ``BUCKETS`` pairs the pairs are first summed into ``BUCKETS`` random buckets and the
    buckets are resampled: the statistics are ratios of sums, so a resample of buckets has the
    variance of a resample of pairs, at a fraction of the cost (1M pairs, 1000 resamples).
    """
    n = x.shape[0]
    units = x
    if n > BUCKETS:
        bucket = rng.permutation(n) % BUCKETS
        units = np.stack(
            [np.bincount(bucket, weights=x[:, j], minlength=BUCKETS) for j in range(x.shape[1])],
            axis=1,
        )
    m = units.shape[0]
    per = max(1, CHUNK_ELEMENTS // max(m, 1))
    out = []
    for start in range(0, resamples, per):
        r = min(per, resamples - start)
        idx = rng.integers(0, m, size=(r, m))
        # resample counts per unit, then one matrix product gives every resample's sums
        counts = np.bincount((idx + (np.arange(r) * m)[:, None]).ravel(), minlength=r * m)
        sums = counts.reshape(r, m).astype(np.float64) @ units
        out.append(_stats(sums, n))
    return np.concatenate(out)


def _interval(est: float, boot: np.ndarray, level: float) -> Interval:
    boot = boot[np.isfinite(boot)]
    if not np.isfinite(est) or boot.size == 0:
        return Interval(None, None, None)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(est), float(lo), float(hi))


def method_text(resamples: int, seed: int, level: float) -> str:
    """How the intervals were computed, printed with every comparison table."""
    return (
        f"paired percentile bootstrap over schedule-matched requests, {resamples} resamples, "
        f"seed {seed}, {level:.0%} interval (cells over {BUCKETS:,} pairs: {BUCKETS:,} random "
        "buckets of pairs resampled)"
    )


def compare_arms(
    t: RequestTable,
    baseline: str,
    candidate: str,
    *,
    resamples: int,
    seed: int,
    level: float,
    min_gain: float = 0.0,
    offered_rates: dict[tuple[str, str], float] | None = None,
) -> list[PairedComparison]:
    """Per (phase, group) and (phase, ``*``): the candidate against the baseline, paired."""
    steady = ~t.cold_start
    b, c, _ = pair_rows(t, baseline, candidate)
    keep = steady[b] & steady[c]
    b, c = b[keep], c[keep]
    method = method_text(resamples, seed, level)
    out = []
    ph_c, ph_l = t.codes("phase")
    g_c, g_l = t.codes("task_group")
    arm_c, arm_l = t.codes("arm")
    in_arms = np.isin(arm_c, [arm_l.index(a) for a in (baseline, candidate) if a in arm_l]) & steady
    cells = sorted({(int(p), int(g)) for p, g in zip(ph_c[b], g_c[b], strict=True)})
    cells += sorted({(p, -1) for p, _ in cells})
    for pc, gc in cells:
        phase, group = ph_l[pc], (g_l[gc] if gc >= 0 else ALL)
        m = (ph_c[b] == pc) & ((g_c[b] == gc) if gc >= 0 else True)
        bb, cc = b[m], c[m]
        rows = in_arms & (ph_c == pc) & ((g_c == gc) if gc >= 0 else True)
        unmatched = int(np.count_nonzero(rows)) - 2 * int(bb.size)
        x = _stat_columns(t, bb, cc)
        key = f"{baseline}|{candidate}|{phase}|{group}".encode()
        rng = np.random.default_rng([seed, zlib.crc32(key)])
        est = _stats(x.sum(axis=0), bb.size)
        boot = bootstrap(x, resamples, rng) if bb.size else np.zeros((0, NSTATS))
        iv = [_interval(float(est[j]), boot[:, j], level) for j in range(NSTATS)]
        both_ok = int(x[:, 4].sum())
        out.append(
            PairedComparison(
                baseline_arm=baseline,
                candidate_arm=candidate,
                phase=phase,
                task_group=group,
                offered_rate=(offered_rates or {}).get((candidate, phase)),
                pairs=int(bb.size),
                unmatched=unmatched,
                both_ok=both_ok,
                task_rel_change=iv[0],
                e2e_rel_change=iv[1],
                e2e_diff_s=iv[2],
                ttft_rel_change=iv[3],
                on_time_diff=iv[4],
                outcome=_outcome(iv[0], iv[4], both_ok, min_gain),
                method=method,
            )
        )
    return out


def _outcome(task: Interval, on_time: Interval, both_ok: int, min_gain: float) -> str:
    if both_ok < 2 or task.low is None or task.high is None:
        return "insufficient"
    if task.low > 0 or (on_time.high is not None and on_time.high < 0):
        return "slower"
    if task.high < -min_gain:
        return "faster"
    return "no_difference"


def comparisons_for(
    t: RequestTable, pairs: Sequence[tuple[str, str]], **kw: Any
) -> list[PairedComparison]:
    """``compare_arms`` for each (baseline, candidate)."""
    return [c for base, cand in pairs for c in compare_arms(t, base, cand, **kw)]
