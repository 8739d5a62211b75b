"""R2 per arm, group and phase from the store's per-request round aggregates (RequestRounds).

One definition each (DESIGN.md; the same as ``analysis.mechanism.rounds`` over raw rounds):

- acceptance rate = sum(accepted) / sum(proposed)
- mean acceptance length = sum(committed) / rounds (correction/bonus token included)
- acceptance at position i = rounds that accepted >= i / rounds that proposed >= i
- decode cost per committed token = sum(draft + verify + overhead) / sum(committed), each round's
  time already divided by its batch size; split into draft / verify / overhead shares
- decode speed-up = plain cost per token / speculative cost per token, plain taken from the
  baseline arm in the same group and phase (same window definition); its interval
  (``speedup_intervals``) resamples each arm's episodes (requests where the file has none),
  independently for the two arms, and is the estimate +- z x the resampled log ratio's sd (a
  normal interval on the bootstrap's spread): the requests of one episode share the machine's
  moment, so they are one unit. Descriptive: the verdict's own test is the task time

The pooled figures lean toward long completions (they hold more rounds), so each cell also
carries the per-request distribution: a histogram of per-request acceptance rates and the
quantiles of per-request mean acceptance length.

    >>> from specpilot.records import RequestRounds
    >>> rr = [RequestRounds("r1", "spec", "peak", "code", "q1", 10, 10, 40, 20, 30, 0.02, 0.1, 0.01,
    ...                     pos_proposed=[10, 10, 10, 10], pos_accepted=[8, 6, 4, 2])]
    >>> s = summarize_rounds(rr)[0]
    >>> s.acceptance_rate, s.mean_acceptance_length, s.acceptance_per_position
    (0.5, 3.0, (0.8, 0.6, 0.4, 0.2))
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specpilot.analysis.base.columns import (
    ALL,
    combine,
    count_by,
    factorize,
    fromiter,
    quantiles_by,
    sum_by,
)
from specpilot.analysis.base.fold import episode_key
from specpilot.definitions import acceptance_rate_from, mean_acceptance_length_from
from specpilot.records import DRILL_PHASE, RequestRounds

HIST_BINS = 10  # per-request acceptance rate in [0, 0.1), ..., [0.9, 1.0]
KEYS = ("arm", "task_group", "phase")
FLOAT_FIELDS = ("draft_s", "verify_s", "overhead_s", "mean_batch_size")
INT_FIELDS = ("rounds", "spec_rounds", "proposed", "accepted", "committed", "truncated_rounds")


@dataclass(frozen=True)
class RoundSummary:
    """R2 figures of one cell (``*`` marks a pooled dimension)."""

    arm: str
    task_group: str
    phase: str
    requests: int
    rounds: int
    spec_rounds: int
    proposed: int
    accepted: int
    committed: int
    draft_s: float
    verify_s: float
    overhead_s: float
    truncated_rounds: int
    mean_batch_size: float
    k: float | None  # mean drafts per speculative round
    full_accept_rounds: int | None  # None when k varied (then alpha is not estimated)
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    acceptance_per_position: tuple[float, ...]
    cost_per_token_s: float | None
    per_request_acceptance_hist: tuple[int, ...]  # requests per [j/10, (j+1)/10) bin
    per_request_mean_acceptance_rate: float | None
    per_request_mal_p10_p50_p90: tuple[float | None, ...]
    decode_speedup: float | None = None  # vs the baseline arm's cell (set by ``with_plain``)
    # its interval (``speedup_intervals``): episodes resampled
    decode_speedup_ci: tuple[float, float] | None = None

    @property
    def time_s(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s

    @property
    def shares(self) -> dict[str, float | None]:
        t = self.time_s
        return {
            "draft": self.draft_s / t if t else None,
            "verify": self.verify_s / t if t else None,
            "overhead": self.overhead_s / t if t else None,
        }

    @property
    def alpha(self) -> float | None:
        """Leviathan's per-token acceptance (``rounds.leviathan_alpha``): accepted / (accepted +
        rejecting rounds); needs a constant k (full accepts are counted at position k)."""
        if self.full_accept_rounds is None or self.spec_rounds == 0:
            return None
        rejections = self.spec_rounds - self.full_accept_rounds
        den = self.accepted + rejections
        return self.accepted / den if den else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(time_s=self.time_s, shares=self.shares, alpha=self.alpha)
        return d


def _pos_matrix(rr: Sequence[RequestRounds], attr: str, width: int) -> np.ndarray:
    m = np.zeros((len(rr), width), dtype=np.int64)
    for i, r in enumerate(rr):
        v = getattr(r, attr)
        if v:
            m[i, : len(v)] = v
    return m


@dataclass
class RoundsTable:
    """The per-request aggregates as columns (built once; summarised under several keys)."""

    labels: dict[str, np.ndarray]  # arm, task_group, phase (object arrays)
    col: dict[str, np.ndarray]
    pos_p: np.ndarray  # (requests, k_max)
    pos_a: np.ndarray
    # per request: its episode (``analysis.base.fold.episode_key``), or its own id outside the
    # episode design: the unit ``speedup_intervals`` resamples
    unit: np.ndarray | None = None

    @classmethod
    def build(cls, rr: Sequence[RequestRounds]) -> RoundsTable:
        """From records (one pass per field)."""
        cols: dict[str, Any] = {
            k: np.array([getattr(r, k) for r in rr], dtype=object) for k in (*KEYS, "request_id")
        }
        cols.update({a: fromiter(rr, a) for a in FLOAT_FIELDS})
        cols.update({a: fromiter(rr, a, np.int64) for a in INT_FIELDS})
        width = max((max(len(r.pos_proposed), len(r.pos_accepted)) for r in rr), default=0)
        cols["pos_proposed"] = _pos_matrix(rr, "pos_proposed", width)
        cols["pos_accepted"] = _pos_matrix(rr, "pos_accepted", width)
        return cls.from_columns(cols)

    @classmethod
    def from_columns(cls, cols: Mapping[str, Any]) -> RoundsTable:
        """From columns named like ``RequestRounds``' fields; ``pos_proposed``/``pos_accepted``
        as 2-D integer arrays (requests x positions, zero-padded), as DuckDB can return them."""
        missing = [c for c in (*KEYS, *FLOAT_FIELDS, *INT_FIELDS) if c not in cols]
        if missing:
            raise ValueError(f"round aggregate columns missing: {missing}")
        n = len(cols["arm"])
        pos = []
        for k in ("pos_proposed", "pos_accepted"):
            p = np.asarray(cols.get(k, np.zeros((n, 0))), dtype=np.int64)
            pos.append(p if p.ndim == 2 else p.reshape(n, -1 if n else 0))
        width = max(p.shape[1] for p in pos)
        # the rollback drill's replay is reported in the drill section, not as a phase
        keep = np.asarray(cols["phase"], dtype=object) != DRILL_PHASE
        pos = [np.pad(p, ((0, 0), (0, width - p.shape[1])))[keep] for p in pos]
        col = {a: np.asarray(cols[a], dtype=np.float64)[keep] for a in FLOAT_FIELDS}
        col.update({a: np.asarray(cols[a], dtype=np.int64)[keep] for a in INT_FIELDS})
        labels = {k: np.asarray(cols[k], dtype=object)[keep] for k in KEYS}
        unit = None
        if "request_id" in cols:
            ids = np.asarray(cols["request_id"], dtype=object)[keep].astype(str)
            unit = np.array([episode_key(x) or x for x in ids], dtype=object)
        return cls(labels, col, pos[0], pos[1], unit)

    def __len__(self) -> int:
        return int(self.col["rounds"].size)

    def codes(self, key: str) -> tuple[np.ndarray, list[Any]]:
        """Integer codes and labels of a key column (computed once)."""
        cache = self.__dict__.setdefault("_codes", {})
        if key not in cache:
            cache[key] = factorize(self.labels[key])
        return cache[key]


def summarize_rounds(
    rr: Sequence[RequestRounds] | RoundsTable, keys: Sequence[str] = KEYS
) -> list[RoundSummary]:
    """One ``RoundSummary`` per distinct value of ``keys`` (the others pooled as ``*``)."""
    t = rr if isinstance(rr, RoundsTable) else RoundsTable.build(rr)
    if len(t) == 0:
        return []
    parts = [t.codes(k) for k in keys]
    codes, combos = combine([c for c, _ in parts], [len(lab) for _, lab in parts])
    agg = _aggregate(t, codes, combos.shape[1])
    out = []
    for c in range(combos.shape[1]):
        key = {k: parts[j][1][combos[j, c]] for j, k in enumerate(keys)}
        out.append(_summary(key, agg, c))
    return out


def _aggregate(t: RoundsTable, codes: np.ndarray, n: int) -> dict[str, Any]:
    """Per-cell sums, position counts, k constancy and per-request distributions."""
    col, pos_p, pos_a = t.col, t.pos_p, t.pos_a
    width = pos_p.shape[1]
    agg: dict[str, Any] = {a: sum_by(codes, v, n) for a, v in col.items()}
    agg["requests"] = count_by(codes, None, n)
    agg["batch_w"] = sum_by(codes, col["mean_batch_size"] * col["rounds"], n)
    # (cells, positions); no position at all when no request of the file drafted anything
    agg["pos_p"] = _by_position(codes, pos_p, n)
    agg["pos_a"] = _by_position(codes, pos_a, n)
    # Full accepts (for alpha) are countable when every speculative round of a cell proposed
    # the same k: then they are the rounds that accepted >= k, pos_accepted[k-1].
    spec = col["spec_rounds"] > 0
    k_req = np.where(spec, col["proposed"] / np.maximum(col["spec_rounds"], 1), 0.0)
    k_int = np.clip(np.round(k_req).astype(np.int64), 1, max(width, 1))
    rows = np.arange(len(t))
    at_k = pos_p[rows, k_int - 1] if width else np.zeros(len(t), dtype=np.int64)
    const_k = spec & (k_req == k_int) & (at_k == col["spec_rounds"])
    full = np.where(const_k, pos_a[rows, k_int - 1] if width else 0, 0)
    agg["full"] = sum_by(codes, full, n)
    agg["k_unknown"] = (count_by(codes, spec & ~const_k, n) > 0) | _k_varies(codes, k_req, spec, n)
    # per-request acceptance over the requests that drafted (an engine that reports per-request
    # totals only, llama.cpp, has drafts but no speculative-round count)
    drafted = col["proposed"] > 0
    rate = np.where(drafted, col["accepted"] / np.maximum(col["proposed"], 1), 0.0)
    bins = np.minimum((rate * HIST_BINS).astype(np.int64), HIST_BINS - 1)
    agg["hist"] = np.bincount(
        codes[drafted] * HIST_BINS + bins[drafted], minlength=n * HIST_BINS
    ).reshape(n, HIST_BINS)
    agg["spec_requests"] = count_by(codes, drafted, n)
    agg["rate_sum"] = sum_by(codes, rate, n)
    has = col["rounds"] > 0
    mal = col["committed"][has] / col["rounds"][has]
    agg["mal_q"] = quantiles_by(codes[has], mal, n, (0.1, 0.5, 0.9))
    return agg


def _by_position(codes: np.ndarray, pos: np.ndarray, n: int) -> np.ndarray:
    width = pos.shape[1]
    if width == 0:
        return np.zeros((n, 0), dtype=np.float64)
    return np.stack([sum_by(codes, pos[:, j], n) for j in range(width)], axis=-1).reshape(n, width)


def _summary(key: dict[str, str], agg: dict[str, Any], c: int) -> RoundSummary:
    rounds, committed = int(agg["rounds"][c]), int(agg["committed"][c])
    proposed, spec_rounds = int(agg["proposed"][c]), int(agg["spec_rounds"][c])
    accepted = int(agg["accepted"][c])
    t = float(agg["draft_s"][c] + agg["verify_s"][c] + agg["overhead_s"][c])
    pp, pa = agg["pos_p"][c], agg["pos_a"][c]
    spec_req = int(agg["spec_requests"][c])
    return RoundSummary(
        arm=key.get("arm", ALL),
        task_group=key.get("task_group", ALL),
        phase=key.get("phase", ALL),
        requests=int(agg["requests"][c]),
        rounds=rounds,
        spec_rounds=spec_rounds,
        proposed=proposed,
        accepted=accepted,
        committed=committed,
        draft_s=float(agg["draft_s"][c]),
        verify_s=float(agg["verify_s"][c]),
        overhead_s=float(agg["overhead_s"][c]),
        truncated_rounds=int(agg["truncated_rounds"][c]),
        mean_batch_size=float(agg["batch_w"][c] / rounds) if rounds else 1.0,
        k=proposed / spec_rounds if spec_rounds else None,
        full_accept_rounds=None if agg["k_unknown"][c] or not spec_rounds else int(agg["full"][c]),
        acceptance_rate=acceptance_rate_from(accepted, proposed),
        mean_acceptance_length=mean_acceptance_length_from(committed, rounds),
        acceptance_per_position=tuple(float(a / p) for p, a in zip(pp, pa, strict=True) if p),
        cost_per_token_s=t / committed if committed else None,
        per_request_acceptance_hist=tuple(int(x) for x in agg["hist"][c]),
        per_request_mean_acceptance_rate=float(agg["rate_sum"][c] / spec_req) if spec_req else None,
        per_request_mal_p10_p50_p90=tuple(agg["mal_q"][c]),
    )


def _k_varies(codes: np.ndarray, k_req: np.ndarray, spec: np.ndarray, n: int) -> np.ndarray:
    """Per cell: do its speculative requests use different k?"""
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, codes[spec], k_req[spec])
    np.maximum.at(hi, codes[spec], k_req[spec])
    return (hi > lo) & np.isfinite(lo)


def with_plain(
    cells: Sequence[RoundSummary], baseline_arm: str, candidate_arms: Sequence[str] | None = None
) -> list[RoundSummary]:
    """Set ``decode_speedup`` = the baseline arm's cost per token / the cell's, matched on
    (group, phase). Cells without a matching baseline cell keep None."""
    from dataclasses import replace

    plain = {(c.task_group, c.phase): c for c in cells if c.arm == baseline_arm}
    out = []
    for c in cells:
        p = plain.get((c.task_group, c.phase))
        wanted = candidate_arms is None or c.arm in candidate_arms
        if c.arm != baseline_arm and wanted and p and p.cost_per_token_s and c.cost_per_token_s:
            c = replace(c, decode_speedup=p.cost_per_token_s / c.cost_per_token_s)
        out.append(c)
    return out


BUCKETS = 512  # above this many units in a cell, resample random buckets of them


def _resampled_cost(
    time_s: np.ndarray,
    committed: np.ndarray,
    resamples: int,
    rng: np.random.Generator,
    unit: np.ndarray | None = None,
) -> np.ndarray:
    """(resamples,) cost per committed token of resamples of the ``unit``s (each request's
    episode; None: the requests), a ratio of sums."""
    x = np.stack([time_s, committed.astype(np.float64)], axis=1)
    if unit is not None and unit.size:
        inv = np.unique(unit.astype(str), return_inverse=True)[1]
        x = np.stack([np.bincount(inv, weights=x[:, j]) for j in (0, 1)], axis=1)
    if x.shape[0] > BUCKETS:  # a ratio of sums: resampling buckets keeps its variance
        b = rng.permutation(x.shape[0]) % BUCKETS
        x = np.stack([np.bincount(b, weights=x[:, j], minlength=BUCKETS) for j in (0, 1)], 1)
    m = x.shape[0]
    idx = rng.integers(0, m, size=(resamples, m))
    sums = x[idx].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(sums[:, 0] / sums[:, 1])


def speedup_intervals(
    t: RoundsTable,
    baseline: str,
    candidates: Sequence[str],
    *,
    level: float,
    seed: int,
    resamples: int = 1000,
) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(arm, group, phase) -> interval of the decode speed-up against ``baseline`` (module
    docstring); ``*`` pools a dimension, as in ``summarize_rounds``."""
    from statistics import NormalDist

    if len(t) == 0:
        return {}
    arm, group, phase = (t.labels[k] for k in KEYS)
    cost_t = t.col["draft_s"] + t.col["verify_s"] + t.col["overhead_s"]
    committed = t.col["committed"]
    z = NormalDist().inv_cdf((1 + level) / 2)
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    cells = {(g, p) for g, p in zip(group.tolist(), phase.tolist(), strict=True)}
    cells |= {(g, ALL) for g, _ in cells} | {(ALL, ALL)}
    for cand in candidates:
        for g, p in sorted(cells):
            sel = np.ones(len(t), dtype=bool)
            if g != ALL:
                sel &= group == g
            if p != ALL:
                sel &= phase == p
            b, c = sel & (arm == baseline), sel & (arm == cand)
            if committed[b].sum() == 0 or committed[c].sum() == 0:
                continue
            rng = np.random.default_rng([seed, zlib.crc32(f"{baseline}|{cand}|{g}|{p}".encode())])
            ub, uc = (None, None) if t.unit is None else (t.unit[b], t.unit[c])
            ratio = _resampled_cost(cost_t[b], committed[b], resamples, rng, ub) / _resampled_cost(
                cost_t[c], committed[c], resamples, rng, uc
            )
            logs = np.log(ratio[np.isfinite(ratio) & (ratio > 0)])
            if logs.size < 10:
                continue
            est = np.log(
                (cost_t[b].sum() / committed[b].sum()) / (cost_t[c].sum() / committed[c].sum())
            )
            half = z * float(np.sqrt(logs.var(ddof=1)))
            out[(cand, g, p)] = (float(np.exp(est - half)), float(np.exp(est + half)))
    return out
