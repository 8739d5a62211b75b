"""Choosing k the way vLLM's ``vllm bench sweep tune_speculative_k`` does, per group and load.

vLLM's method (benchmarks/sweep/tune_speculative_k.py), kept faithfully:

- at least ``min_runs`` (3) runs per candidate k; a run with a failed request is not a
  complete benchmark run (vLLM refuses the sweep; here the run is rejected and named);
- per candidate: median and MAD of the objective over its runs; relative MAD = MAD / |median|
  above ``max_relative_mad`` (0.1) marks the candidate unstable;
- conservative score = max(median - penalty x 1.4826 x MAD, 0) when maximising (1.4826 scales
  the MAD to a standard deviation under normality), median + penalty x 1.4826 x MAD when
  minimising;
- candidates whose score is within ``relative_tolerance`` (1%) of the best are tied (utility
  1.0) and the smallest k among the tied wins; k = 0 (plain) is a candidate like any other.

vLLM chooses per batch-size anchor; a pilot chooses per task group and load level (phase).

    >>> from specpilot.analysis.config import TuneKConfig
    >>> runs = [KRun(k, f"r{k}{i}", v) for k, vals in {0: [10, 10, 10], 2: [12, 12.5, 12.1],
    ...         3: [12.2, 12.3, 12.2]}.items() for i, v in enumerate(vals)]
    >>> c = choose_k(runs, TuneKConfig())   # k=2 scores 12.1 - 1.4826 x 0.1, k=3 12.2 (MAD 0)
    >>> c.chosen_k, round(c.vs_k0_percent, 1)
    (3, 22.0)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from specpilot.analysis.config import TuneKConfig

MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class KRun:
    """One complete run of one k in one scope: its objective (e.g. goodput in req/s)."""

    k: int
    run_id: str
    objective: float
    failed: int = 0  # scheduled requests of the run in this scope that did not end ok
    acceptance: float | None = None  # mean acceptance length, diagnostics only


@dataclass(frozen=True)
class KCandidate:
    k: int
    runs: int  # runs used
    rejected_runs: tuple[str, ...]  # run ids rejected for failed requests
    median: float | None
    mad: float | None
    relative_mad: float | None
    score: float | None  # conservative objective
    status: str  # ok | too_few_runs | unstable
    utility: float | None = None  # 1.0 within tolerance of the best, else score / best
    median_acceptance: float | None = None


@dataclass(frozen=True)
class KChoice:
    task_group: str
    phase: str
    chosen_k: int | None
    reason: str
    vs_k0_percent: float | None  # chosen score vs plain's, when k = 0 was measured
    candidates: tuple[KCandidate, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _candidate(
    k: int, runs: Sequence[KRun], cfg: TuneKConfig, direction: Literal["maximize", "minimize"]
) -> KCandidate:
    good = [r for r in runs if r.failed == 0]
    rejected = tuple(r.run_id for r in runs if r.failed > 0)
    accs = [r.acceptance for r in good if r.acceptance is not None]
    med_acc = statistics.median(accs) if accs else None
    if len(good) < cfg.min_runs:
        return KCandidate(
            k, len(good), rejected, None, None, None, None, "too_few_runs", None, med_acc
        )
    vals = [r.objective for r in good]
    med = statistics.median(vals)
    mad = statistics.median(abs(v - med) for v in vals)
    rel = mad / abs(med) if med else (0.0 if mad == 0 else float("inf"))
    penalty = cfg.uncertainty_penalty * MAD_TO_SD * mad
    score = max(med - penalty, 0.0) if direction == "maximize" else med + penalty
    status = "unstable" if rel > cfg.max_relative_mad else "ok"
    return KCandidate(k, len(good), rejected, med, mad, rel, score, status, None, med_acc)


def choose_k(
    runs: Sequence[KRun],
    cfg: TuneKConfig,
    *,
    direction: Literal["maximize", "minimize"] = "maximize",
    task_group: str = "*",
    phase: str = "*",
) -> KChoice:
    """The chosen k for one scope, with every candidate's figures and why others lost."""
    by_k: dict[int, list[KRun]] = {}
    for r in runs:
        by_k.setdefault(r.k, []).append(r)
    cands = [_candidate(k, rs, cfg, direction) for k, rs in sorted(by_k.items())]
    usable = [c for c in cands if c.status == "ok" and c.score is not None]
    if not usable:
        why = "; ".join(f"k={c.k}: {c.status} ({c.runs} usable runs)" for c in cands)
        return KChoice(
            task_group, phase, None, f"no candidate qualifies: {why}", None, tuple(cands)
        )
    scores = [c.score for c in usable if c.score is not None]
    best = max(scores) if direction == "maximize" else min(scores)
    if direction == "maximize" and best <= 0:
        return KChoice(task_group, phase, None, "no positive score", None, tuple(cands))
    out = []
    for c in cands:
        u = None
        if c in usable and c.score is not None:
            rel = (
                c.score / best if direction == "maximize" else (best / c.score if c.score else 0.0)
            )
            u = 1.0 if rel >= 1.0 - cfg.relative_tolerance else rel
        out.append(replace(c, utility=u))
    chosen = min((c for c in out if c.utility is not None), key=lambda c: (-(c.utility or 0), c.k))
    k0 = next((c for c in out if c.k == 0 and c.score), None)
    vs0 = None
    if k0 is not None and k0.score and chosen.score is not None:
        ratio = chosen.score / k0.score if direction == "maximize" else k0.score / chosen.score
        vs0 = 100.0 * (ratio - 1.0)
    tied = [c.k for c in out if c.utility == 1.0]
    reason = f"k={chosen.k}: conservative score {chosen.score:.4g}" + (
        f"; tied within {cfg.relative_tolerance:.0%} with k={tied}, smallest kept"
        if len(tied) > 1
        else ""
    )
    return KChoice(task_group, phase, chosen.k, reason, vs0, tuple(out))
