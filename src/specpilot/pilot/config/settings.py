"""The pilot file's settings beside its arms: ``load:`` (the load generator's, for every
measured run), ``drill:`` (the rollback drill, R8) and ``compat:`` (the compatibility suite)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from specpilot.quality.compat import FEATURES
from specpilot.validation import FieldProblem, StrictModel


class LoadSettings(StrictModel):
    """The load generator's settings for every measured run (a pilot file's ``load:``, and
    ``specpilot load``'s options: its one-arm pilot, ``pilot.run.one_arm``)."""

    api: Literal["chat", "completions"] = "chat"
    timeout_s: float = Field(120.0, gt=0)
    enforce_deadlines: bool = True
    max_concurrency: int | None = Field(None, ge=1)
    lag_threshold_ms: float = Field(10.0, gt=0)
    start_timeout_s: float = Field(600.0, gt=0)
    phase_timing: Literal["back_to_back", "schedule"] = Field(
        "back_to_back",
        description="back_to_back: each phase starts when the previous one has drained (its "
        "counter deltas are exact); schedule: one open-loop timeline at the schedule's start times",
    )
    cancel_fraction: float = Field(
        0.0, ge=0, le=1, description="of the requests closed mid-stream on purpose (R7)"
    )
    cold_start_requests: int = Field(
        0,
        ge=0,
        description="the first N measured requests of each replay are marked cold_start (a "
        "pilot replays each episode apart; never the drill)",
    )
    include_usage: bool = True  # ask for stream_options.include_usage
    scrape_interval_s: float = Field(
        1.0,
        ge=0,
        le=10,
        description="seconds between scrapes of each engine's own figures (KV use, the queue, "
        "preemptions, slots) while a phase runs, stored as 'during' snapshots; 0: only at the "
        "phase edges",
    )
    capacity_probe: bool | None = Field(
        None,
        description="measure the baseline's sustainable rate before the episodes (pilot."
        "capacity): None runs it where a phase gives target_utilization; true also states "
        "what absolute rates mean on this machine; false refuses target_utilization",
    )
    run_stages: bool = Field(
        False,
        description="run the workload's client-side stages (retrieval, tool calls) before each "
        "model call and measure them; false: the records keep their planned seconds (the "
        "drill runs them either way; specpilot load runs them unless --no-stages)",
    )


class DrillSettings(StrictModel):
    """The rollback drill (R8): replay ``phase`` once more on each drilled arm, switch
    speculation off ``switch_after_s`` into it, back on ``hold_s`` after the switch is in force."""

    enabled: bool = True
    phase: str = "peak"
    switch_after_s: float = Field(5.0, ge=0)
    hold_s: float = Field(8.0, gt=0)
    recovery_window_s: float = Field(4.0, gt=0)
    replay_s: float | None = Field(
        None,
        gt=0,
        description="seconds of the phase replayed (null: all of it); the summary reads only "
        "the requests up to the switch back, so the rest of a long phase is time spent for "
        "nothing. At least switch_after_s + hold_s + recovery_window_s",
    )

    @model_validator(mode="after")
    def _replay_covers_the_switch(self) -> DrillSettings:
        need = self.switch_after_s + self.hold_s + self.recovery_window_s
        if self.replay_s is not None and self.replay_s < need:
            raise FieldProblem(
                f"replay_s {self.replay_s:g} ends before the switch back and its recovery "
                f"window (switch_after_s + hold_s + recovery_window_s = {need:g})",
                fix=f"set drill.replay_s to at least {need:g}, or null to replay the whole phase",
            )
        return self


class CompatSettings(StrictModel):
    enabled: bool = True
    # None: the whole suite (specpilot.quality.compat.FEATURES); a subset runs only those
    features: list[str] | None = None

    @field_validator("features")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        bad = [f for f in v or [] if f not in FEATURES]
        if bad:
            raise FieldProblem(
                f"unknown compat feature(s) {bad}", fix=f"choose from {', '.join(FEATURES)}"
            )
        return v
