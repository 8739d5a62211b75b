"""The pilot seam, typed: what one arm's steps (``steps``, ``armrun``, ``episode_run``) call on
the pilot that runs them (``runner.Pilot``; mypy checks it against ``PilotContext``), what the
start and the measured phases alone need (``ArmContext``: ``specpilot load``'s one-arm pilot,
``pilot.run.one_arm``, is the other implementation), and the unit of execution, ``RunPlan``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from specpilot.backends.protocol import Backend
from specpilot.pilot.config.file import PilotConfig
from specpilot.pilot.config.settings import LoadSettings
from specpilot.pilot.eta.progress import PilotProgress
from specpilot.pilot.plan.arms import ArmPlan
from specpilot.pilot.run.drill import RuntimeSwitch
from specpilot.pilot.run.gates import Gates
from specpilot.records import ArmRecord, MetricSnapshot
from specpilot.store import Store
from specpilot.workload import Schedule


@dataclass
class Held:
    """What a run holds of its engine process: the backend (None once stopped) and, for a
    process switched at run time, its one switch (``pilot.run.planted.Switched.switch``)."""

    backend: Backend | None = None
    switch: RuntimeSwitch | None = None

    def engine(self) -> Backend:
        if self.backend is None:
            raise RuntimeError("the run's engine is not started (or already stopped)")
        return self.backend


@dataclass
class RunPlan:
    """One execution of one arm: the unit the pilot file records (``run_id``)."""

    arm: ArmPlan
    repetition: int
    order: int
    run_id: str
    process: int = 0  # which of the arm's processes (the episode design: several per arm)
    phases: tuple[str, ...] | None = None  # the measured phases this run serves (None: all)


def new_record(run: RunPlan, pilot_id: str) -> ArmRecord:
    """The record of a run not yet in the pilot file (the pilot's and ``load``'s alike)."""
    return ArmRecord(
        pilot_id=pilot_id,
        run_id=run.run_id,
        arm=run.arm.name,
        role=run.arm.role,
        engine=run.arm.engine,
        strategy=run.arm.strategy,
        budget=run.arm.budget,
        run_order=run.order,
        repetition=run.repetition,
    )


class ArmContext(Protocol):
    """What an arm's start, its measured phases and its stop call on the pilot."""

    store: Store
    schedule: Schedule  # what the runs replay (the episode design: each level in episodes)
    progress: PilotProgress
    admin_token: str

    @property
    def load_settings(self) -> LoadSettings: ...

    def backend_for(
        self,
        plan: ArmPlan,
        *,
        overrides: dict[str, Any] | None = None,
        port: int | None = None,
        plain: bool = False,
        process: int = 0,
    ) -> Backend: ...

    def derived_overrides(self, plan: ArmPlan) -> dict[str, Any]: ...

    def manifest(
        self, backend: Backend, plan: ArmPlan, overrides: dict[str, Any]
    ) -> dict[str, Any]: ...


class PilotContext(ArmContext, Protocol):
    """The whole pilot: its config, every arm, the gates, the budget's clock."""

    cfg: PilotConfig
    level_schedule: Schedule  # the workload's phases as planned (the drill replays one)
    plans: list[ArmPlan]
    gates: Gates
    started: float  # perf_counter at the pilot's start (the budget counts from it)
    capacity: dict[str, Any] | None  # the capacity probe's figures (None: not probed)
    files: dict[
        str, dict[str, str]
    ]  # arm -> option -> the file prepared for it (pilot.plan.assets)

    def record_failure(self, run: RunPlan, exc: BaseException) -> None: ...

    def arm_record(self, run: RunPlan) -> ArmRecord: ...

    def snapshot_at_start(self, run: RunPlan, backend: Backend) -> MetricSnapshot | None: ...


class ProbeContext(Protocol):
    """What the probe reads of the pilot (``pilot.run.runner.Probing``)."""

    @property
    def files(self) -> dict[str, dict[str, str]]: ...
    @property
    def progress(self) -> PilotProgress: ...
    @property
    def load_settings(self) -> LoadSettings: ...
    @property
    def admin_token(self) -> str: ...
