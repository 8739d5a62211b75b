"""The descriptive intervals of a paired comparison (``analysis.comparison.paired``): a paired percentile
bootstrap of ratios of sums over the cell's episodes (E2E alone, E2E seconds, TTFT, on-time
difference); the verdict's own interval is ``paired``'s t interval, not these.
"""

from __future__ import annotations

import numpy as np

from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.base.stats import Interval

CHUNK_ELEMENTS = 4_000_000  # resample indices held at once
BUCKETS = 1024  # above this many pairs, resample random buckets of pairs (see ``bootstrap``)


def cluster_sums(labels: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per label present in ``labels`` (a pair's episode): the sum of ``values`` (rows: pairs;
    1-D or 2-D)."""
    _, inv = np.unique(labels, return_inverse=True)
    g = int(inv.max()) + 1 if inv.size else 0
    if values.ndim == 1:
        return np.bincount(inv, weights=values, minlength=g)
    return np.stack(
        [np.bincount(inv, weights=values[:, j], minlength=g) for j in range(values.shape[1])],
        axis=1,
    )


def stat_columns(t: RequestTable, b: np.ndarray, c: np.ndarray) -> np.ndarray:
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
            np.ones(b.size),
        ],
        axis=1,
    )


NSTATS = 5


def column_stats(sums: np.ndarray) -> np.ndarray:
    """(..., 9) column sums -> (..., 5): rel task, rel E2E, diff E2E, rel TTFT, on-time diff."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.stack(
            [
                sums[..., 0] / sums[..., 1] - 1.0,
                sums[..., 2] / sums[..., 3] - 1.0,
                (sums[..., 2] - sums[..., 3]) / sums[..., 4],
                sums[..., 5] / sums[..., 6] - 1.0,
                sums[..., 7] / np.maximum(sums[..., 8], 1.0),
            ],
            axis=-1,
        )


def bootstrap(
    x: np.ndarray,
    resamples: int,
    rng: np.random.Generator,
    clusters: np.ndarray | None = None,
) -> np.ndarray:
    """(resamples, NSTATS) statistics of resamples of ``x`` (n pairs, 9 columns): of its
    clusters' sums when ``clusters`` labels the pairs, else of the pairs.

    Above ``BUCKETS`` units they are first summed into ``BUCKETS`` random buckets and the
    buckets are resampled: the statistics are ratios of sums, so a resample of buckets has the
    variance of a resample of units, at a fraction of the cost (1M pairs, 1000 resamples).
    """
    if clusters is not None:
        x = cluster_sums(clusters, x)
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
        out.append(column_stats(sums))
    return np.concatenate(out)


def percentile_interval(est: float, boot: np.ndarray, level: float) -> Interval:
    boot = boot[np.isfinite(boot)]
    if not np.isfinite(est) or boot.size == 0:
        return Interval(None, None, None)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(est), float(lo), float(hi))
