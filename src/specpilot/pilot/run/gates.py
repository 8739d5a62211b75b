"""The pilot's quality gates (R7), per arm and across arms, through ``specpilot.quality``.

Per arm, while its engine runs: the compatibility suite and the quality pass (greedy prompts
with log-probs, sampled prompts with seeds shared by every arm). Across arms, after the last
one: every business check recomputed on every stored answer, and greedy consistency of each
candidate against the arm it is compared with. The analysis turns these into the gates that
come before any speed figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from specpilot.pilot.config.file import PilotConfig
from specpilot.quality.compat import FEATURES, run_compat
from specpilot.quality.consistency import greedy_consistency
from specpilot.quality.recheck import recheck, resolve_groups
from specpilot.quality.runner import run_quality_pass
from specpilot.records import ArmRecord, CompatRecord, OutputRecord, PilotData
from specpilot.workload.config import WorkloadConfig
from specpilot.workload.resolve import resolve_group

if TYPE_CHECKING:
    from specpilot.quality.runner import QualityRequest
    from specpilot.records import ConsistencyRecord, QualityRecord
    from specpilot.workload.groups import TaskGroup


class Gates:
    def __init__(self, cfg: PilotConfig, base_dir: Path) -> None:
        self.cfg = cfg.quality
        self.compat_features = cfg.compat.features
        workload = cfg.workload_config()
        base_dir = cfg.workload_dir(base_dir)
        self.base_dir = base_dir
        self.groups = resolve_groups(workload, base_dir)
        self.task_groups = _task_groups(workload, base_dir)
        self._plan: list[QualityRequest] | None = None

    def plan(self) -> list[QualityRequest]:
        """The same prompts, seeds and limits for every arm."""
        if self._plan is None:
            from specpilot.quality.runner import plan_quality

            self._plan = plan_quality(self.task_groups, self.cfg)
        return self._plan

    def compat(
        self, url: str, model: str, rec: ArmRecord, headers: Mapping[str, str] | None = None
    ) -> list[CompatRecord]:

        features = self.compat_features or FEATURES
        return run_compat(
            url, arm=rec.arm, run_id=rec.run_id, model=model, features=features, headers=headers
        )

    def quality_pass(
        self, url: str, model: str, rec: ArmRecord, headers: Mapping[str, str] | None = None
    ) -> list[OutputRecord]:
        """``headers``: the endpoint's credentials (an arm by URL)."""
        return run_quality_pass(
            url,
            model,
            self.plan(),
            arm=rec.arm,
            run_id=rec.run_id,
            manifest_sha256=rec.manifest_sha256,
            cfg=self.cfg,
            headers=headers,
        )

    def cross_arm(
        self, data: PilotData, pairs: list[tuple[str, str]]
    ) -> tuple[list[QualityRecord], list[ConsistencyRecord]]:
        """(QualityRecords for every stored answer, ConsistencyRecords per compared pair)."""
        quality = recheck(data, self.groups, self.cfg.sandbox.limits())
        consistency = []
        for base, cand in pairs:
            consistency += greedy_consistency(
                data.outputs, base, cand, self.cfg.greedy_threshold, data.pilot.pilot_id
            )
        return quality, consistency


def _task_groups(workload: WorkloadConfig, base_dir: Path) -> list[TaskGroup]:
    """The workload's groups as the schedule resolves them (its length and sampling overrides)."""
    return [resolve_group(name, gm, Path(base_dir)) for name, gm in workload.groups.items()]
