"""Statistics for the sampled groups, as pure functions (numpy and the standard library).

- ``wilson``: the Wilson score interval of a pass rate.
- ``newcombe``: the Newcombe hybrid score interval (method 10) for a difference of two
  independent proportions; the non-inferiority test rejects "candidate worse by the margin or
  more" when the interval's lower end (two-sided level 1 - 2 alpha, i.e. one-sided alpha) lies
  above ``-margin``. ``ni_power`` is that test's exact power at n per arm (every outcome
  enumerated), and ``n_for_power`` the n it needs for a target power.
- ``stratified_permutation``: a two-sample permutation test stratified by prompt (arm labels
  shuffled within each prompt), for categorical outcomes (summed chi-square statistic) or
  numeric ones (summed difference of means). Seeded ``numpy.random.Generator``.

    >>> lo, hi = newcombe(45, 50, 40, 50, alpha=0.05)
    >>> round(lo, 3), round(hi, 3)
    (-0.043, 0.242)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

_N = NormalDist()


def z(p: float) -> float:
    return _N.inv_cdf(p)


def wilson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided 1 - alpha Wilson score interval for k successes in n (n = 0: (0, 1))."""
    if n == 0:
        return 0.0, 1.0
    zz = z(1 - alpha / 2)
    p = k / n
    den = 1 + zz * zz / n
    mid = (p + zz * zz / (2 * n)) / den
    half = zz * math.sqrt(p * (1 - p) / n + zz * zz / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def _wilson_arrays(k: np.ndarray, n: int, zz: float) -> tuple[np.ndarray, np.ndarray]:
    p = k / n
    den = 1 + zz * zz / n
    mid = (p + zz * zz / (2 * n)) / den
    half = zz * np.sqrt(p * (1 - p) / n + zz * zz / (4 * n * n)) / den
    return np.maximum(0.0, mid - half), np.minimum(1.0, mid + half)


def newcombe(k1: int, n1: int, k2: int, n2: int, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided 1 - alpha interval for p1 - p2 (Newcombe 1998, method 10)."""
    if n1 == 0 or n2 == 0:
        return -1.0, 1.0
    l1, u1 = wilson(k1, n1, alpha)
    l2, u2 = wilson(k2, n2, alpha)
    p1, p2 = k1 / n1, k2 / n2
    d = p1 - p2
    lo = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return max(-1.0, lo), min(1.0, hi)


def ni_lower(k_cand: int, n_cand: int, k_base: int, n_base: int, alpha: float) -> float:
    """Lower end of the one-sided 1 - alpha bound for p_cand - p_base (Newcombe)."""
    return newcombe(k_cand, n_cand, k_base, n_base, 2 * alpha)[0]


def ni_power(n: int, p: float, margin: float, alpha: float, p_cand: float | None = None) -> float:
    """Exact power of the Newcombe non-inferiority test with n per arm, baseline rate ``p``
    and candidate rate ``p_cand`` (default: equal, the usual planning assumption)."""
    if n <= 0:
        return 0.0
    pc = p if p_cand is None else p_cand
    zz = z(1 - alpha)  # two-sided level 1 - 2 alpha
    k = np.arange(n + 1)
    lo, hi = _wilson_arrays(k.astype(float), n, zz)
    ph = k / n
    # lower bound for cand (row i) minus base (column j)
    low = (ph[:, None] - ph[None, :]) - np.sqrt(
        (ph[:, None] - lo[:, None]) ** 2 + (hi[None, :] - ph[None, :]) ** 2
    )
    reject = low > -margin
    w_c = _binom_pmf(n, pc)
    w_b = _binom_pmf(n, p)
    return float(w_c @ reject.astype(float) @ w_b)


def _binom_pmf(n: int, p: float) -> np.ndarray:
    k = np.arange(n + 1)
    if p <= 0.0 or p >= 1.0:
        return (k == (0 if p <= 0.0 else n)).astype(float)
    logc = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k])
    return np.exp(logc + k * math.log(p) + (n - k) * math.log1p(-p))


def n_for_power(
    p: float, margin: float, alpha: float, power: float = 0.8, n_max: int = 2000
) -> int | None:
    """Smallest n per arm (searched on a doubling grid, then bisected) reaching ``power``."""
    lo, hi = 1, 8
    while ni_power(hi, p, margin, alpha) < power:
        lo, hi = hi, hi * 2
        if hi > n_max:
            return None
    while hi - lo > 1:  # power is nearly monotone in n; bisect to the first grid point
        mid = (lo + hi) // 2
        if ni_power(mid, p, margin, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi


# -- two-sample distribution tests -------------------------------------------------------------


def _chi2(labels: np.ndarray, codes: np.ndarray, n_cat: int) -> np.ndarray:
    """Pearson chi-square of the 2 x n_cat table, for each row of ``labels`` (R, n) in {0,1}."""
    n = codes.shape[0]
    onehot = np.zeros((n, n_cat))
    onehot[np.arange(n), codes] = 1.0
    a = labels.astype(float) @ onehot  # (R, C): arm-1 counts
    col = onehot.sum(0)  # (C,)
    n1 = labels.sum(1, keepdims=True).astype(float)  # (R, 1)
    e1 = n1 * col / n
    e0 = (n - n1) * col / n
    b = col - a
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(e1 > 0, (a - e1) ** 2 / e1, 0.0) + np.where(e0 > 0, (b - e0) ** 2 / e0, 0.0)
    return np.asarray(s.sum(1))


def _mean_diff(labels: np.ndarray, values: np.ndarray) -> np.ndarray:
    n1 = labels.sum(1)
    n0 = labels.shape[1] - n1
    s1 = labels.astype(float) @ values
    return np.asarray(s1 / n1 - (values.sum() - s1) / n0)


def stratified_permutation(
    strata: Sequence[tuple[Sequence[int], Sequence[object]]],
    kind: str,
    rng: np.random.Generator,
    permutations: int = 2000,
) -> tuple[float, float]:
    """(statistic, p-value) of arm 0 vs arm 1 over strata [(arm labels, outcomes), ...].

    ``kind`` ``categorical``: outcomes are hashable tokens, statistic = sum over strata of the
    2 x C chi-square; ``numeric``: outcomes are floats, statistic = |sum of per-stratum
    differences of means|. A stratum needs both arms present to count. The p-value is
    (1 + #{permuted >= observed}) / (1 + permutations).
    """
    if kind not in ("categorical", "numeric"):
        raise ValueError("kind: categorical | numeric")
    obs = 0.0
    perm = np.zeros(permutations)
    for arms, outcomes in strata:
        lab = np.asarray(arms, dtype=int)
        if lab.size < 2 or lab.min() == lab.max():
            continue
        labels = np.vstack([lab, rng.permuted(np.tile(lab, (permutations, 1)), axis=1)])
        if kind == "categorical":
            _, codes = np.unique(np.asarray([str(o) for o in outcomes]), return_inverse=True)
            stat = _chi2(labels, codes, int(codes.max()) + 1)
        else:
            stat = _mean_diff(labels, np.asarray(outcomes, dtype=float))
        obs += float(stat[0])
        perm += stat[1:]
    if kind == "numeric":
        obs, perm = abs(obs), np.abs(perm)
    p = (1 + int(np.sum(perm >= obs - 1e-12))) / (1 + permutations)
    return obs, p


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (family-wise error at the stated alpha)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    out = [0.0] * len(pvalues)
    running = 0.0
    m = len(pvalues)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out
