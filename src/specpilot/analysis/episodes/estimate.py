"""The episode design's comparison: engine processes and episodes, not requests, as the units.

On a 2-core shared VM two processes of one config differ 7-20% in speed for their whole life
(memory placement) and requests queued together move together. So each arm is served by a pool
of processes and a load level is replayed as E short episodes, each on every arm (same arrivals
and prompts: requests pair by schedule slot); in episode e the candidate is served by process
c(e), the baseline by b(e) (``pilot.design.crossed``), in a balanced arm order
(``pilot.design.arm_orders``): the design is the pilot's, this module its estimator.

**Model.** y_e, the mean d = log(candidate / baseline task time) of episode e's pairs, is
mu + a_c(e) - b_b(e) + xi_e: process effects a ~ N(0, s_a^2), b ~ N(0, s_b^2) (per arm) and
the episode's noise xi_e (its shock and its pairs'). mu is the process-balanced mean of y (the
least-norm episode weights giving each candidate process 1/m_cand and each baseline process
1/m_base of the weight; the plain mean when balanced): Var = s_a^2/m_cand + s_b^2/m_base +
s_xi^2 sum(w^2). **Components by moments** (Henderson III: the residual and the reductions
R(a | mu, b), R(b | mu, a) of the crossed, possibly unbalanced fit, with their exact
expectations, truncated at 0), not REML: closed-form and unbiased (microseconds, no iteration
to fail on the 1-5 df per component of m = 2..6); df by Satterthwaite over the mean squares
(``analysis.episodes.components``).

**Sometimes-pool** (Bancroft 1944; Bozivich, Bancroft & Hartley 1956): a process component
with 2 df estimated near 0 still brings its 2 df into Satterthwaite's sum and leaves the
interval 1-4 df wide. So a process mean square whose F against the episode noise is below its
``1 - POOL_ALPHA`` quantile (0.75: the preliminary test at 0.25 those papers recommend) joins
the episode noise, mean square and df; ``power.mde`` applies the same rule to its simulated mean
squares, so the power it predicts is the power of this rule (the tests check the A/A rate and
the coverage with it). **Strata**: a pooled cell (all task groups) is fitted on d less its
group's mean per group (``stats.stratify``), so a group mix that differs between episodes is
not noise; the lost G - 1 df come off the episode noise. **Connectivity**: the processes and
episodes of a cell form a graph; only its largest connected part (every process linked to every
other through episodes) is estimable, and the episodes outside it are left out and said so.

**Fingerprint** (log plain decode step time of a process before it serves): x_e = fp_c(e) -
fp_b(e); gamma, the pooled within-arm slope of the fitted process effects on the fingerprints,
costs one df (shared by the process strata in proportion to their fingerprint spread), and
y - gamma x is refitted; gamma's error adds (mean x)^2 Var(gamma). The gain comes from the
arms' fingerprint gap predicting mean(a) - mean(b) (fingerprints centred within each arm would
change nothing in a balanced design), so both arms' fingerprints must time the same computation
(the target's plain decode). Rule fixed in advance, never comparing widths: use it when its
within-arm correlation with the fitted process effects is above ``FP_MIN_R`` (attenuated by
episode noise: conservative; within-arm contrasts are independent of the arm contrast), each
arm has 3 processes or more (so gamma leaves each stratum a df), and the arms' fingerprint means differ no more than their spread
allows (two-sample t, p >= ``FP_ARM_P``: more is the arm's treatment, not placement).
**Not applied for now** (``FP_APPLIED``): the adjusted interval held its A/A rate at 6.5%, not
5%, over 10,000 simulated pilots on the pilot's own assignment (the plain one at 3.5%); the
fit, its r and its share are computed and reported, the interval is the plain one.

**Design check** (``p_design``): under H0 the arm changes nothing, so the m_cand + m_base
process offsets are exchangeable (H0 gives it: processes are not put in arms at random). Each
process's potential comes from the least-squares fit of y_e = pot_c(e) - pot_b(e) (the episode's
slice cancels); the statistic, the candidate-labelled mean potential minus the baseline's, is
referred to every split of the processes into groups of m_cand and m_base (after a label-free
regression on the fingerprints when given). Episode noise is smallest in the observed split, the
contrast the episodes measure directly, so the reference is at least as wide: conservative,
without normality or variance estimates; smallest p 2 / C(2m, m) (0.029 at m = 4).

    >>> y = [0.10, 0.30, 0.20, 0.00, 0.20, 0.10, 0.20, 0.30, 0.10]  # 3 x 3, one episode each
    >>> c, b = [0, 0, 0, 1, 1, 1, 2, 2, 2], [0, 1, 2, 0, 1, 2, 0, 1, 2]
    >>> est = episode_effect(y, list(range(9)), c, b)
    >>> round(est.estimate, 4), round(est.se, 4), round(est.df, 2)  # se^2 = (MS_A + MS_B - MSE) / 9
    (0.1667, 0.0577, 2.77)
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specpilot.analysis.base import stats
from specpilot.analysis.episodes.components import Design, Fit, design, fit_moments
from specpilot.errors import ConfigError

FP_MIN_R = 0.5  # keep the fingerprint when its within-arm correlation is above this
# ... and never, for now: over 10,000 simulated A/A pilots (4 + 4 processes, 16 episodes, the
# pilot's own crossed assignment, tests/test_episodes.py) the adjusted interval excluded 0 in
# 6.5% of them (5.3-8.1% per 1,000; the plain one 3.5%), above the nominal 5%: gamma is fitted
# on the same episodes and the rule keeps it when it fits well, and neither is in its error.
# The fit and its r are still computed and reported; the planner never counted on it.
FP_APPLIED = False
FP_ARM_P = 0.01  # ... and its arm means differ no more than this p-value allows
EXACT_SPLITS = 20_000  # above this many process splits, a seeded Monte Carlo of them

Fingerprints = Mapping[int, float] | Sequence[float] | np.ndarray


@dataclass(frozen=True)
class EpisodeEstimate:
    estimate: float  # mu: mean log(candidate / baseline task time)
    se: float
    df: float  # Satterthwaite
    interval: tuple[float, float]  # of mu, log scale, at ``level``
    rel_change: float  # exp(mu) - 1: negative is faster
    rel_interval: tuple[float, float]
    level: float
    p_model: float  # t-test of mu = 0 on se and df
    p_design: float  # permutation of process labels (module docstring)
    p_design_min: float  # the smallest p_design this many processes can give
    s_a: float  # candidate process sd (residual after the fingerprint when it is used)
    s_b: float  # baseline process sd (likewise)
    s_xi: float  # episode noise sd (of an episode's mean d)
    n_pairs: int
    n_episodes: int
    m_cand: int
    m_base: int
    fingerprint_used: bool
    fingerprint_r2: float | None  # share of the process variance it explained (None: none given)
    fingerprint_r: float | None  # its within-arm correlation with the fitted process effects
    se_without_fingerprint: float
    text: str
    one_pool: bool = (
        False  # both arms served by one pool of processes (``analysis.episodes.onepool``)
    )
    in_place: bool = (
        False  # both arms of every episode on one process (``analysis.episodes.inplace``)
    )


def pool_estimate(
    t: tuple[float, float, float, float],
    sds: tuple[float, float, float],
    counts: tuple[int, int, int],
    text: str,
    *,
    in_place: bool = False,
) -> EpisodeEstimate:
    """An estimate over one pool of processes (``analysis.episodes.onepool``, ``analysis.episodes.inplace``):
    ``t`` (mu, se, df, level), ``sds`` (s_a, s_b, s_xi), ``counts`` (pairs, episodes,
    processes); its t interval and p, the p also the design's (no relabelling there), no
    fingerprint."""
    mu, se, df, level = t
    lo, hi = stats.t_interval(mu, se, df, level)
    p = stats.t_p(mu, se, df)
    n_pairs, n_ep, m = counts
    return EpisodeEstimate(
        estimate=mu,
        se=se,
        df=df,
        interval=(lo, hi),
        rel_change=math.expm1(mu),
        rel_interval=(math.expm1(lo), math.expm1(hi)),
        level=level,
        p_model=p,
        p_design=p,
        p_design_min=0.0,
        s_a=sds[0],
        s_b=sds[1],
        s_xi=sds[2],
        n_pairs=n_pairs,
        n_episodes=n_ep,
        m_cand=m,
        m_base=m,
        fingerprint_used=False,
        fingerprint_r2=None,
        fingerprint_r=None,
        se_without_fingerprint=se,
        text=text,
        one_pool=True,
        in_place=in_place,
    )


@dataclass(frozen=True)
class _Fp:
    fit: Fit
    shift: float  # gamma * (fingerprint mean difference): subtracted from the estimate
    r: float
    r2: float
    used: bool


def _fingerprint(des: Design, y: np.ndarray, fc: np.ndarray, fb: np.ndarray, base: Fit) -> _Fp:
    """The fingerprint-adjusted fit, its explanatory power and the module's rule."""
    coef = des.coef @ y
    alpha = coef[1 : 1 + des.m_c] - coef[1 : 1 + des.m_c].mean()  # candidate effects
    boff = -(coef[1 + des.m_c :] - coef[1 + des.m_c :].mean())  # baseline offsets b_k
    gc, gb = fc - fc.mean(), fb - fb.mean()
    sc, sb = float(gc @ gc), float(gb @ gb)
    s = sc + sb
    if s <= 0:
        return _Fp(base, 0.0, 0.0, 0.0, False)
    cross = float(alpha @ gc + boff @ gb)
    gamma = cross / s
    spread = float(alpha @ alpha + boff @ boff)
    r = cross / math.sqrt(s * spread) if spread > 0 else 0.0
    x = fc[des.c] - fb[des.b]  # (E,)
    x_mean = float(des.w @ x)  # the process-balanced mean of x: the arms' fingerprint gap
    extra = x_mean**2 * np.array([sc * des.q[0], sb * des.q[1]]) / (s * s)
    fit = fit_moments(des, y - gamma * x, np.array([sc, sb]) / s, extra)
    before, after = base.comp[0] + base.comp[1], fit.comp[0] + fit.comp[1]
    r2 = min(1.0, max(0.0, 1.0 - after / before)) if before > 0 else 0.0
    pooled = s / max(des.m_c + des.m_b - 2, 1)
    t_arm = (fc.mean() - fb.mean()) / math.sqrt(pooled * (1 / des.m_c + 1 / des.m_b))
    p_arm = stats.t_p(t_arm, 1.0, des.m_c + des.m_b - 2)
    used = FP_APPLIED and r > FP_MIN_R and min(des.df[0], des.df[1]) >= 2 and p_arm >= FP_ARM_P
    return _Fp(fit, gamma * x_mean, r, r2, used)


@functools.lru_cache(maxsize=32)
def _splits(m_c: int, m_b: int) -> np.ndarray:
    """(splits, m_c + m_b) contrasts: +1/m_c on a candidate-labelled set, -1/m_b elsewhere."""
    n = m_c + m_b
    if math.comb(n, m_c) <= EXACT_SPLITS:
        sets = np.array(list(itertools.combinations(range(n), m_c)))
    else:  # seeded Monte Carlo, the observed split first
        rng = np.random.default_rng(0)
        draws = np.argsort(rng.random((EXACT_SPLITS, n)), axis=1)[:, :m_c]
        sets = np.vstack([np.arange(m_c), draws])
    out = np.full((len(sets), n), -1.0 / m_b)
    np.put_along_axis(out, sets, 1.0 / m_c, axis=1)
    out.flags.writeable = False  # cached: shared by every call
    return out


def _design_p(des: Design, y: np.ndarray, fp: np.ndarray | None) -> tuple[float, float]:
    """p and its smallest attainable value, by relabelling whole processes (docstring)."""
    pot = des.pot @ y  # (m_c + m_b,) least-norm: centred
    if fp is not None and float((f := fp - fp.mean()) @ f) > 0:  # label-free: keeps exchangeability
        pot = pot - float(pot @ f) / float(f @ f) * f
    t = _splits(des.m_c, des.m_b) @ pot
    obs = float(pot[: des.m_c].mean() - pot[des.m_c :].mean())
    hits = int(np.count_nonzero(np.abs(t) >= abs(obs) - 1e-12 * max(1.0, abs(obs))))
    n = len(t)
    if math.comb(des.m_c + des.m_b, des.m_c) > EXACT_SPLITS:
        return hits / n, 1.0 / n  # the observed split is row 0: (1 + hits) / (1 + draws)
    return hits / n, (2.0 if des.m_c == des.m_b else 1.0) / n


def episode_effect(
    d: Sequence[float] | np.ndarray,
    episode: Sequence[int] | np.ndarray,
    cand_proc: Sequence[int] | np.ndarray,
    base_proc: Sequence[int] | np.ndarray,
    *,
    cand_fp: Fingerprints | None = None,
    base_fp: Fingerprints | None = None,
    level: float = 0.95,
    strata_df: int = 0,
    pool: bool = True,
) -> EpisodeEstimate:
    """The candidate's effect mu on log task time from per-pair ``d`` (module docstring).

    ``episode``, ``cand_proc``, ``base_proc``: per pair, its episode and the processes that
    served it; ``cand_fp`` / ``base_fp``: fingerprint per process id (``fp[id]``);
    ``strata_df``: degrees of freedom already spent on ``d`` (``stats.stratify``), taken from
    the episode noise's. ``pool=False``: no sometimes-pool. With two episodes per process the
    residual has 1-3 df, the preliminary F test cannot see a process component, the rule pools
    nearly always, and the interval is too narrow in the tail (at 4 + 4 processes and 8
    episodes, 2.7% of A/A intervals exclude 0 at a nominal 0.5%): the sequential looks
    (``analysis.episodes.sequential``) test without it, and hold their level.
    """
    dd = np.asarray(d, dtype=np.float64)
    ok = np.isfinite(dd)
    ok, dropped = _connected(ok, np.asarray(episode), np.asarray(cand_proc), np.asarray(base_proc))
    _, e = np.unique(np.asarray(episode)[ok], return_inverse=True)
    n = np.bincount(e)
    y = np.bincount(e, weights=dd[ok]) / n  # (E,) episode means
    cid, ci = np.unique(np.asarray(cand_proc)[ok], return_inverse=True)
    bid, bi = np.unique(np.asarray(base_proc)[ok], return_inverse=True)
    c, b = np.zeros(n.size, dtype=np.int64), np.zeros(n.size, dtype=np.int64)
    c[e], b[e] = ci, bi
    if np.any(c[e] != ci) or np.any(b[e] != bi):
        raise ConfigError("an episode was served by more than one process of an arm")
    des = dataclasses.replace(design(c, b, int(cid.size), int(bid.size)), pool=pool)
    if strata_df:
        if des.df[2] - strata_df < 1:
            raise ConfigError(
                f"{n.size} episodes leave no episode-noise df after {strata_df} for the groups",
                fix="replay more episodes per level",
            )
        des = dataclasses.replace(des, df=des.df - np.array([0.0, 0.0, float(strata_df)]))
    plain = fit_moments(des, y, np.zeros(2), np.zeros(2))
    mu = float(des.w @ y)
    fp, f_all = None, None
    if cand_fp is not None and base_fp is not None:
        fc = np.array([float(cand_fp[int(i)]) for i in cid])
        fb = np.array([float(base_fp[int(i)]) for i in bid])
        fp, f_all = _fingerprint(des, y, fc, fb, plain), np.r_[fc, fb]
    fit = plain
    if fp is not None and fp.used:
        fit, mu = fp.fit, mu - fp.shift
    n_pairs = int(ok.sum())
    est = _estimate(mu, fit, plain, fp, level, _design_p(des, y, f_all), (n_pairs, y.size), des)
    if not dropped:
        return est
    why = f"; {dropped} episode(s) left out: their processes never met the others'"
    return dataclasses.replace(est, text=est.text[:-1] + why + ")")


def _connected(
    ok: np.ndarray, episode: np.ndarray, cand: np.ndarray, base: np.ndarray
) -> tuple[np.ndarray, int]:
    """``ok`` kept to the episodes whose processes are connected with the most episodes (the
    processes are nodes, each episode joins its candidate and baseline process): only there are
    the arms' process offsets told apart. A cell of some groups' pairs misses episodes, and
    what is left can split in two. Returns the mask and how many episodes it left out.

        >>> ok = np.ones(4, dtype=bool)
        >>> m, k = _connected(ok, np.arange(4), np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2]))
        >>> m.tolist(), k
        ([True, True, True, False], 1)
    """
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def root(x: tuple[str, int]) -> tuple[str, int]:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    idx = np.flatnonzero(ok)
    for i in idx:
        a, b = root(("c", int(cand[i]))), root(("b", int(base[i])))
        if a != b:
            parent[a] = b
    comp = np.array(["{}{}".format(*root(("c", int(cand[i])))) for i in idx])
    episodes: dict[str, set[Any]] = {}
    for i, k in zip(idx, comp, strict=True):
        episodes.setdefault(str(k), set()).add(episode[i])
    if len(episodes) < 2:
        return ok, 0
    best = max(episodes, key=lambda k: (len(episodes[k]), k))
    out = ok.copy()
    out[idx[comp != best]] = False
    return out, sum(len(v) for k, v in episodes.items() if k != best)


def _estimate(
    mu: float,
    fit: Fit,
    plain: Fit,
    fp: _Fp | None,
    level: float,
    p: tuple[float, float],  # design p-value, its smallest attainable value
    n: tuple[int, int],  # pairs, episodes
    des: Design,
) -> EpisodeEstimate:
    (p_design, p_min), (n_pairs, n_ep) = p, n
    se = math.sqrt(max(fit.var, 0.0))
    lo, hi = stats.t_interval(mu, se, fit.dof, level)
    p_model = stats.t_p(mu, se, fit.dof)
    sd = np.sqrt(fit.comp)
    used = fp is not None and fp.used
    fp_text = (
        "no fingerprint"
        if fp is None
        else f"fingerprint r {fp.r:.2f} explains {fp.r2:.0%}, "
        + ("used" if used else "not used" if FP_APPLIED else "reported, not applied")
    )
    text = (
        f"{_rel(mu):+.1%} [{_rel(lo):+.1%}, {_rel(hi):+.1%}] at {level:.0%} "
        f"(t, {fit.dof:.1f} df; {des.m_c}+{des.m_b} processes, {n_ep} episodes, {n_pairs} "
        f"pairs; p model {p_model:.3f}, design {p_design:.3f}; process sd {sd[0]:.1%}/"
        f"{sd[1]:.1%}, episode sd {sd[2]:.1%}; {fp_text})"
    )
    return EpisodeEstimate(
        estimate=mu,
        se=se,
        df=fit.dof,
        interval=(lo, hi),
        rel_change=_rel(mu),
        rel_interval=(_rel(lo), _rel(hi)),
        level=level,
        p_model=p_model,
        p_design=p_design,
        p_design_min=p_min,
        s_a=float(sd[0]),
        s_b=float(sd[1]),
        s_xi=float(sd[2]),
        n_pairs=n_pairs,
        n_episodes=n_ep,
        m_cand=des.m_c,
        m_base=des.m_b,
        fingerprint_used=used,
        fingerprint_r2=None if fp is None else fp.r2,
        fingerprint_r=None if fp is None else fp.r,
        se_without_fingerprint=math.sqrt(max(plain.var, 0.0)),
        text=text,
    )


def _rel(x: float) -> float:
    return math.expm1(x) if x < 700.0 else math.inf  # a 1-df interval can be that wide


__all__ = ["EpisodeEstimate", "episode_effect", "pool_estimate"]
