"""Per-group quality and consistency, and the gates that come before any speed figure (R7, R8).

Inputs are only the record fields: ``QualityRecord`` (severity key | minor, passed, reasons)
and ``ConsistencyRecord`` (identical, defect, margin). Acceptance rate is never a quality
metric and is not read here.

Gates for a candidate arm and a group:

- key gate: fails when the candidate's key-check pass rate is below the baseline arm's by more
  than ``tolerance`` (same group, same checks); with no baseline records, any key failure
  fails it (a key check has no allowance);
- consistency gate: fails when any greedy divergence of the candidate in the group is a
  ``defect`` (a divergence above the margin threshold); near-tie flips are recorded, not failed.

A group without records of a kind has that gate "no_data" (reported, not passed).

    >>> from specpilot.records import QualityRecord as Q
    >>> q = [Q("r", "base", "code", "p1", "tests", "code_tests", "key", True),
    ...      Q("r", "spec", "code", "p1", "tests", "code_tests", "key", False, ["tests fail: t1"])]
    >>> [g.key_gate for g in quality_gates(quality_cells(q, []), "base", "spec", 0.0)]
    ['fail']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specpilot.records import ConsistencyRecord, QualityRecord


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
    key_gate: str  # pass | fail | no_data
    consistency_gate: str  # pass | fail | no_data
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> bool:
        return "fail" in (self.key_gate, self.consistency_gate)

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


def quality_gates(
    cells: Sequence[QualityCell], baseline: str, candidate: str, tolerance: float
) -> list[QualityGate]:
    """The candidate's gates per group it has records for (see the module docstring)."""
    base = {c.task_group: c for c in cells if c.arm == baseline}
    out = []
    for c in cells:
        if c.arm != candidate:
            continue
        reasons: list[str] = []
        key = "no_data"
        if c.key_checks:
            b = base.get(c.task_group)
            floor = (b.key_pass_rate or 0.0) - tolerance if b and b.key_checks else 1.0
            key = "pass" if (c.key_pass_rate or 0.0) >= floor - 1e-12 else "fail"
            if key == "fail":
                ref = (
                    f"baseline {b.key_pass_rate:.1%}"
                    if b and b.key_pass_rate is not None
                    else "no allowance"
                )
                reasons.append(
                    f"key checks passed {c.key_passed}/{c.key_checks} ({c.key_pass_rate:.1%}; {ref})"
                    + (f": {c.top_reasons[0][0]}" if c.top_reasons else "")
                )
        cons = "no_data"
        if c.consistency_prompts:
            cons = "fail" if c.defects else "pass"
            if c.defects:
                reasons.append(
                    f"{c.defects} of {c.consistency_prompts} greedy outputs diverge above the margin threshold"
                )
        out.append(QualityGate(candidate, c.task_group, key, cons, tuple(reasons)))
    return out
