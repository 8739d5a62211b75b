"""Small-sample statistics for paired comparisons: pure functions, numpy and the stdlib only.

Why these and not a percentile bootstrap: a 2-core pilot reaches 3-30 pairs per cell, where a
percentile bootstrap is not a confidence interval (one pair gives a zero-width "interval") and
its error rate is far above nominal. The tests here hold their level at any n:

- ``sign_flip_p``: the exact two-sided sign-flip permutation test of a mean of paired
  differences (all 2^n sign vectors up to ``EXACT_MAX`` pairs, a seeded Monte Carlo above).
  Valid whenever the two arms are exchangeable within a pair (an A/A comparison is, by
  construction); its smallest attainable p-value is 2^(1-n).
- ``t_interval`` / ``t_p``: Student's t with Welch-Satterthwaite degrees of freedom (the
  episode estimators' variance components, ``analysis.episodes``).
- the exact McNemar test on discordant pairs (on time in one arm only) is ``sign_flip_p`` of
  each episode's net count of them (``analysis.comparison.paired``).
- ``holm_tarone``: Holm's step-down adjustment over the hypotheses that can reach significance
  (Tarone 1990: a discrete test whose smallest attainable p-value is above the threshold is not
  counted). Family-wise error, not false-discovery rate: one false "faster" cell is enough to
  turn a verdict, so the chance of *any* false call is what must stay at alpha.
- ``pairs_needed`` / ``power``: normal-approximation sample size and power for a stated minimum
  effect, with a variance that more pairs cannot shrink; ``units_needed``: the episodes that
  would decide a cell at its measured estimate and spread.
- ``stratify``: a cell that pools task groups, its pairs' d taken relative to their group's
  mean (a blocked design's adjustment): the groups' different effects are not noise.

    >>> round(sign_flip_p(np.array([0.1, 0.2, 0.15, 0.12])), 4)  # all positive: 2 of 16 as extreme
    0.125
    >>> round(t_quantile(0.975, 10), 3), round(t_cdf(2.228, 10), 3)
    (2.228, 0.975)
    >>> holm_tarone([0.01, 0.04, 0.5], [0.001, 0.001, 0.001], 0.05)
    [0.03, 0.08, 0.5]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from specpilot.quality.stats import holm


@dataclass(frozen=True)
class Interval:
    """An estimate and its interval (relative change, seconds or a difference): the verdict's
    deciding interval (``analysis.comparison.paired``) and the descriptive ones (``analysis.comparison.resample``)."""

    estimate: float | None
    low: float | None
    high: float | None


EXACT_MAX = 16  # up to this many pairs the sign-flip test enumerates all 2^n sign vectors
MONTE_CARLO = 20_000  # sign vectors drawn above EXACT_MAX


def sign_flip_p(d: np.ndarray, rng: np.random.Generator | None = None) -> float:
    """Two-sided p-value of mean(d) = 0 by flipping the sign of each paired difference.

    Exact below ``EXACT_MAX`` pairs; above, ``MONTE_CARLO`` random sign vectors with the
    observed one counted (p = (1 + hits) / (1 + draws), never 0).
    """
    d = np.asarray(d, dtype=np.float64)
    d = d[np.isfinite(d)]
    n = d.size
    if n == 0:
        return 1.0
    obs = abs(float(d.sum()))
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    if n <= EXACT_MAX:
        signs = ((np.arange(1 << n)[:, None] >> np.arange(n)) & 1) * 2 - 1  # (2^n, n)
        sums = np.abs(signs @ d)
        return float(np.count_nonzero(sums >= obs - tol)) / float(1 << n)
    rng = rng or np.random.default_rng(0)
    hits = 0
    rows = max(1, 4_000_000 // n)  # sign vectors held at once
    for start in range(0, MONTE_CARLO, rows):
        r = min(rows, MONTE_CARLO - start)
        signs = rng.integers(0, 2, size=(r, n)) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ d) >= obs - tol))
    return (1 + hits) / (1 + MONTE_CARLO)


def sign_flip_min_p(n: int) -> float:
    """The smallest p-value ``sign_flip_p`` can give with ``n`` pairs (all signs equal)."""
    return 1.0 if n <= 0 else min(1.0, 2.0 ** (1 - n))


def tarone_k(min_p: Sequence[float], alpha: float) -> int:
    """Tarone's family size: the smallest K such that at most K hypotheses have a smallest
    attainable p-value at or below alpha / K (1 for an empty family)."""
    k, m = 1, len(min_p)
    while k < m and sum(1 for q in min_p if q <= alpha / k) > k:
        k += 1
    return k


def holm_tarone(p: Sequence[float], min_p: Sequence[float], alpha: float) -> list[float]:
    """Holm-adjusted p-values over the hypotheses that can reach ``alpha`` (Tarone's rule).

    K is the smallest count such that at most K hypotheses have a smallest attainable p-value
    below alpha / K; those K form the family, the others get 1.0 (they could never be
    significant). Adjusted p = max over the step-down of (K - rank) * p, capped at 1.
    """
    m = len(p)
    if m == 0:
        return []
    k = tarone_k(min_p, alpha)
    eligible = [i for i in range(m) if min_p[i] <= alpha / k]
    # Holm over a family of k (at least the eligible ones): the untestable rest as p = 1
    padded = holm([p[i] for i in eligible] + [1.0] * (k - len(eligible)))
    out = [1.0] * m
    for j, i in enumerate(eligible):
        out[i] = padded[j]
    return out


# -- Student's t (regularised incomplete beta, Numerical Recipes' continued fraction) ---------


def _betacf(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(c) > 1e-300 else 1e-300
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(c) > 1e-300 else 1e-300
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom (df may be fractional)."""
    if math.isinf(df):
        return NormalDist().cdf(x)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x >= 0 else tail


def f_sf(f: float, d1: float, d2: float) -> float:
    """P(F > f) for Snedecor's F on ``d1`` and ``d2`` degrees of freedom."""
    if f <= 0.0:
        return 1.0
    return _betainc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))


def f_quantile(p: float, d1: float, d2: float) -> float:
    """The ``p`` quantile of F (bisection on ``f_sf``)."""
    lo, hi = 0.0, 1.0
    while 1.0 - f_sf(hi, d1, d2) < p:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if 1.0 - f_sf(mid, d1, d2) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on ``t_cdf``; |error| < 1e-10)."""
    if math.isinf(df) or df > 1e7:
        return NormalDist().inv_cdf(p)
    if p == 0.5:
        return 0.0
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return 0.5 * (lo + hi)


def satterthwaite(a: float, df_a: float, b: float, df_b: float) -> float:
    """Degrees of freedom of a sum of two variance estimates ``a`` and ``b``."""
    den = (a * a / df_a if df_a > 0 else 0.0) + (b * b / df_b if df_b > 0 else 0.0)
    return (a + b) ** 2 / den if den > 0 else math.inf


def t_p(estimate: float, se: float, df: float) -> float:
    """Two-sided p-value of estimate = 0 with standard error ``se`` and ``df``."""
    if se <= 0:
        return 0.0 if estimate != 0 else 1.0
    return min(1.0, 2.0 * (1.0 - t_cdf(abs(estimate) / se, df)))


def t_interval(estimate: float, se: float, df: float, level: float) -> tuple[float, float]:
    q = t_quantile((1.0 + level) / 2.0, df)
    return estimate - q * se, estimate + q * se


def quantile_interval(x: np.ndarray, q: float, level: float) -> tuple[float | None, float | None]:
    """A distribution-free interval for the ``q`` quantile of the population ``x`` was drawn
    from: the order statistics whose ranks the binomial count of values below the quantile
    covers with ``level`` (at least ``level``, split between the tails); None on a side the
    sample cannot bound (the p99 of fewer than ~300 values has no upper bound at 95%).

        >>> x = np.arange(1.0, 11.0)  # 10 values
        >>> quantile_interval(x, 0.5, 0.95), quantile_interval(x, 0.99, 0.95)
        ((2.0, 9.0), (9.0, None))
    """
    v = np.sort(np.asarray(x, dtype=np.float64)[np.isfinite(x)])
    n, tail = v.size, (1.0 - level) / 2.0
    if n == 0:
        return None, None
    cdf, acc = [], 0.0  # P(B <= k), B ~ Binomial(n, q): values below the quantile
    for k in range(n + 1):
        acc += math.exp(
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + (k * math.log(q) if k else 0.0)
            + ((n - k) * math.log1p(-q) if n - k else 0.0)
        )
        cdf.append(acc)
    # lower: the largest rank l with P(B < l) <= tail; upper: the smallest u with P(B >= u) <= tail
    lo = max((k for k in range(1, n + 1) if cdf[k - 1] <= tail), default=None)
    hi = min((k for k in range(1, n + 1) if 1.0 - cdf[k - 1] <= tail), default=None)
    return (
        float(v[lo - 1]) if lo is not None else None,
        float(v[hi - 1]) if hi is not None else None,
    )


def power(effect: float, se: float, alpha: float) -> float | None:
    """Chance of detecting a true change of ``effect`` (two-sided level ``alpha``)."""
    if not se > 0 or not math.isfinite(se):
        return None
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return NormalDist().cdf(abs(effect) / se - z)


def pairs_needed(
    sd: float, drift_sd: float, effect: float, alpha: float, target_power: float = 0.8
) -> int | None:
    """Pairs for ``target_power`` against ``effect`` when each pair's difference has standard
    deviation ``sd`` and the arm runs differ by a drift of ``drift_sd`` that more pairs do not
    shrink; None when no number of pairs is enough (the drift alone is too large)."""
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0) + NormalDist().inv_cdf(target_power)
    room = (abs(effect) / z) ** 2 - drift_sd**2
    if room <= 0 or not math.isfinite(sd):
        return None
    return max(2, math.ceil(sd * sd / room))


def units_needed(
    estimate: float,
    se: float,
    units: int,
    df: float,
    level: float,
    margins: tuple[float, float],
    cap: int = 50,
    floor: float = 0.0,
) -> int | None:
    """How many independent units (episodes) would decide a cell whose log estimate and
    standard error stay as measured on ``units`` of them (the standard error shrinking as
    1/sqrt(units), the degrees of freedom growing with them): the fewest at which the interval
    at ``level`` lies beyond ``min_gain`` on the estimate's side or inside the equivalence
    margin; ``margins`` = (log1p(min_gain), log1p(equivalence_margin)). None when the estimate
    sits where neither can happen, or more than ``cap`` times the units would be needed.
    ``floor``: the part of se^2 that more units do not shrink (the processes' own components,
    ``analysis.episodes.celltest.process_floor``); with one, the degrees of freedom, bounded by the
    processes, are not counted on to grow either.

        >>> units_needed(-0.10, 0.05, 12, 9.0, 0.995, (0.0, 0.0953))  # -9.5% on 12 episodes
        25
        >>> units_needed(0.0, 0.05, 12, 9.0, 0.995, (0.0, 0.0)) is None  # 0, and no margin
        True
        >>> units_needed(-0.10, 0.05, 12, 9.0, 0.995, (0.0, 0.0953), floor=0.04**2) is None
        True
    """
    gain, eq = margins
    room = max(abs(estimate) - gain, eq - abs(estimate))
    if not (room > 0 and se > 0 and units > 0 and math.isfinite(se)):
        return None
    fixed = min(max(floor, 0.0), se * se)

    def decides(n: int) -> bool:
        se_n = math.sqrt(fixed + (se * se - fixed) * units / n)
        return t_quantile(level, df if fixed > 0 else df + n - units) * se_n < room

    lo, hi = units, cap * units  # the half-width falls with n: bisect for the first n
    if hi <= lo or not decides(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if decides(mid):
            hi = mid
        else:
            lo = mid
    return hi


__all__ = [
    "f_quantile",
    "f_sf",
    "holm_tarone",
    "pairs_needed",
    "power",
    "quantile_interval",
    "satterthwaite",
    "sign_flip_min_p",
    "sign_flip_p",
    "stratify",
    "t_cdf",
    "t_interval",
    "t_p",
    "t_quantile",
    "units_needed",
    "within_sd",
]


def stratify(d: np.ndarray, strata: np.ndarray | None) -> tuple[np.ndarray, int]:
    """``d`` less each stratum's own mean plus the overall mean, and the degrees of freedom
    the strata's means took (their number less one): the mean is unchanged, the spread between
    the strata no longer counts as noise. Unchanged with no strata or only one.

        >>> d = np.array([0.1, 0.3, -0.2, -0.4])
        >>> x, lost = stratify(d, np.array([0, 0, 1, 1]))
        >>> [round(float(v), 2) for v in x], lost, round(float(x.mean()), 2) == round(float(d.mean()), 2)
        ([-0.15, 0.05, 0.05, -0.15], 1, True)
    """
    if strata is None or d.size == 0:
        return d, 0
    labels, k = np.unique(strata, return_inverse=True)
    if labels.size < 2:
        return d, 0
    means = np.bincount(k, weights=d) / np.bincount(k)
    return d - means[k] + float(d.mean()), int(labels.size) - 1


def within_sd(x: np.ndarray, labels: np.ndarray) -> float | None:
    """The pooled standard deviation of ``x`` about its own group's mean (groups by
    ``labels``: the spread inside the groups, none of the spread between them), on n - groups
    degrees of freedom; None where no group has two values.

        >>> round(within_sd(np.array([1.0, 3.0, 10.0, 12.0, 7.0]), np.array([0, 0, 1, 1, 2])), 4)
        1.4142
    """
    _, k = np.unique(labels, return_inverse=True)
    df = x.size - (int(k.max()) + 1 if k.size else 0)
    if df < 1:
        return None
    means = np.bincount(k, weights=x) / np.bincount(k)
    return float(np.sqrt(np.sum((x - means[k]) ** 2) / df))
