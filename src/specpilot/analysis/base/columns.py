"""Columnar helpers: group rows by a key once, then aggregate with numpy (no loop per row).

A pilot holds up to millions of requests; every per-cell figure (sums, quantiles, histograms)
is computed from integer group codes, so the cost is a few vector passes, not a Python loop per
record per metric.

    >>> codes, labels = group_codes([("a", "x"), ("b", "x"), ("a", "x")])
    >>> codes.tolist(), labels
    ([0, 1, 0], [('a', 'x'), ('b', 'x')])
    >>> sum_by(codes, np.array([1.0, 2.0, 3.0]), len(labels)).tolist()
    [4.0, 2.0]
    >>> quantiles_by(codes, np.array([1.0, 2.0, 3.0]), len(labels), (0.5,))[0]
    [2.0]
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

ALL = "*"  # the label of a pooled dimension (all phases, all groups)


def group_codes(keys: Iterable[Hashable]) -> tuple[np.ndarray, list[Any]]:
    """Integer code per row (first-seen order) and the distinct keys."""
    index: dict[Hashable, int] = {}
    codes = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64)
    return codes, list(index)


def factorize(values: Iterable[Hashable]) -> tuple[np.ndarray, list[Any]]:
    """Integer code per value (first-seen order) and the distinct values.

    Few distinct values (arms, phases, groups): one vectorised comparison per value; many
    (request ids): one dict lookup per row in C (``map``), never a Python-level loop body.

    >>> factorize(["b", "a", "b"])[0].tolist()
    [0, 1, 0]
    """
    vals = values if isinstance(values, np.ndarray) else np.array(list(values), dtype=object)
    items = vals.tolist()
    uniq = list(dict.fromkeys(items))
    if len(uniq) <= 64:
        codes = np.zeros(len(items), dtype=np.int64)
        for i, u in enumerate(uniq[1:], 1):
            codes[vals == u] = i
        return codes, uniq
    index = {u: i for i, u in enumerate(uniq)}
    return np.fromiter(map(index.__getitem__, items), dtype=np.int64, count=len(items)), uniq


def combine(codes: Sequence[np.ndarray], sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Codes of several columns -> one dense code per distinct combination present, and each
    combination's per-column codes (shape: columns x combinations).

    >>> c, parts = combine([np.array([0, 1, 0]), np.array([2, 0, 2])], [2, 3])
    >>> c.tolist(), parts.tolist()
    ([0, 1, 0], [[0, 1], [2, 0]])
    """
    flat = np.zeros_like(codes[0], dtype=np.int64)
    for c, size in zip(codes, sizes, strict=True):
        flat = flat * size + c
    uniq, dense = np.unique(flat, return_inverse=True)
    parts = []
    rest = uniq.copy()
    for size in reversed(sizes):
        parts.append(rest % size)
        rest //= size
    return dense.reshape(-1), np.stack(parts[::-1])


def sum_by(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Sum of ``values`` per code (float64)."""
    return np.bincount(codes, weights=np.asarray(values, dtype=np.float64), minlength=n)


def count_by(codes: np.ndarray, mask: np.ndarray | None, n: int) -> np.ndarray:
    """Rows per code (where ``mask``)."""
    if mask is None:
        return np.bincount(codes, minlength=n)
    return np.bincount(codes[mask], minlength=n)


def quantiles_by(
    codes: np.ndarray, values: np.ndarray, n: int, qs: Sequence[float]
) -> list[list[float | None]]:
    """Quantiles (numpy's linear method) of ``values`` per code; +inf values are censored.

    A quantile that needs an infinite value (a failed request counted as never finishing) is
    None: the figure is "not reached", never computed from the successful rows alone.
    """
    values = np.asarray(values, dtype=np.float64)
    if n <= 256:  # few cells: a mask and a vectorised sort per cell
        return [quantiles(np.sort(values[codes == c]), qs, presorted=True) for c in range(n)]
    order = np.lexsort((values, codes))
    sorted_codes, sorted_vals = codes[order], values[order]
    bounds = np.searchsorted(sorted_codes, np.arange(n + 1))
    return [quantiles(sorted_vals[bounds[c] : bounds[c + 1]], qs, presorted=True) for c in range(n)]


def quantiles(
    values: np.ndarray, qs: Sequence[float], presorted: bool = False
) -> list[float | None]:
    """Linear-interpolated quantiles with +inf as censored (None); empty input gives Nones."""
    seg = np.asarray(values, dtype=np.float64)
    if seg.size == 0:
        return [None for _ in qs]
    if not presorted:
        seg = np.sort(seg)
    res: list[float | None] = []
    for q in qs:
        pos = q * (seg.size - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        a, b = seg[lo], seg[hi]
        if not (math.isfinite(a) and math.isfinite(b)):
            res.append(None)
        else:
            res.append(float(a + (b - a) * (pos - lo)))
    return res


def weighted_quantiles(
    values: np.ndarray, weights: np.ndarray, qs: Sequence[float]
) -> list[float | None]:
    """``quantiles(np.repeat(values, weights), qs)``: small integer weights (tokens per chunk)
    are repeated and sorted (numpy's vectorised sort), larger ones go through a cumulative sum.

    >>> weighted_quantiles(np.array([3.0, 1.0]), np.array([1, 3]), (0.5, 1.0))
    [1.0, 3.0]
    """
    values, weights = np.asarray(values), np.asarray(weights)
    if weights.size and int(weights.max()) <= 64:
        return quantiles(np.sort(np.repeat(values, weights)), qs, presorted=True)
    order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(weights[order])
    total = int(cum[-1]) if cum.size else 0
    if total == 0:
        return [None for _ in qs]
    res: list[float | None] = []
    for q in qs:
        pos = q * (total - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        a, b = (float(v[np.searchsorted(cum, j, side="right")]) for j in (lo, hi))
        res.append(a + (b - a) * (pos - lo) if math.isfinite(a) and math.isfinite(b) else None)
    return res


def fromiter(items: Sequence[Any], attr: str, dtype: Any = np.float64) -> np.ndarray:
    """One attribute of every item as an array; None becomes NaN (float) or 0 (int)."""
    if np.dtype(dtype).kind == "f":
        return np.fromiter(
            (np.nan if (v := getattr(it, attr)) is None else v for it in items),
            dtype=dtype,
            count=len(items),
        )
    return np.fromiter((getattr(it, attr) or 0 for it in items), dtype=dtype, count=len(items))


def ratio(num: float, den: float) -> float | None:
    """num / den, None when the denominator is zero (never a silent 0 or inf)."""
    return num / den if den else None
