"""The quality gate of one candidate arm against the baseline (pure: records in, verdict out).

The one quality gate of specpilot: ``specpilot quality`` prints it and the pilot's verdict
(``analysis.verdicts.quality``) uses it, per task group.

The gate fails on any of: a greedy divergence above the margin threshold (a defect, listed
by prompt); a sampled group whose outputs differ in distribution from the baseline's (Holm-
adjusted permutation tests); a key-error pass rate significantly below the baseline's, or for
which non-inferiority is not shown although the test had the power to show it; a
compatibility feature that passes in the baseline and fails in the candidate. What cannot be
concluded is said in ``notes`` (underpowered comparisons, checks the baseline itself fails
too often to tell anything, groups checked for consistency only, features both arms fail).
``failures`` keeps each reason with its task group ("*": every group, e.g. compat).
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
    failures: list[tuple[str, str]] = field(default_factory=list)  # (group or "*", reason)
    group_notes: list[tuple[str, str]] = field(default_factory=list)  # (group or "*", note)

    def fail(self, group: str, reason: str) -> None:
        self.reasons.append(reason)
        self.failures.append((group, reason))

    def note(self, group: str, text: str) -> None:
        self.notes.append(text)
        self.group_notes.append((group, text))


def _compat(records: Sequence[CompatRecord], base: str, cand: str, v: QualityVerdict) -> None:
    by = {(r.arm, r.feature): r for r in records}
    for feature in dict.fromkeys(r.feature for r in records):
        b, c = by.get((base, feature)), by.get((cand, feature))
        if c is None:
            continue
        v.compat[feature] = (b.status if b else "-", c.status)
        if c.status == "fail" and (b is None or b.status != "fail"):
            v.fail("*", f"compat: {feature} fails in {cand}: {c.evidence}")
        elif c.status == "fail":
            v.note("*", f"compat: {feature} fails in both arms")


def _key_checks(v: QualityVerdict, cfg: QualityConfig) -> None:
    """Each group's non-inferiority conclusion as a failure (inferior) or a note (no gate)."""
    rate = {(r.arm, r.task_group): r for r in v.pass_rates}
    for ni in v.non_inferiority:
        if ni.candidate_arm != v.candidate_arm:
            continue
        g = ni.task_group
        b, c = rate[(v.baseline_arm, g)], rate[(v.candidate_arm, g)]
        passed = f"{g}: key checks passed {c.passed}/{c.n} vs the baseline's {b.passed}/{b.n}"
        top = f": {next(iter(c.reasons))}" if c.reasons else ""
        if ni.conclusion == "inferior":
            why = f"significantly fewer (upper bound of the difference {ni.upper_bound:+.3f} < 0)"
            v.fail(g, f"{passed}, {why}{top}")
        elif ni.conclusion == "inferior_not_excluded":
            why = f"diff {ni.diff:+.3f}, bound {ni.lower_bound:+.3f} <= -{ni.margin}"
            v.fail(g, f"{passed}, not shown non-inferior ({why}){top}")
        elif ni.conclusion == "underpowered":
            need = ni.n_for_80 or "> 2000"
            v.note(
                g,
                f"{g}: n = {min(ni.n_baseline, ni.n_candidate)} per arm gives power "
                f"{ni.power:.2f} for a {ni.margin:.0%} margin; {need} per arm needed",
            )
        elif ni.conclusion == "uninformative":
            v.note(
                g,
                f"{g}: key checks uninformative: the baseline passes {b.passed}/{b.n} (< "
                f"{cfg.uninformative_below:.0%}), so they cannot tell a worse arm apart; not a gate",
            )


def _logprobs_broken(records: Sequence[CompatRecord], arm: str) -> str:
    r = next((c for c in records if c.arm == arm and c.feature == "logprobs"), None)
    return r.evidence if r is not None and r.status == "fail" else ""


def not_comparable(records: Sequence[CompatRecord], arm: str, target_logprobs: bool) -> str:
    """Why ``arm``'s reported log-probs cannot be compared with the baseline's (empty: they
    can): its logprobs compatibility check failed, or it was not run (or not passed) on an
    engine not known to report the target's own log-probs under speculation."""
    broken = _logprobs_broken(records, arm)
    if broken:
        return f"{arm}'s log-probs fail the compatibility check ({broken})"
    r = next((c for c in records if c.arm == arm and c.feature == "logprobs"), None)
    if target_logprobs or (r is not None and r.status == "pass"):
        return ""
    state = "was not run" if r is None else f"ended {r.status}"
    return (
        f"{arm}'s engine is not known to report the target's own log-probs under speculation, "
        f"and its logprobs compatibility check {state} (add logprobs to compat.features)"
    )


def gate(
    quality: Sequence[QualityRecord],
    outputs: Sequence[OutputRecord],
    compat: Sequence[CompatRecord] = (),
    *,
    baseline_arm: str,
    candidate_arm: str,
    cfg: QualityConfig | None = None,
    pilot_id: str = "",
    consistency: Sequence[ConsistencyRecord] | None = None,
    target_logprobs: bool = False,
) -> QualityVerdict:
    """``consistency``: the pair's greedy comparisons already computed (the pilot stores them,
    made by the same ``greedy_consistency``); None: computed here from ``outputs``;
    ``target_logprobs``: the candidate's engine reports the target's own log-probs under
    speculation (``EngineAdapter.target_logprobs``), else its log-prob tests need its
    logprobs compatibility check passed."""
    cfg = cfg or QualityConfig()
    v = QualityVerdict(baseline_arm, candidate_arm, True)
    arms = (baseline_arm, candidate_arm)
    v.consistency = (
        [c for c in consistency if c.candidate_arm == candidate_arm]
        if consistency is not None
        else greedy_consistency(
            outputs, baseline_arm, candidate_arm, cfg.greedy_threshold, pilot_id
        )
    )
    _greedy(v, cfg)
    _distribution(v, outputs, compat, cfg, target_logprobs)
    v.pass_rates = [r for r in pass_rates(quality, cfg.alpha) if r.arm in arms]
    v.non_inferiority = non_inferiority(
        v.pass_rates, baseline_arm, cfg.margin, cfg.alpha, cfg.min_power, cfg.uninformative_below
    )
    _key_checks(v, cfg)
    _how_checked(v, quality)
    _compat(compat, baseline_arm, candidate_arm, v)
    v.passed = not v.reasons
    return v


def _greedy(v: QualityVerdict, cfg: QualityConfig) -> None:
    """The greedy comparisons summarised per group; each defect (a divergence where the
    target's margin exceeds the threshold) a failure of its group."""
    v.greedy = summarise(v.consistency)
    for g in v.greedy:
        for r in v.consistency:
            if r.task_group == g.task_group and r.defect:
                m = "unknown" if r.margin is None else f"{r.margin:.2f}"
                v.fail(
                    g.task_group,
                    f"{g.task_group}: greedy defect on {r.prompt_id} at token {r.divergence_index} "
                    f"({r.baseline_token!r} -> {r.candidate_token!r}, margin {m} > {cfg.greedy_threshold})",
                )


def _distribution(
    v: QualityVerdict,
    outputs: Sequence[OutputRecord],
    compat: Sequence[CompatRecord],
    cfg: QualityConfig,
    target_logprobs: bool,
) -> None:
    """The sampled outputs' distribution tests (the log-prob ones only where comparable); a
    group whose samples differ from the baseline's fails."""
    # the log-prob statistics assume both arms report the target's log-probs alike: where
    # that is not known, they measure the engine's reporting, not the outputs
    why = not_comparable(compat, v.candidate_arm, target_logprobs)
    v.distribution = distribution_tests(
        outputs,
        v.baseline_arm,
        v.candidate_arm,
        cfg.positions,
        cfg.span,
        cfg.alpha,
        cfg.permutations,
        cfg.seed,
        logprob_tests=not why,
    )
    if why:
        v.note(
            "*",
            f"log-prob distribution tests left out, not comparable: {why}; the "
            "emitted-token tests stand",
        )
    for t in v.distribution:
        if t.differs:
            v.fail(
                t.task_group,
                f"{t.task_group}: samples differ from the baseline ({t.test}, Holm p = {t.p_holm:.4f})",
            )


def _how_checked(v: QualityVerdict, quality: Sequence[QualityRecord]) -> None:
    """Notes for the groups whose code ran under resource limits only, and for those with no
    checks declared (compared between arms only)."""
    arms = (v.baseline_arm, v.candidate_arm)
    weak = sorted({q.task_group for q in quality if q.isolation == "rlimits" and q.arm in arms})
    for grp in weak:
        v.note(
            grp, f"{grp}: code ran under resource limits only (no network or file isolation here)"
        )
    only = sorted({q.task_group for q in quality if q.kind == "consistency_only" and q.arm in arms})
    for grp in only:
        v.note(grp, f"{grp}: no checks declared, compared between arms only")
