"""The ETA's plan read from a pilot about to run (``pilot.eta.remaining`` holds the pure estimator and the
clock): what each run still has to do, from the pilot file, and the schedule's timetable."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from specpilot.pilot.config.file import PilotConfig
from specpilot.pilot.eta.remaining import (
    DRILL_RESTARTS,
    RunLeft,
    Step,
    Timetable,
    plan_steps,
    quality_rounds,
    timetable,
)
from specpilot.pilot.run.armrun import LOAD_STEP, phases_left, phases_of
from specpilot.pilot.run.context import PilotContext, RunPlan
from specpilot.pilot.run.gates import Gates
from specpilot.quality.compat import FEATURES
from specpilot.simulate.sustain import phase_drains
from specpilot.workload import Schedule


class PlanContext(Protocol):
    """What a plan reads of a pilot: its config, gates, schedule as replayed and by level, and
    the capacity probe's figures (``Planning``; a running pilot's ``PilotSession``)."""

    @property
    def cfg(self) -> PilotConfig: ...
    @property
    def gates(self) -> Gates: ...
    @property
    def schedule(self) -> Schedule: ...
    @property
    def level_schedule(self) -> Schedule: ...
    @property
    def capacity(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Planning:
    """A pilot planned before its file exists (the budget's fit tries lengths with it)."""

    cfg: PilotConfig
    gates: Gates
    schedule: Schedule
    level_schedule: Schedule
    capacity: dict[str, Any] | None


def run_left(
    ctx: PlanContext,
    run: RunPlan,
    rounds: int,
    checks: int,
    resumed: PilotContext | None = None,
) -> RunLeft | None:
    """What the pilot file says ``run`` has left (None: complete); ``resumed``: the running
    pilot whose file says it (None: all of it, a plan made before the pilot file exists)."""
    if resumed is None:
        done: set[str] = set()
    else:
        rec = resumed.arm_record(run)
        if rec.status == "complete":
            return None
        done = set(rec.completed_steps)
    plan = run.arm
    restarts = None  # no drill, or one that only records why not (pilot.run.armrun.run_drill)
    if plan.strategy.kind != "none" and "drill" not in done and plan.drill and plan.url is None:
        restarts = DRILL_RESTARTS.get(plan.engine)
    # the A/A control, the planted arm and an arm's other processes repeat its measurement
    # only: the drill, the quality pass and the compatibility suite run on its first process
    own = plan.role not in ("control", "planted", "within") and run.process == 0
    if not own:
        restarts = None
    reaches = plan.role in ("planted", "within") or (
        ctx.cfg.episodes.in_place and plan.role == "baseline"
    )
    return RunLeft(
        run.run_id,
        # an arm that reaches another's processes starts nothing: a URL's start
        "url" if plan.url is not None or reaches else plan.engine,
        () if LOAD_STEP in done else tuple(_phases(ctx, run, resumed)),
        restarts,
        rounds if own and "quality" not in done else 0,
        checks if own and ctx.cfg.compat.enabled and "compat" not in done else 0,
    )


def _phases(ctx: PlanContext, run: RunPlan, resumed: PilotContext | None) -> list[str]:
    return phases_of(ctx.schedule, run) if resumed is None else phases_left(resumed, run)


def plan_for(
    ctx: PlanContext, runs: Sequence[RunPlan], resumed: PilotContext | None = None
) -> list[Step]:
    """The plan of a pilot about to run ``runs``: all of it, or with ``resumed`` (the running
    pilot) only what its file says is not done."""
    cfg = ctx.cfg
    quality = ctx.gates.plan()
    rounds = quality_rounds([q.temperature for q in quality], cfg.quality.concurrency)
    checks = len(cfg.compat.features or FEATURES)
    left = [
        r for r in (run_left(ctx, run, rounds, checks, resumed) for run in runs) if r is not None
    ]
    tt = timetable(ctx.schedule, cfg.drill.phase, cfg.drill.switch_after_s + cfg.drill.hold_s)
    # one call per episode; the drill replays a whole level (its first replay_s)
    drill = timetable(ctx.level_schedule, cfg.drill.phase, 0.0).arrivals
    last = drill.get(cfg.drill.phase, 0.0)
    last = last if cfg.drill.replay_s is None else min(last, cfg.drill.replay_s)
    tt = replace(
        tt,
        arrivals={**tt.arrivals, cfg.drill.phase: last},
        mirrored=cfg.episodes.design == "mirrored",
    )
    tt = with_drains(tt, ctx.schedule, ctx.capacity)
    measured = sum(1 for r in ctx.schedule.requests if not r.warmup)
    # per arm, not per run: the episode design's processes of one arm share its episodes
    arms = len({r.arm.name for r in runs})
    answers = (measured + len(quality)) * arms
    return plan_steps(left, tt, answers, arms)


def with_drains(tt: Timetable, schedule: Schedule, capacity: dict[str, Any] | None) -> Timetable:
    """``tt`` with each phase's drain simulated from the capacity probe's figures (the plan's
    load times from this machine's measured steps, not a prior), where a probe ran."""
    if not capacity:
        return tt
    reqs: dict[str, list[tuple[float, int, int]]] = {}
    for r in schedule.requests:
        prompt = r.input_tokens_target or 0
        sent = r.send_t + sum(r.client_stages.values())  # sent after its client stages
        reqs.setdefault(r.phase, []).append((sent, prompt, r.max_tokens or 1))
    drains = phase_drains(reqs, capacity)
    warm = next((p.name for p in schedule.phases if p.warmup), None)
    return replace(tt, drain_s=drains, warmup_name=warm) if drains else tt
