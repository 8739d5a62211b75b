"""One execution of one arm as a sequence of recorded steps: start (cold start timed apart),
the measured phases, the rollback drill, the compatibility suite, the quality pass, stop.

Each step is added to ``ArmRecord.completed_steps`` when it is done, so a resumed pilot skips
it; the engine always stops, whatever happened.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from specpilot.loadgen.client import served_model
from specpilot.records import ArmRecord


class ArmSteps:
    """The steps of one arm, each recorded in ``ArmRecord.completed_steps`` when done."""

    def __init__(self, pilot: Any, run: Any, rec: ArmRecord) -> None:
        self.p = pilot
        self.run = run
        self.rec = rec

    def save(self, **changes: Any) -> None:
        self.rec = dataclasses.replace(self.rec, **changes)
        self.p.store.add_arm(self.rec)

    def done(self, step: str) -> None:
        self.save(completed_steps=[*self.rec.completed_steps, step])

    def execute(self) -> None:
        from specpilot.pilot import armrun

        p, plan = self.p, self.run.arm
        overrides = p.derived_overrides(plan)
        backend = p.backend_for(plan, overrides=overrides)
        p.progress.step(plan.name, "starting the engine (cold start)")
        t0 = time.perf_counter()
        backend.start(p.cfg.load.start_timeout_s)
        cold = time.perf_counter() - t0
        holder = {"backend": backend}
        try:
            manifest = p.manifest(backend, plan, overrides)
            self.save(
                status="running",
                manifest=manifest,
                manifest_sha256=manifest["frozen_sha256"],
                cold_start_s=self.rec.cold_start_s if self.rec.cold_start_s else cold,
                started_unix=self.rec.started_unix or time.time(),
            )
            url = backend.endpoint
            model = plan.spec.model_name or served_model(url)
            steps = set(self.rec.completed_steps)
            if armrun.LOAD_STEP not in steps:
                armrun.run_phases(p, self.run, backend, url, model, self.rec)
                self.done(armrun.LOAD_STEP)
            if "drill" not in steps and plan.strategy.kind != "none":
                if plan.drill:
                    armrun.run_drill(p, self.run, holder, url, model)
                else:
                    p.store.add_drills([armrun.not_drilled(self.run.run_id, plan)])
                self.done("drill")
            # the A/A control repeats the baseline's measurement only: its compatibility and
            # quality are the baseline's by construction (the same config, checked at planning)
            if plan.role == "control":
                steps |= {"compat", "quality"}
            if p.cfg.compat.enabled and "compat" not in steps:
                p.progress.step(plan.name, "compatibility suite")
                p.store.add_compat(p.gates.compat(holder["backend"], url, model, self.run))
                self.done("compat")
            if "quality" not in steps:
                p.progress.step(plan.name, "quality pass")
                p.store.add_outputs(p.gates.quality_pass(url, model, self.run, self.rec))
                self.done("quality")
            self.save(status="complete", finished_unix=time.time())
        finally:
            holder["backend"].stop()
