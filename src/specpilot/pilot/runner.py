"""The pilot as an object: plan the arms, run each on the identical schedule, then analyse.

    >>> from specpilot.pilot import Pilot, load_pilot, default_pilot_path   # doctest: +SKIP
    >>> result = Pilot(load_pilot(default_pilot_path(), quick=True), "runs/demo").run()  # doctest: +SKIP
    >>> result.verdict, result.files["html"]                                 # doctest: +SKIP

Order of work: every arm's plan is checked first (one switch at a time, R6) and the llama.cpp
draft file is exported, so a bad config fails before any engine starts. Arms never run at the
same time (they would share the cores); with ``repetitions > 1`` the order alternates
(A B C, then C B A) so that drift does not favour one arm. Each arm: start (cold start timed
apart), warm-up, the measured phases on the schedule's open-loop timeline with counters and
memory scraped at every phase edge, the rollback drill, the compatibility suite, the quality
pass, stop. A failing arm is recorded and the pilot goes on; Ctrl-C stops it, and running the
same command again resumes from the file without redoing finished phases.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specpilot.pilot.arms import ArmPlan, check_one_switch, plan_arms
from specpilot.pilot.config import PilotConfig
from specpilot.pilot.progress import PilotProgress


@dataclass
class RunPlan:
    """One execution of one arm: the unit the pilot file records (``run_id``)."""

    arm: ArmPlan
    repetition: int
    order: int
    run_id: str


@dataclass
class PilotResult:
    pilot_id: str
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    verdict: str | None = None
    summary: str = ""
    failed_arms: list[str] = field(default_factory=list)


def run_order(plans: list[ArmPlan], repetitions: int, pilot_id: str) -> list[RunPlan]:
    """Arms in config order, alternating direction per repetition (ABC, CBA, ABC...).

    Arms whose equal-budget derivation needs another arm's measurement run after it in every
    repetition: the alternative (``derive: kv_slots``) always follows its matched arm.

        >>> from types import SimpleNamespace as A
        >>> ps = [A(name=n, role=r, budget=A(matched_against=m)) for n, r, m in
        ...       (("b", "baseline", None), ("s", "speculative", None), ("a", "alternative", "s"))]
        >>> [(r.arm.name, r.repetition) for r in run_order(ps, 2, "p")]
        [('b', 0), ('s', 0), ('a', 0), ('s', 1), ('a', 1), ('b', 1)]
    """
    out: list[RunPlan] = []
    for rep in range(repetitions):
        arms = list(plans) if rep % 2 == 0 else list(reversed(plans))
        for p in list(arms):
            dep = p.budget.matched_against if p.role == "alternative" else None
            if dep is not None:
                arms.remove(p)
                arms.insert(arms.index(next(a for a in arms if a.name == dep)) + 1, p)
        for p in arms:
            out.append(RunPlan(p, rep, len(out), f"{pilot_id}.{p.name}.r{rep}"))
    return out


class Pilot:
    """Runs a validated :class:`PilotConfig` into ``out_dir`` (pilot.duckdb + the report)."""

    def __init__(
        self,
        cfg: PilotConfig,
        out_dir: str | Path,
        *,
        base_dir: str | Path | None = None,
        progress: PilotProgress | None = None,
    ) -> None:
        self.cfg = cfg
        self.out_dir = Path(out_dir)
        self.base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        self.progress = progress or PilotProgress()
        self.admin_token = secrets.token_hex(16)
        self.pinned_dtype: str | None = None
        self.llamacpp_drafts: dict[str, Path] = {}
        self.durations: list[float] = []

    # -- planning ------------------------------------------------------------------------
    def prepare(self) -> tuple[list[ArmPlan], Any]:
        """Check the arms (R6) and build the schedule; export drafts llama.cpp needs."""
        from specpilot.workload import build_schedule

        plans = plan_arms(self.cfg)
        check_one_switch(plans)
        wl = self.cfg.workload
        if isinstance(wl, str):
            schedule = build_schedule(wl)
        else:
            schedule = build_schedule(wl, base_dir=self.base_dir)
        for p in plans:
            o = getattr(p.spec, "options", None)
            if p.engine == "llamacpp" and p.url is None and o is not None and o.draft is not None:
                from specpilot.pilot.assets import llamacpp_draft_file

                self.progress.step(p.name, "exporting the draft to GGUF for llama.cpp")
                path = llamacpp_draft_file(o.draft, o.model)
                self.llamacpp_drafts[p.name] = path
                p.strategy.draft_sha256 = _sha256(path)
        return plans, schedule

    def eta(self, remaining: int, schedule_s: float) -> float:
        per_arm = (
            sum(self.durations) / len(self.durations) if self.durations else 40.0 + 1.6 * schedule_s
        )
        return per_arm * remaining


def _sha256(path: Path) -> str:
    from specpilot.backends.base import model_file

    mf = model_file("draft", path)
    return mf.sha256 if mf is not None and mf.sha256 else ""


def default_out_dir() -> Path:
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")


def quiet_default() -> bool:
    return bool(os.environ.get("CI"))
