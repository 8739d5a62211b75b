"""A contrast inside one pool of engine processes: both arms served by the same processes.

The planted arm reaches the baseline's own processes through its dilating proxy, so in episode
e it runs on baseline process c(e) while the baseline runs on b(e) (the crossed assignment moves
it to another of them). ``analysis.episodes.estimate`` would take the two arms' process offsets for two
independent draws and charge the contrast s_a^2/m + s_b^2/m it never pays: a process's offset is
one number, in whichever role it serves. **Model**: y_e = mu + p_c(e) - p_b(e) + xi_e, the
offsets p fixed (the pool's own, not a sample of anything), fitted by least squares with mu.
The crossed design puts every process in both roles equally often, so mu is the episodes' plain
mean and the offsets only take their m - 1 degrees of freedom from the episode noise: the
interval is the episode noise's alone, on E - m df (less the task groups' strata in a pooled
cell). Where both arms ran on the same process the row has no process term (an arm switched
off in place is this with every row so). Inference is conditional on the pool: it says what
this pilot can detect through these processes, which is what the planted arm is for.

    >>> y = [0.15, 0.12, 0.18, 0.16, 0.11, 0.17]  # episodes: (planted proc, baseline proc)
    >>> c, b = [1, 2, 0, 2, 0, 1], [0, 1, 2, 0, 1, 2]
    >>> est = pool_effect(y, list(range(6)), c, b)
    >>> round(est.estimate, 4), est.df, est.m_cand
    (0.1483, 3.0, 3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from specpilot.analysis.base import stats
from specpilot.analysis.episodes.estimate import EpisodeEstimate, pool_estimate
from specpilot.errors import ConfigError


def pool_effect(
    d: Sequence[float] | np.ndarray,
    episode: Sequence[int] | np.ndarray,
    cand_proc: Sequence[int] | np.ndarray,
    base_proc: Sequence[int] | np.ndarray,
    *,
    level: float = 0.95,
    strata_df: int = 0,
) -> EpisodeEstimate:
    """mu, the candidate's mean log task-time change, from per-pair ``d``, each pair's
    ``episode`` and the process that served each arm (ids of one pool: the same id is the
    same process in both arms); ``strata_df``: degrees of freedom already spent on ``d``
    (``stats.stratify``)."""
    dd = np.asarray(d, dtype=np.float64)
    ok = np.isfinite(dd)
    _, e = np.unique(np.asarray(episode)[ok], return_inverse=True)
    n = np.bincount(e)
    y = np.bincount(e, weights=dd[ok]) / n
    procs, idx = np.unique(
        np.r_[np.asarray(cand_proc)[ok], np.asarray(base_proc)[ok]], return_inverse=True
    )
    ci, bi = idx[: int(ok.sum())], idx[int(ok.sum()) :]
    m, n_ep = int(procs.size), int(n.size)
    c, b = np.zeros(n_ep, dtype=np.int64), np.zeros(n_ep, dtype=np.int64)
    c[e], b[e] = ci, bi
    if np.any(c[e] != ci) or np.any(b[e] != bi):
        raise ConfigError("an episode was served by more than one process of an arm")
    x, rank_c = _design(c, b, m)
    df = float(n_ep - rank_c - 1 - strata_df)
    if df < 1:
        raise ConfigError(
            f"{n_ep} episodes for a pool of {m} processes leave no episode-noise df",
            fix="replay more episodes per level",
        )
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    s2 = float(resid @ resid) / df
    var = s2 * float(np.linalg.pinv(x.T @ x)[0, 0])
    mu, se = float(beta[0]), math.sqrt(max(var, 0.0))
    lo, hi = stats.t_interval(mu, se, df, level)
    p = stats.t_p(mu, se, df)
    offsets = beta[1:] - beta[1:].mean() if m > 1 else np.zeros(1)
    s_p = float(np.std(offsets, ddof=1)) if m > 1 and rank_c else 0.0
    n_pairs = int(ok.sum())
    text = (
        f"{math.expm1(mu):+.1%} [{math.expm1(lo):+.1%}, {math.expm1(hi):+.1%}] at {level:.0%} "
        f"(t, {df:.0f} df; one pool of {m} processes serving both arms, their offsets fitted "
        f"(sd {s_p:.1%}) and cancelled; {n_ep} episodes, {n_pairs} pairs; p {p:.3f}; "
        f"episode sd {math.sqrt(s2):.1%})"
    )
    return pool_estimate((mu, se, df, level), (s_p, s_p, math.sqrt(s2)), (n_pairs, n_ep, m), text)


def _design(c: np.ndarray, b: np.ndarray, m: int) -> tuple[np.ndarray, int]:
    """The regression's design (an intercept, mu, and each episode's +1 / -1 on the processes
    that served its candidate and its baseline) and the rank of the process contrasts; refused
    where they tie every contrast to the arm contrast."""
    n_ep = c.size
    contrast = np.zeros((n_ep, m))
    rows = np.flatnonzero(c != b)
    contrast[rows, c[rows]], contrast[rows, b[rows]] = 1.0, -1.0
    x = np.column_stack([np.ones(n_ep), contrast])
    rank_c = int(np.linalg.matrix_rank(contrast)) if contrast.any() else 0
    if int(np.linalg.matrix_rank(x)) != rank_c + 1:
        raise ConfigError(
            "the episodes tie every process contrast to the arm contrast: mu is not estimable",
            fix="assign processes with pilot.design.crossed (each process in both roles)",
        )
    return x, rank_c


__all__ = ["pool_effect"]
