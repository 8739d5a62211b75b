"""Recompute every business check from stored outputs (``specpilot quality RUN.duckdb``).

``recheck(data, groups)`` reads the answers a pilot kept, the load phases' requests (status
ok, ``output_text``) and the quality pass's ``OutputRecord``s, and returns one
``QualityRecord`` per check per answer. A group without any declared check gets one
``consistency_only`` record per answer (it is then judged by the arm comparison alone, and
the results say so). Quality-pass samples cut short on purpose (``max_tokens`` below the
group's own length) feed the distribution tests only: checks on a truncated answer would
fail for a reason the arms share. Identical answers to the same prompt are checked once
(greedy arms often agree byte for byte; the sandbox is the slow part).

    >>> from specpilot.records import PilotData, PilotRecord, RequestRecord
    >>> from specpilot.workload.groups import load_group
    >>> req = RequestRecord("r1", "base", "peak", "structured", "peak-000001", 0.0, "ok",
    ...     prompt_id="struct-001", output_text='{"name": "Amina Okafor"}')
    >>> data = PilotData(PilotRecord("p", "p", {}, "", "0", 0.0), requests=[req])
    >>> recs = recheck(data, {"structured": group_checks(load_group("structured"))})
    >>> [(r.check_name, r.passed) for r in recs]
    [('schema_valid', False), ('expected_fields', False), ('json_only', True)]
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from specpilot.quality.checks import (
    Check,
    CheckError,
    CheckResult,
    GroupChecks,
    group_checks,
    run_check,
)
from specpilot.quality.sandbox import SandboxLimits
from specpilot.records import OutputRecord, PilotData, QualityRecord
from specpilot.workload.config import WorkloadConfig, parse_workload
from specpilot.workload.groups import BUILTIN_GROUPS, load_group

CONSISTENCY_ONLY = "consistency_only"


def resolve_groups(
    workload: WorkloadConfig | Mapping[str, Any] | None = None, base_dir: str | Path = "."
) -> dict[str, GroupChecks]:
    """The checks of every group of a workload (its YAML's ``checks`` added to a built-in
    group's own); no workload: the four built-in groups."""
    if workload is None:
        return {name: group_checks(load_group(name)) for name in BUILTIN_GROUPS}
    cfg = workload if isinstance(workload, WorkloadConfig) else parse_workload(dict(workload))
    from specpilot.workload.resolve import resolve_group

    out = {}
    for name, gm in cfg.groups.items():
        group = resolve_group(name, gm, Path(base_dir))
        out[name] = group_checks(group, gm.checks)
        out[name].validate()
    return out


class _Checker:
    """Runs checks with a cache keyed by (group, prompt, check, answer hash)."""

    def __init__(
        self, groups: Mapping[str, GroupChecks], limits: SandboxLimits | None, isolation: str
    ):
        self.groups, self.limits, self.isolation = groups, limits, isolation
        self.cache: dict[tuple[str, str, str, str], CheckResult] = {}

    def checks(self, group: str, prompt_id: str) -> list[Check] | str:
        g = self.groups.get(group)
        if g is None or not g.declared:
            return CONSISTENCY_ONLY
        try:
            return g.for_prompt(prompt_id)
        except CheckError as exc:
            return f"unresolved: {exc}"

    def run(self, group: str, prompt_id: str, text: str) -> list[CheckResult] | str:
        checks = self.checks(group, prompt_id)
        if isinstance(checks, str):
            return checks
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        out = []
        for c in checks:
            key = (group, prompt_id, c.name, digest)
            if key not in self.cache:
                self.cache[key] = run_check(c, text, self.limits, self.isolation)
            out.append(self.cache[key])
        return out


def _records(results: list[CheckResult] | str, base: dict[str, Any]) -> list[QualityRecord]:
    if results == CONSISTENCY_ONLY:
        return [
            QualityRecord(
                **base,
                check_name=CONSISTENCY_ONLY,
                kind=CONSISTENCY_ONLY,
                severity="minor",
                passed=True,
                reasons=["no checks declared for this group: compared between arms only"],
            )
        ]
    if isinstance(results, str):
        return [
            QualityRecord(
                **base,
                check_name="unresolved",
                kind="unresolved",
                severity="minor",
                passed=False,
                reasons=[results],
            )
        ]
    return [
        QualityRecord(
            **base,
            check_name=r.name,
            kind=r.kind,
            severity=r.severity,
            passed=r.passed,
            reasons=list(r.reasons),
            score=r.score,
            isolation=r.isolation,
            detail=dict(r.detail),
        )
        for r in results
    ]


def is_capped(o: OutputRecord, groups: Mapping[str, GroupChecks]) -> bool:
    """A quality-pass sample cut by a cap below its group's own length."""
    if o.finish_reason != "length" or o.max_tokens is None:
        return False
    g = groups.get(o.task_group)
    own = g.min_tokens if g is not None else None
    return own is not None and o.max_tokens < own


def recheck(
    data: PilotData,
    groups: Mapping[str, GroupChecks],
    limits: SandboxLimits | None = None,
    isolation: str = "auto",
    include: Iterable[str] = ("requests", "outputs"),
) -> list[QualityRecord]:
    """Every check on every stored answer (load requests with status ok, quality-pass outputs)."""
    want = set(include)
    checker = _Checker(groups, limits, isolation)
    sha = {a.run_id: a.manifest_sha256 for a in data.arms}
    out: list[QualityRecord] = []
    if "requests" in want:
        for r in data.requests:
            if r.status != "ok" or r.output_text is None or r.warmup:
                continue
            base: dict[str, Any] = dict(
                run_id=r.run_id,
                arm=r.arm,
                task_group=r.task_group,
                prompt_id=r.prompt_id,
                request_id=r.request_id,
                manifest_sha256=sha.get(r.run_id, ""),
            )
            out += _records(checker.run(r.task_group, r.prompt_id, r.output_text), base)
    if "outputs" in want:
        for o in data.outputs:
            if o.error is not None or is_capped(o, groups):
                continue
            base2: dict[str, Any] = dict(
                run_id=o.run_id,
                arm=o.arm,
                task_group=o.task_group,
                prompt_id=o.prompt_id,
                sample_index=o.sample_index,
                seed=o.seed,
                manifest_sha256=o.manifest_sha256 or sha.get(o.run_id, ""),
            )
            out += _records(checker.run(o.task_group, o.prompt_id, o.text), base2)
    return out
