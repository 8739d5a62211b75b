"""Per-group quality and consistency, and the gates that come before any speed figure (R7, R8).

The cells (``quality_cells``) describe: pass rates, top failure reasons, greedy identity. The
*gate* is ``specpilot.quality.summary.gate``, the one quality gate of specpilot (the same
``specpilot quality`` prints), split here per task group:

- key gate: the key-error pass rate against the baseline's as a non-inferiority test (margin
  and alpha from the pilot's ``quality:`` config): "pass" (non-inferior), "fail" (significantly
  below the baseline, or non-inferiority not shown at adequate power), "underpowered" or
  "uninformative" (the baseline itself passes less often than ``uninformative_below``): the
  last two are reported and never gate;
- consistency gate: "fail" when a greedy divergence of the candidate in the group is a defect
  (above the margin threshold); near-tie flips are recorded, not failed;
- distribution gate: "fail" when seeded samples differ in distribution from the baseline's;
- compat gate: "fail" when a feature the baseline passes fails in the candidate (every group).

A group without records of a kind has that gate "no_data" (reported, not passed). ``carried``
names the checks that decided the gate. Acceptance rate is never a quality metric.

    >>> from specpilot.records import PilotData, PilotRecord, QualityRecord as Q
    >>> q = [Q("r", "base", "code", f"p{i}", "tests", "code_tests", "key", True) for i in range(12)]
    >>> q += [Q("r", "spec", "code", f"p{i}", "tests", "code_tests", "key", i < 3) for i in range(12)]
    >>> g = quality_gates(PilotData(PilotRecord("p", "d", {}, "", "0", 0.0), quality=q), "base", "spec")
    >>> [(x.task_group, x.key_gate) for x in g]
    [('code', 'fail')]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specpilot.quality.config import QualityConfig
from specpilot.quality.summary import QualityVerdict, gate
from specpilot.records import ConsistencyRecord, PilotData, QualityRecord


@dataclass(frozen=True)
class QualityCell:
    arm: str
    task_group: str
    key_checks: int = 0
    key_passed: int = 0
    minor_checks: int = 0
    minor_passed: int = 0
    top_reasons: tuple[tuple[str, int], ...] = ()  # most frequent failure reasons
    consistency_prompts: int = 0
    identical: int = 0
    defects: int = 0
    near_tie_flips: int = 0

    @property
    def key_pass_rate(self) -> float | None:
        return self.key_passed / self.key_checks if self.key_checks else None

    @property
    def minor_pass_rate(self) -> float | None:
        return self.minor_passed / self.minor_checks if self.minor_checks else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(key_pass_rate=self.key_pass_rate, minor_pass_rate=self.minor_pass_rate)
        return d


@dataclass(frozen=True)
class QualityGate:
    arm: str
    task_group: str
    key_gate: str  # pass | fail | underpowered | uninformative | no_data
    consistency_gate: str  # pass | fail | no_data
    reasons: tuple[str, ...] = field(default_factory=tuple)
    distribution_gate: str = "no_data"  # pass | fail | no_data
    compat_gate: str = "no_data"  # pass | fail | no_data (the arm's, for every group)
    notes: tuple[str, ...] = field(default_factory=tuple)
    carried: tuple[str, ...] = field(default_factory=tuple)  # the checks that decided it

    @property
    def failed(self) -> bool:
        gates = (self.key_gate, self.consistency_gate, self.distribution_gate, self.compat_gate)
        return "fail" in gates

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["failed"] = self.failed
        return d


def quality_cells(
    quality: Sequence[QualityRecord], consistency: Sequence[ConsistencyRecord]
) -> list[QualityCell]:
    """One cell per (arm, group) that has quality or consistency records."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}

    def cell(arm: str, group: str) -> dict[str, Any]:
        return acc.setdefault((arm, group), {"reasons": Counter()})

    for q in quality:
        d = cell(q.arm, q.task_group)
        kind = "key" if q.severity == "key" else "minor"
        d[f"{kind}_checks"] = d.get(f"{kind}_checks", 0) + 1
        d[f"{kind}_passed"] = d.get(f"{kind}_passed", 0) + int(q.passed)
        if not q.passed:
            d["reasons"].update(q.reasons or [f"{q.check_name} failed"])
    for r in consistency:
        d = cell(r.candidate_arm, r.task_group)
        d["consistency_prompts"] = d.get("consistency_prompts", 0) + 1
        d["identical"] = d.get("identical", 0) + int(r.identical)
        d["defects"] = d.get("defects", 0) + int(r.defect)
        d["near_tie_flips"] = d.get("near_tie_flips", 0) + int(not r.identical and not r.defect)
    out = []
    for (arm, group), d in sorted(acc.items()):
        reasons = d.pop("reasons")
        out.append(QualityCell(arm, group, **d, top_reasons=tuple(reasons.most_common(3))))
    return out


KEY_GATE = {
    "non_inferior": "pass",
    "inferior": "fail",
    "inferior_not_excluded": "fail",
    "underpowered": "underpowered",
    "uninformative": "uninformative",
}


def reports_target_logprobs(data: PilotData, arm: str) -> bool:
    """Whether ``arm``'s engine is known to report the target's own log-probs under
    speculation (``EngineAdapter.target_logprobs``): the gate then compares them without the
    compatibility suite's logprobs check."""
    from specpilot.backends.adapters import adapter_of

    rec = next((a for a in data.arms if a.arm == arm), None)
    engine = adapter_of(rec.engine) if rec is not None else None
    return engine is not None and engine.target_logprobs


def quality_gates(
    data: PilotData, baseline: str, candidate: str, cfg: QualityConfig | None = None
) -> list[QualityGate]:
    """The candidate's gates per group, from ``quality.summary.gate`` (module docstring)."""
    if cfg is None:
        cfg = QualityConfig.model_validate(dict(data.pilot.config or {}).get("quality") or {})
    v = gate(
        data.quality,
        data.outputs,
        data.compat,
        baseline_arm=baseline,
        candidate_arm=candidate,
        cfg=cfg,
        pilot_id=data.pilot.pilot_id,
        target_logprobs=reports_target_logprobs(data, candidate),
        consistency=[c for c in data.consistency if c.baseline_arm == baseline]
        if data.consistency
        else None,
    )
    groups = sorted(
        {q.task_group for q in data.quality if q.arm == candidate}
        | {c.task_group for c in v.consistency}
        | {t.task_group for t in v.distribution}
    )
    return [_group_gate(v, g) for g in groups]


def _group_gate(v: QualityVerdict, group: str) -> QualityGate:
    ni = next(
        (
            n
            for n in v.non_inferiority
            if n.task_group == group and n.candidate_arm == v.candidate_arm
        ),
        None,
    )
    key = KEY_GATE.get(ni.conclusion, "no_data") if ni is not None else "no_data"
    cons = [c for c in v.consistency if c.task_group == group]
    cons_gate = ("fail" if any(c.defect for c in cons) else "pass") if cons else "no_data"
    dist = [t for t in v.distribution if t.task_group == group]
    dist_gate = ("fail" if any(t.differs for t in dist) else "pass") if dist else "no_data"
    compat_gate = (
        ("fail" if any(g == "*" for g, _ in v.failures) else "pass") if v.compat else "no_data"
    )
    carried = []
    if ni is not None and key in ("pass", "fail"):
        carried.append(f"key checks ({ni.n_baseline} vs {ni.n_candidate} outputs, {ni.test})")
    if cons:
        carried.append(f"greedy consistency ({_n(len(cons), 'prompt')})")
    if dist:
        carried.append(f"distribution tests ({_n(len(dist), 'test')})")
    if v.compat:
        carried.append(f"compatibility ({len(v.compat)} features)")
    return QualityGate(
        v.candidate_arm,
        group,
        key,
        cons_gate,
        tuple(r for g, r in v.failures if g in (group, "*")),
        dist_gate,
        compat_gate,
        tuple(n for g, n in v.group_notes if g in (group, "*")),
        tuple(carried),
    )


def _n(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")
