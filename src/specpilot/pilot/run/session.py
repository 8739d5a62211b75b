"""The pilot while it runs: the ``PilotContext`` its arms' steps, the episode design and the
ETA's plan call, built whole once the pilot file is open (its store, gates, schedule and every
arm's plan given at construction, nothing set later). The runner (``pilot.run.runner``) prepares
what it holds; the per-arm helpers here start each arm's backend, record its manifest and its
failures, and read back what the pilot file says of a run.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from specpilot.backends.adapters import adapter_of
from specpilot.backends.protocol import Backend
from specpilot.pilot.config.file import PilotConfig
from specpilot.pilot.config.settings import LoadSettings
from specpilot.pilot.eta.progress import PilotProgress
from specpilot.pilot.plan.arms import ArmPlan, arm_manifest
from specpilot.pilot.plan.engines import make_backend
from specpilot.pilot.plan.runplans import derive_kv_slots, plain_overrides
from specpilot.pilot.run.context import RunPlan, new_record
from specpilot.pilot.run.gates import Gates
from specpilot.records import ArmRecord, MetricSnapshot
from specpilot.store import Store
from specpilot.workload import Schedule


class PilotSession:
    """One running pilot (``PilotContext``): its config, the pilot file's store, the gates,
    every arm's plan and prepared files, the capacity probe's figures, the schedule as planned
    (``level_schedule``, the drill replays one of its levels) and as replayed (``schedule``,
    each level cut into episodes)."""

    def __init__(
        self,
        cfg: PilotConfig,
        *,
        store: Store,
        gates: Gates,
        plans: list[ArmPlan],
        files: dict[str, dict[str, str]],
        capacity: dict[str, Any] | None,
        level_schedule: Schedule,
        schedule: Schedule,
        progress: PilotProgress,
        admin_token: str,
        started: float,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.gates = gates
        self.plans = plans
        self.files = files  # arm -> option -> the file prepared for it (pilot.plan.assets)
        self.capacity = capacity  # the capacity probe's figures (None: not probed)
        self.level_schedule = level_schedule
        self.schedule = schedule
        self.progress = progress
        self.admin_token = admin_token  # the builtin servers' runtime switch (their environment)
        self.started = started  # perf_counter at the pilot's start: the budget counts from it
        self.overrides: dict[str, dict[str, Any]] = {}  # arm -> options derived at its start

    @property
    def load_settings(self) -> LoadSettings:
        return self.cfg.load

    def record_failure(self, run: RunPlan, exc: BaseException) -> None:
        """The arm's run as failed, with the error, in the pilot file and on the terminal."""
        err = f"{type(exc).__name__}: {exc}"
        self.progress.note(f"arm {run.arm.name} failed: {err}")
        self.progress.clock.drop_run(run.run_id)  # its steps still to come: out of the ETA
        latest = self.arm_record(run)
        self.store.add_arm(
            dataclasses.replace(
                latest, status="failed", error=err[:2000], finished_unix=time.time()
            )
        )

    def snapshot_at_start(self, run: RunPlan, backend: Backend) -> MetricSnapshot | None:
        """Counters and memory of a freshly started arm (the derived alternative reads the
        draft's memory from it before the arm has served a phase); None: the scrape failed."""
        try:
            snap = backend.scrape(run.run_id, run.arm.name, "start", "after")
        except Exception:  # a failed scrape only costs the figure
            return None
        self.store.add_snapshots([snap])
        return snap

    # -- per-arm helpers (used by pilot.run.steps) ------------------------------------------------
    def backend_for(
        self,
        plan: ArmPlan,
        *,
        overrides: dict[str, Any] | None = None,
        port: int | None = None,
        plain: bool = False,
        process: int = 0,
    ) -> Backend:
        """The backend of the arm's ``process`` (an arm by URL: its replica); ``plain`` is the
        same engine with speculation off (the drill's restart), on ``port`` so clients keep
        their endpoint."""
        over = dict(overrides or self.overrides.get(plan.name, {}))
        if plain:
            over.update(plain_overrides(plan))
        return make_backend(
            plan,
            dtype=self.pinned_format(),
            files=self.files.get(plan.name, {}),
            overrides=over,
            port=port,
            process=process,
        )

    def pinned_format(self) -> str | None:
        """The weight format every builtin arm runs: the one the first started builtin arm's
        engine reported choosing (its manifest's calibration, read from the file, so a resumed
        pilot keeps the first run's choice); None before any builtin engine has reported one
        (each arm then runs its own ``dtype`` option)."""
        arms = [a for a in self.store.records("arms") if a.manifest]
        for a in sorted(arms, key=lambda a: (a.run_order, a.repetition)):
            engine = adapter_of(a.engine)
            chosen = engine.chosen_format(a.manifest) if engine is not None else None
            if chosen:
                return chosen
        return None

    def derived_overrides(self, plan: ArmPlan) -> dict[str, Any]:
        """Option changes the arm's budget derives from another arm's measurement (kv_slots)."""
        over: dict[str, Any] = {}
        if plan.role == "alternative" and plan.spec.budget.derive == "kv_slots":
            over = derive_kv_slots(self.store, plan, self.plans)
        self.overrides[plan.name] = over
        return over

    def manifest(
        self, backend: Backend, plan: ArmPlan, overrides: dict[str, Any]
    ) -> dict[str, Any]:
        """``pilot.plan.arms.arm_manifest`` of the started backend."""
        return arm_manifest(backend.describe().to_dict(), plan, overrides)

    def arm_record(self, run: RunPlan) -> ArmRecord:
        found = self.store.records("arms", run_id=run.run_id)
        if found:
            return found[0]
        return new_record(run, self.store.records("pilots")[0].pilot_id)
