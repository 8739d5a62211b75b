"""Two arms' requests paired, and each cell measured on its pairs (``analysis.comparison.paired``
judges the cells).

Requests pair on (repetition, phase, request_id) with the same prompt (``pair_rows``), and each
pair carries its episode (``episode_labels``). A cell (phase x group, and each phase pooled over
its groups) gets its descriptive intervals (``analysis.comparison.resample``) and its test: what
the pairs alone say (``pairs_test``: their mean log ratio, its spread, the on-time test of whole
episodes), with the task-time test then replaced by the estimate by processes and episodes
(``celltest.episode_test``).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from specpilot.analysis.base import stats
from specpilot.analysis.base.columns import ALL
from specpilot.analysis.base.fold import episode_key
from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.base.stats import Interval
from specpilot.analysis.comparison.resample import (
    NSTATS,
    bootstrap,
    cluster_sums,
    column_stats,
    percentile_interval,
    stat_columns,
)
from specpilot.analysis.episodes.celltest import CellTest, episode_test, task_log_ratios
from specpilot.errors import ConfigError

SIGN_FLIP_MAX = 5000  # above this many episodes the normal limit (the CLT holds there)


class MeasuredCell(NamedTuple):
    """One cell measured: its pairs, the bootstrap's descriptive intervals and its test."""

    phase: str
    group: str
    pairs: int
    unmatched: int
    intervals: list[Interval]
    test: CellTest


def measured_cells(
    t: RequestTable,
    arms: tuple[str, str],
    facts: tuple[Mapping[str, float], Mapping[str, str]],
    *,
    seed: int,
    resamples: int,
    level: float,
    pool: bool,
) -> list[MeasuredCell]:
    """Every cell of the pair of arms, steady pairs only: per (phase, group), then per phase
    pooled over groups; each with its descriptive intervals (``resamples`` of the bootstrap
    from ``seed``, at ``level``) and its test by episodes (``pool``: the estimator's
    sometimes-pool); ``facts``: each run's log fingerprint and the run whose process it
    reached."""
    baseline, candidate = arms
    steady = ~t.cold_start
    b, c, _ = pair_rows(t, baseline, candidate)
    keep = steady[b] & steady[c]
    b, c = b[keep], c[keep]
    labels = episode_labels(t, b, f"{candidate} against {baseline}")
    ph_c, ph_l = t.codes("phase")
    g_c, g_l = t.codes("task_group")
    arm_c, arm_l = t.codes("arm")
    in_arms = np.isin(arm_c, [arm_l.index(a) for a in arms if a in arm_l]) & steady
    keys = sorted({(int(p), int(g)) for p, g in zip(ph_c[b], g_c[b], strict=True)})
    keys += sorted({(p, -1) for p, _ in keys})
    out = []
    for pc, gc in keys:
        phase, group = ph_l[pc], (g_l[gc] if gc >= 0 else ALL)
        m = (ph_c[b] == pc) & ((g_c[b] == gc) if gc >= 0 else True)
        bb, cc, lab = b[m], c[m], labels[m]
        in_cell = in_arms & (ph_c == pc) & ((g_c == gc) if gc >= 0 else True)
        x = stat_columns(t, bb, cc)
        key = f"{baseline}|{candidate}|{phase}|{group}".encode()
        rng = np.random.default_rng([seed, zlib.crc32(key)])
        est = column_stats(x.sum(axis=0))
        boot = bootstrap(x, resamples, rng, lab) if bb.size else np.zeros((0, NSTATS))
        iv = [percentile_interval(float(est[j]), boot[:, j], level) for j in range(NSTATS)]
        strata = g_c[bb] if gc < 0 else None  # a pooled cell: each pair's own task group
        tst = pairs_test(t, bb, cc, lab, rng, strata)
        tst = episode_test(t, bb, cc, lab, tst, facts, level, strata, pool)
        unmatched = int(np.count_nonzero(in_cell)) - 2 * int(bb.size)
        out.append(MeasuredCell(phase, group, int(bb.size), unmatched, iv, tst))
    return out


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


def episode_labels(t: RequestTable, rows: np.ndarray, what: str = "the arms") -> np.ndarray:
    """Each pair's episode (``analysis.base.fold.episode_key`` of its request id, by repetition) as
    a label; pairs without one (a pilot file of the retired sequential or interleaved designs,
    or load runs joined by hand) are refused: their unit, the busy period, is gone."""
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    keys = [episode_key(str(x)) for x in t.request_id[rows]]
    if not all(keys):
        raise ConfigError(
            f"{what}: {keys.count('')} of {len(keys)} pairs carry no episode (request ids "
            "'level~NN-...'): the file was measured by the sequential or interleaved design, "
            "retired with its busy-period estimator",
            fix="run the pilot again (every pilot file now runs the episode design), or report "
            "the old file with specpilot at commit f041a2c or earlier",
        )
    codes = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)[1]
    return np.asarray(t.repetition[rows] * (int(codes.max()) + 1) + codes, dtype=np.int64)


def pairs_test(
    t: RequestTable,
    b: np.ndarray,
    c: np.ndarray,
    labels: np.ndarray,
    rng: np.random.Generator,
    strata: np.ndarray | None = None,
) -> CellTest:
    """What the pairs alone say of a cell, before the episode estimate replaces its task-time
    test (``celltest.episode_test``): the both-ok pairs, their mean log ratio (no interval: the
    pairs are not independent), their spread, the episodes they fell in, and the on-time test
    of whole episodes; ``labels``: each pair's episode; ``strata``: each pair's task group in a
    pooled cell (``stats.stratify``)."""
    ok, raw = task_log_ratios(t, b, c)
    d, lost = stats.stratify(raw, None if strata is None else strata[ok])
    n = int(d.size)
    g = int(np.unique(labels[ok]).size)
    p_on, min_p_on, on_slower = _on_time_test(t, b, c, labels, rng)
    mean = float(d.mean()) if n else None
    sd = float(d.std(ddof=1)) * float(np.sqrt((n - 1) / max(n - 1 - lost, 1))) if n > 1 else None
    if sd and mean is not None and g >= 2:  # pairs of one episode move together: its effect
        groups = np.unique(labels[ok], return_inverse=True)[1]
        resid = np.bincount(groups, weights=d - mean, minlength=g)
        var_w = g / (g - 1) * float(np.sum(resid**2)) / (n * n)  # CR1 over episodes
        sd *= float(np.sqrt(max(1.0, var_w / (sd * sd / n))))
    return CellTest(n, mean, None, None, None, 1.0, 1.0, p_on, min_p_on, on_slower, sd, g)


def _on_time_test(
    t: RequestTable, b: np.ndarray, c: np.ndarray, labels: np.ndarray, rng: np.random.Generator
) -> tuple[float, float, bool]:
    """On time, over every pair: the exact McNemar test, of whole episodes (the sign test of
    each episode's net count of pairs on time in one arm only): requests of one episode share
    its moment and are late together. (p, the smallest p this many episodes can give, whether
    the candidate is on time less often.)"""
    on_b, on_c = t.on_time[b], t.on_time[c]
    only_b, only_c = int(np.count_nonzero(on_b & ~on_c)), int(np.count_nonzero(on_c & ~on_b))
    net = cluster_sums(labels, on_c.astype(float) - on_b.astype(float))
    net = net[net != 0]
    if net.size <= SIGN_FLIP_MAX:
        return stats.sign_flip_p(net, rng), stats.sign_flip_min_p(int(net.size)), only_b > only_c
    # its normal limit (the exact one would draw 20,000 x net.size signs)
    p = stats.t_p(float(net.sum()), float(np.sqrt(np.sum(net**2))), np.inf)
    return p, 0.0, only_b > only_c
