"""A contrast inside each engine process: both arms of every episode served by the same process,
the candidate with speculation on, the other with it switched off at run time (the builtin
server's admin switch; ``episodes.in_place``, or the ``within`` second estimate).

The process's own offset cancels in every episode's pairs, so what is left is how a process's
*response to the switch* varies between processes (a process placed so that its draft runs
slowly gains less), and the episode's noise. **Model**: y_e = mu + u_p(e) + xi_e, u ~ N(0, s_u^2)
per process (one draw for its life), xi the episode's noise; mu is the process-balanced mean
(each process's mean weighted 1/m: a budget that dropped episodes leaves them unbalanced).
**Components** by one-way analysis of variance: MS_A between the processes' means (m - 1 df),
MSE within them (E - m df); Var(mu) = s_u^2 / m + MSE * sum(1 / n_p) / m^2 with
s_u^2 = (MS_A - MSE) / n0, Satterthwaite's df over the two mean squares (balanced: MS_A / E on
m - 1 df, exactly). **Sometimes-pool** as in ``analysis.episodes.estimate``: an MS_A whose F against MSE
is below its 0.75 quantile joins the episode noise (E - 1 df), and not at the interim looks
(``pool=False``: two episodes per process leave the preliminary test blind). Treating every
episode as independent, as if s_u were 0 for certain, is the error this module replaces: with
a process interaction the interval would be too narrow.

    >>> y = [0.10, 0.12, 0.08, 0.15, 0.11, 0.09, 0.14, 0.10]
    >>> est = switch_effect(y, list(range(8)), [0, 1, 2, 3, 0, 1, 2, 3])
    >>> round(est.estimate, 4), est.df, est.m_cand, est.in_place
    (0.1113, 7.0, 4, True)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from specpilot.analysis.base import stats
from specpilot.analysis.episodes.components import POOL_ALPHA
from specpilot.analysis.episodes.estimate import EpisodeEstimate, pool_estimate
from specpilot.errors import ConfigError
from specpilot.records import DRILL_PHASE, PilotData


def switch_effect(
    d: Sequence[float] | np.ndarray,
    episode: Sequence[int] | np.ndarray,
    proc: Sequence[int] | np.ndarray,
    *,
    level: float = 0.95,
    strata_df: int = 0,
    pool: bool = True,
) -> EpisodeEstimate:
    """mu, the switch's mean log task-time change, from per-pair ``d``, each pair's
    ``episode`` and the process that served both arms of it (module docstring);
    ``strata_df``: degrees of freedom already spent on ``d`` (``stats.stratify``)."""
    dd = np.asarray(d, dtype=np.float64)
    ok = np.isfinite(dd)
    _, e = np.unique(np.asarray(episode)[ok], return_inverse=True)
    n_e = np.bincount(e)
    y = np.bincount(e, weights=dd[ok]) / n_e  # (E,) episode means
    _, pi = np.unique(np.asarray(proc)[ok], return_inverse=True)
    p = np.zeros(n_e.size, dtype=np.int64)
    p[e] = pi
    if np.any(p[e] != pi):
        raise ConfigError("an episode was served by more than one process")
    m, n_ep = int(pi.max()) + 1 if pi.size else 0, int(n_e.size)
    n_p = np.bincount(p, minlength=m).astype(np.float64)
    dfe = float(n_ep - m - strata_df)
    if m < 2 or dfe < 1:
        raise ConfigError(
            f"{n_ep} episodes on {m} process(es) leave no estimate of how processes differ "
            "in their response to the switch",
            fix="serve the arms with at least 2 processes and replay more episodes per level",
        )
    means = np.bincount(p, weights=y, minlength=m) / n_p
    mu = float(means.mean())
    ms_a = float(n_p @ (means - float(y.mean())) ** 2) / (m - 1)
    mse = float(np.sum((y - means[p]) ** 2)) / dfe
    pooled = pool and ms_a < mse * stats.f_quantile(1.0 - POOL_ALPHA, m - 1.0, dfe)
    var, df, s_u, s_xi = _variance(ms_a, mse, n_p, dfe, pooled)
    se = math.sqrt(max(var, 0.0))
    lo, hi = stats.t_interval(mu, se, df, level)
    p_model = stats.t_p(mu, se, df)
    n_pairs = int(ok.sum())
    how = "pooled with the episode noise" if pooled else f"sd {s_u:.1%}, kept"
    text = (
        f"{math.expm1(mu):+.1%} [{math.expm1(lo):+.1%}, {math.expm1(hi):+.1%}] at {level:.0%} "
        f"(t, {df:.1f} df; both arms on the same process in every episode, {m} processes, their "
        f"offsets cancelled; how they respond to the switch: {how}; {n_ep} episodes, "
        f"{n_pairs} pairs; p {p_model:.3f}; episode sd {s_xi:.1%})"
    )
    return pool_estimate(
        (mu, se, df, level), (s_u, 0.0, s_xi), (n_pairs, n_ep, m), text, in_place=True
    )


def _variance(
    ms_a: float, mse: float, n_p: np.ndarray, dfe: float, pooled: bool
) -> tuple[float, float, float, float]:
    """Var(mu), its df, s_u and s_xi from the two mean squares (module docstring): pooled,
    truncated (no process term) or kept (Satterthwaite)."""
    m, n_ep = int(n_p.size), float(n_p.sum())
    h = float(np.sum(1.0 / n_p)) / m**2  # Var(mu) per unit of episode variance
    if pooled:
        df = dfe + m - 1
        s2 = (ms_a * (m - 1) + mse * dfe) / df
        return s2 * h, df, 0.0, math.sqrt(s2)
    n0 = (n_ep - float(n_p @ n_p) / n_ep) / (m - 1)
    a = 1.0 / (n0 * m)  # on MS_A; the rest of MSE's weight
    b = max(h - a, 0.0)
    s_u2 = (ms_a - mse) / n0
    if s_u2 <= 0:  # truncated: no process term
        return mse * h, dfe, 0.0, math.sqrt(mse)
    var = a * ms_a + b * mse
    den = (a * ms_a) ** 2 / (m - 1) + (b * mse) ** 2 / dfe
    return var, var * var / den if den > 0 else math.inf, math.sqrt(s_u2), math.sqrt(mse)


def switch_held(data: PilotData) -> list[str]:
    """In place (``episodes.in_place``): a note per arm some of whose measured requests the
    server says it served with the other strategy (``served_k``: the baseline or the planted
    arm with k > 0, the speculative arm with k = 0). The runner fails every run of a process
    whose switch did not answer; this is the check on what the server did."""
    spec = ((data.pilot.schedule or {}).get("design") or {}).get("in_place")
    if not spec:
        return []
    cols = data.request_columns
    rows: Iterable[tuple[Any, Any, Any, Any]] = (
        zip(cols["arm"], cols["served_k"], cols["warmup"], cols["phase"], strict=True)
        if cols is not None
        else ((r.arm, r.served_k, r.warmup, r.phase) for r in data.requests)
    )
    wrong: dict[str, int] = {}
    for arm, k, warm, phase in rows:  # the drill switches speculation off on purpose
        if warm or phase == DRILL_PHASE or k is None or not math.isfinite(float(k)):
            continue
        if (float(k) == 0) == (arm == spec):
            wrong[str(arm)] = wrong.get(str(arm), 0) + 1
    return [
        f"{n} measured {arm} requests were served with speculation "
        f"{'off' if arm == spec else 'on'}: the in-place switch did not hold for them, and "
        "their pairs are not the comparison the design made (see the runs' failures)"
        for arm, n in sorted(wrong.items())
    ]


__all__ = ["switch_effect", "switch_held"]
