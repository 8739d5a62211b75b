"""The variance components of the episode design, by moments: the crossed layout of
candidate and baseline processes over episodes (``Design``: its projections, degrees of
freedom and process-balanced weights, which depend on the layout only), and the mean squares
of one set of episode means on it (``fit_moments``: Henderson III, the sometimes-pool rule,
Satterthwaite's df). ``analysis.episodes.estimate``'s docstring gives the model.

    >>> import numpy as np
    >>> c, b = np.repeat(np.arange(3), 3), np.tile(np.arange(3), 3)  # 3 x 3, one episode each
    >>> des = design(c, b, 3, 3)
    >>> des.df.tolist()  # process a, process b, episode noise
    [2.0, 2.0, 4.0]
    >>> y = np.array([0.10, 0.30, 0.20, 0.00, 0.20, 0.10, 0.20, 0.30, 0.10])
    >>> round(float(des.w @ y), 4), round(fit_moments(des, y, np.zeros(2), np.zeros(2)).dof, 2)
    (0.1667, 2.77)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from specpilot.analysis.base import stats
from specpilot.errors import ConfigError

POOL_ALPHA = 0.25  # a process component whose F test has p above this joins the episode noise


@dataclass(frozen=True)
class Design:
    """What depends on the layout only (not on y): projections and their expectations."""

    c: np.ndarray  # (E,) candidate process index
    b: np.ndarray  # (E,) baseline process index
    m_c: int
    m_b: int
    proj: np.ndarray  # (3, E, E): residual, R(a | mu, b), R(b | mu, a) quadratic forms
    df: np.ndarray  # (3,) their degrees of freedom: a, b, residual
    q: np.ndarray  # (2,) df / tr(form Z Z'): s_a^2 = q_a (MS_A - MSE)
    coef: np.ndarray  # (1 + m_c + m_b, E): least-squares coefficients of the additive fit
    w: np.ndarray  # (E,) process-balanced episode weights
    pot: np.ndarray  # (m_c + m_b, E): process potentials of y_e = pot_c - pot_b
    pool: bool = True  # the sometimes-pool rule applies (``episode_effect``'s ``pool``)


def design(c: np.ndarray, b: np.ndarray, m_c: int, m_b: int) -> Design:
    """The layout (``c``, ``b``: each episode's candidate and baseline process) worked out once;
    refused where an arm has one process, the episodes do not connect the processes, or no
    episode-noise df is left."""
    n_ep = c.size
    if m_c < 2 or m_b < 2:
        raise ConfigError(
            f"{m_c} candidate and {m_b} baseline processes: with one process an arm's process "
            "offset cannot be told from the effect",
            fix="serve each arm with at least 2 processes (episodes.processes)",
        )
    zc = (c[:, None] == np.arange(m_c)).astype(np.float64)  # (E, m_c)
    zb = (b[:, None] == np.arange(m_b)).astype(np.float64)  # (E, m_b)
    one = np.ones((n_ep, 1))
    full = np.hstack([one, zc, zb])
    pinv = np.linalg.pinv(full)
    p_full = full @ pinv
    p_b = (x := np.hstack([one, zb])) @ np.linalg.pinv(x)
    p_c = (x := np.hstack([one, zc])) @ np.linalg.pinv(x)
    rank = [round(float(np.trace(p))) for p in (p_full, p_b, p_c)]
    if rank[0] < m_c + m_b - 1:
        raise ConfigError(
            "the episodes do not connect every candidate process with every baseline process",
            fix="assign processes as the pilot does (pilot.design.crossed: every candidate "
            "process meets every baseline process)",
        )
    if rank[0] >= n_ep:
        raise ConfigError(
            f"{n_ep} episodes for {m_c} + {m_b} processes leave no episode-noise df",
            fix=f"replay at least {m_c + m_b} episodes per level",
        )
    forms = np.stack([np.eye(n_ep) - p_full, p_full - p_b, p_full - p_c])
    df = np.array([rank[0] - rank[1], rank[0] - rank[2], n_ep - rank[0]], dtype=np.float64)
    k = np.array([np.sum(forms[1] * (zc @ zc.T)), np.sum(forms[2] * (zb @ zb.T))])
    cons = np.vstack([zc.T, zb.T])  # process-balanced weights: least norm meeting the shares
    w = np.linalg.pinv(cons) @ np.r_[np.full(m_c, 1.0 / m_c), np.full(m_b, 1.0 / m_b)]
    pot = np.linalg.pinv(np.hstack([zc, -zb]))  # incidence: +1 at c(e), -1 at b(e)
    return Design(c, b, m_c, m_b, forms, df, df[:2] / k, pinv, w, pot)


@dataclass(frozen=True)
class Fit:
    """One set of episode means fitted on a ``Design``."""

    ms: np.ndarray  # (3,) MS_A, MS_B, MSE
    df: np.ndarray  # (3,)
    comp: np.ndarray  # (3,) s_a^2, s_b^2, s_xi^2 (truncated at 0)
    var: float  # of the estimate
    dof: float  # Satterthwaite


def _pooled(ms: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sometimes-pool rule (``analysis.episodes.estimate``'s docstring): each process mean
    square whose F against the episode noise's is below its ``1 - POOL_ALPHA`` quantile joins
    the episode noise. Returns the mean squares with the pooled ones replaced by the pooled
    noise's, and the degrees of freedom with the pooled ones moved to the noise."""
    pool = [
        bool(df[k] > 0 and df[2] > 0 and ms[k] < ms[2] * f_crit(float(df[k]), float(df[2])))
        for k in (0, 1)
    ]
    if not any(pool):
        return ms, df
    dfe = df[2] + sum(df[k] for k in (0, 1) if pool[k])
    mse = (ms[2] * df[2] + sum(ms[k] * df[k] for k in (0, 1) if pool[k])) / dfe
    out_ms = np.array([mse if pool[0] else ms[0], mse if pool[1] else ms[1], mse])
    return out_ms, np.array([0.0 if pool[0] else df[0], 0.0 if pool[1] else df[1], dfe])


@functools.lru_cache(maxsize=256)
def f_crit(d1: float, d2: float) -> float:
    """The sometimes-pool test's critical F (``POOL_ALPHA``), cached: the planner asks for it
    once per simulated design."""
    return stats.f_quantile(1.0 - POOL_ALPHA, d1, d2)


def fit_moments(des: Design, y: np.ndarray, lost: np.ndarray, extra: np.ndarray) -> Fit:
    """Mean squares, components and the estimate's variance. ``lost``: (2,) degrees of freedom
    a covariate took from the process strata; ``extra``: (2,) coefficients on (MS_A, MS_B) the
    covariate's own error adds."""
    ss = np.einsum("e,kef,f->k", y, des.proj, y)  # residual, R(a | b), R(b | a)
    df = np.array([des.df[0] - lost[0], des.df[1] - lost[1], des.df[2]])
    ms = np.array([ss[1], ss[2], ss[0]]) / np.maximum(df, 1e-12)
    if des.pool:
        ms, df = _pooled(ms, df)
    comp = np.array([des.q[0] * (ms[0] - ms[2]), des.q[1] * (ms[1] - ms[2]), ms[2]])
    wa = np.bincount(des.c, weights=des.w, minlength=des.m_c)  # each process's share of w
    wb = np.bincount(des.b, weights=des.w, minlength=des.m_b)
    cw = np.array([wa @ wa, wb @ wb, des.w @ des.w])
    la = cw[0] * des.q[0] if comp[0] > 0 else 0.0  # a truncated component drops its terms
    lb = cw[1] * des.q[1] if comp[1] > 0 else 0.0
    parts = np.array([la + extra[0], lb + extra[1], cw[2] - la - lb]) * ms
    var = float(parts.sum())
    parts = np.array([parts[0] * (df[0] > 0), parts[1] * (df[1] > 0), parts @ (df <= 0) + parts[2]])
    den = float(np.sum(np.where(df > 0, parts**2 / np.maximum(df, 1e-12), 0.0)))
    return Fit(ms, df, np.maximum(comp, 0.0), var, var * var / den if den > 0 else math.inf)
