"""The quality gate of one candidate arm against the baseline (pure: records in, verdict out).

The gate fails on any of: a greedy divergence above the margin threshold (a defect, listed
by prompt); a sampled group whose outputs differ in distribution from the baseline's (Holm-
adjusted permutation tests); a key-error pass rate for which non-inferiority is not shown
although the test had the power to show it; a compatibility feature that passes in the
baseline and fails in the candidate. What cannot be concluded is said in ``notes``
(underpowered comparisons, groups checked for consistency only, features both arms fail).
Acceptance rate is not an input: it is never a quality metric.

    >>> v = gate([], [], baseline_arm="baseline", candidate_arm="speculative")
    >>> v.passed, v.reasons
    (True, [])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specpilot.quality.config import QualityConfig
from specpilot.quality.consistency import GreedySummary, greedy_consistency, summarise
from specpilot.quality.sampled import (
    DistributionTest,
    NonInferiority,
    PassRate,
    distribution_tests,
    non_inferiority,
    pass_rates,
)
from specpilot.records import CompatRecord, ConsistencyRecord, OutputRecord, QualityRecord


@dataclass
class QualityVerdict:
    baseline_arm: str
    candidate_arm: str
    passed: bool
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pass_rates: list[PassRate] = field(default_factory=list)
    non_inferiority: list[NonInferiority] = field(default_factory=list)
    greedy: list[GreedySummary] = field(default_factory=list)
    consistency: list[ConsistencyRecord] = field(default_factory=list)
    distribution: list[DistributionTest] = field(default_factory=list)
    compat: dict[str, tuple[str, str]] = field(default_factory=dict)  # feature -> (base, cand)


def _compat(records: Sequence[CompatRecord], base: str, cand: str, v: QualityVerdict) -> None:
    by = {(r.arm, r.feature): r for r in records}
    for feature in dict.fromkeys(r.feature for r in records):
        b, c = by.get((base, feature)), by.get((cand, feature))
        if c is None:
            continue
        v.compat[feature] = (b.status if b else "-", c.status)
        if c.status == "fail" and (b is None or b.status != "fail"):
            v.reasons.append(f"compat: {feature} fails in {cand}: {c.evidence}")
        elif c.status == "fail":
            v.notes.append(f"compat: {feature} fails in both arms")


def gate(
    quality: Sequence[QualityRecord],
    outputs: Sequence[OutputRecord],
    compat: Sequence[CompatRecord] = (),
    *,
    baseline_arm: str,
    candidate_arm: str,
    cfg: QualityConfig | None = None,
    pilot_id: str = "",
) -> QualityVerdict:
    cfg = cfg or QualityConfig()
    v = QualityVerdict(baseline_arm, candidate_arm, True)
    arms = (baseline_arm, candidate_arm)
    v.consistency = greedy_consistency(
        outputs, baseline_arm, candidate_arm, cfg.greedy_threshold, pilot_id
    )
    v.greedy = summarise(v.consistency)
    for g in v.greedy:
        for r in v.consistency:
            if r.task_group == g.task_group and r.defect:
                m = "unknown" if r.margin is None else f"{r.margin:.2f}"
                v.reasons.append(
                    f"{g.task_group}: greedy defect on {r.prompt_id} at token {r.divergence_index} "
                    f"({r.baseline_token!r} -> {r.candidate_token!r}, margin {m} > {cfg.greedy_threshold})"
                )
    v.distribution = distribution_tests(
        outputs,
        baseline_arm,
        candidate_arm,
        cfg.positions,
        cfg.span,
        cfg.alpha,
        cfg.permutations,
        cfg.seed,
    )
    for t in v.distribution:
        if t.differs:
            v.reasons.append(
                f"{t.task_group}: samples differ from the baseline ({t.test}, Holm p = {t.p_holm:.4f})"
            )
    v.pass_rates = [r for r in pass_rates(quality, cfg.alpha) if r.arm in arms]
    v.non_inferiority = non_inferiority(
        v.pass_rates, baseline_arm, cfg.margin, cfg.alpha, cfg.min_power
    )
    for ni in v.non_inferiority:
        if ni.candidate_arm != candidate_arm:
            continue
        if ni.conclusion == "inferior_not_excluded":
            v.reasons.append(
                f"{ni.task_group}: key-error pass rate not shown non-inferior (diff {ni.diff:+.3f}, "
                f"bound {ni.lower_bound:+.3f} <= -{ni.margin})"
            )
        elif ni.conclusion == "underpowered":
            v.notes.append(
                f"{ni.task_group}: n = {min(ni.n_baseline, ni.n_candidate)} per arm gives power "
                f"{ni.power:.2f} for a {ni.margin:.0%} margin; {ni.n_for_80 or '> 2000'} per arm needed"
            )
    weak = sorted({q.task_group for q in quality if q.isolation == "rlimits" and q.arm in arms})
    v.notes += [
        f"{g}: code ran under resource limits only (no network or file isolation here)"
        for g in weak
    ]
    only = sorted({q.task_group for q in quality if q.kind == "consistency_only" and q.arm in arms})
    v.notes += [f"{g}: no checks declared, compared between arms only" for g in only]
    _compat(compat, baseline_arm, candidate_arm, v)
    v.passed = not v.reasons
    return v
