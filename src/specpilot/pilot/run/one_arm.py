"""``specpilot load``'s pilot: one arm, through the pilot's own lifecycle.

The arm is resolved as a pilot file's (``pilot.plan.engines.one_arm``), started, measured and
stopped by ``pilot.run.steps.ArmLife`` (the steps every pilot arm takes before its drill and its
checks), with the pilot's records: the arm's manifest and cold start, each phase's edges and
scrapes, every request as it finishes, ``completed_steps``. So its resume rule is the pilot's
too: a run given again by its run id starts its engine afresh, skips every complete phase and
replays a cut one from its start (what the cut phase had written is deleted first); a complete
run is not run again, and a run whose engine config changed is refused.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field, replace
from typing import Any

from specpilot.backends.freeze import strategy_of
from specpilot.backends.protocol import Backend
from specpilot.errors import ConfigError
from specpilot.pilot.config.settings import LoadSettings
from specpilot.pilot.eta.progress import PilotProgress
from specpilot.pilot.plan.arms import ArmPlan, arm_manifest
from specpilot.pilot.plan.engines import make_backend
from specpilot.pilot.run.context import RunPlan, new_record
from specpilot.pilot.run.steps import ArmLife
from specpilot.records import ArmRecord
from specpilot.store import Store
from specpilot.workload import Schedule


@dataclass
class OneArm:
    """The ``ArmContext`` of a one-arm pilot (``pilot.run.context``). ``run``: what the run replays
    and how (the load settings, the schedule's seed, the endpoint and role), kept in its
    manifest as ``load``; ``resumed``: the manifest a resumed run was started with (its engine
    and its ``load`` must be the same)."""

    store: Store
    schedule: Schedule
    settings: LoadSettings
    progress: PilotProgress
    admin_token: str = ""
    run: dict[str, Any] = field(default_factory=dict)
    resumed: dict[str, Any] | None = None

    @property
    def load_settings(self) -> LoadSettings:
        return self.settings

    def backend_for(
        self,
        plan: ArmPlan,
        *,
        overrides: dict[str, Any] | None = None,
        port: int | None = None,
        plain: bool = False,
        process: int = 0,
    ) -> Backend:

        if plain:
            raise ConfigError("a one-arm load does not switch its engine", fix="run a pilot")
        return make_backend(plan, overrides=overrides, port=port, process=process)

    def derived_overrides(self, plan: ArmPlan) -> dict[str, Any]:
        return {}  # no other arm to derive from

    def manifest(
        self, backend: Backend, plan: ArmPlan, overrides: dict[str, Any]
    ) -> dict[str, Any]:

        man = {**arm_manifest(backend.describe().to_dict(), plan, overrides), "load": self.run}
        was = self.resumed or {}
        if was.get("frozen_sha256") and man["frozen_sha256"] != was["frozen_sha256"]:
            raise ConfigError(
                f"the run was started with another engine config (frozen sha256 "
                f"{was['frozen_sha256'][:12]}, now {man['frozen_sha256'][:12]}): resuming it "
                "would mix two configs in one run",
                fix="give the same --engine and --engine-opt, or another --run-id",
            )
        before = was.get("load") or {}
        changed = sorted(k for k in set(before) | set(self.run) if before.get(k) != self.run.get(k))
        if before and changed:
            raise ConfigError(
                f"the run was started with other load settings ({', '.join(changed)}: "
                f"{', '.join(f'{before.get(k)!r} -> {self.run.get(k)!r}' for k in changed)}): "
                "resuming it would mix two replays in one run",
                fix="give the run's own options again, or another --run-id",
            )
        return man


def run_record(store: Store, pilot_id: str, plan: ArmPlan, run_id: str) -> tuple[ArmRecord, bool]:
    """The run's record and whether it is resumed: the one in the file, or a new one (next in
    run order). A complete run, or one of another arm, is refused with the field to change."""
    found = store.records("arms", run_id=run_id)
    if not found:
        run = RunPlan(plan, 0, len(store.records("arms")), run_id)
        rec = dataclasses.replace(
            new_record(run, pilot_id), status="running", started_unix=time.time()
        )
        return rec, False
    rec = found[0]
    if rec.status == "complete":
        raise ConfigError(
            f"run {run_id!r} is complete in this file: it is not run again",
            fix="give another --run-id (or leave it out: a new one is drawn)",
        )
    if (rec.arm, rec.engine) != (plan.name, plan.engine):
        raise ConfigError(
            f"run {run_id!r} in this file is arm {rec.arm!r} on {rec.engine}, not {plan.name!r} "
            f"on {plan.engine}",
            fix="give the run's own --arm and --engine to resume it, or another --run-id",
        )
    return rec, True


def measure(ctx: OneArm, run: RunPlan, rec: ArmRecord, *, warm: bool = False) -> ArmLife:
    """Start the arm, replay its phases not yet complete, stop it (whatever happened); the
    returned life's ``rec`` says what was done (``completed_steps``), ``result`` the last
    load run's. ``warm``: no warm-up requests (``--no-warmup``)."""
    life = ArmLife(ctx, run, rec)
    life.warm = warm
    life.start()
    try:
        life.save(
            replace(
                life.rec,
                manifest={**life.rec.manifest, "model_sent": life.model},
                # as served: the draft's sha256 (by URL: as its role declares it)
                strategy=strategy_of(life.rec.manifest)
                if run.arm.url is None
                else life.rec.strategy,
            )
        )
        life.load()
    finally:
        life.stop()
    return life


__all__ = ["OneArm", "measure", "run_record"]
