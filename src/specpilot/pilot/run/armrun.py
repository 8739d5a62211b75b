"""One execution of one arm: start, warm up, measured phases, drill, compatibility, quality, stop.

Every step's result goes to the pilot file as it happens; ``ArmRecord.completed_steps`` says
which steps are done, so a resumed pilot skips them (and reruns a cut phase from its start,
after deleting what the cut phase had written).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specpilot.analysis.rollback.drill import summarize
from specpilot.backends.adapters import adapter_of
from specpilot.backends.protocol import Backend, request_headers
from specpilot.definitions import goodput
from specpilot.loadgen import LoadConfig, LoadRunner
from specpilot.pilot.design import level_of
from specpilot.pilot.plan.arms import ArmPlan
from specpilot.pilot.run.context import ArmContext, Held, PilotContext, RunPlan
from specpilot.pilot.run.drill import (
    DRILL_PHASE,
    RestartSwitch,
    RuntimeSwitch,
    drill_schedule,
    not_possible,
)
from specpilot.records import (
    ArmRecord,
    ChunkTiming,
    DrillRecord,
    MetricSnapshot,
    PrefillRecord,
    RequestRecord,
    RoundRecord,
)
from specpilot.store import PhaseRecorder, Store

if TYPE_CHECKING:
    from specpilot.loadgen import LoadConfig, LoadResult, LoadRunner
    from specpilot.loadgen.config import Extras
    from specpilot.pilot.eta.progress import PilotProgress
    from specpilot.workload import Schedule

LOAD_STEP = "load"


def load_config(
    ctx: ArmContext,
    run_id: str,
    arm: str,
    url: str,
    model: str,
    extras: Extras,
    over: Mapping[str, object] | None = None,
) -> LoadConfig:
    """The load generator's config for one arm (the pilot's load settings), with the options
    in ``over`` (plain names, as ``LoadConfig.with_options`` takes them) changed."""
    s = ctx.load_settings
    opts: dict[str, object] = dict(
        api=s.api,
        model=model,
        run_id=run_id,
        arm=arm,
        timeout_s=s.timeout_s,
        enforce_deadlines=s.enforce_deadlines,
        max_concurrency=s.max_concurrency,
        lag_threshold_s=s.lag_threshold_ms / 1e3,
        response_extras=extras,
        seed=ctx.schedule.seed,
        cancel_fraction=s.cancel_fraction,
        cold_start_requests=s.cold_start_requests,
        include_usage=s.include_usage,
        run_stages=s.run_stages,
        phase_timing=s.phase_timing,
        progress=False,
    )
    opts.update(over or {})
    return LoadConfig.build(url, **opts)


class ProgressSink:
    """Wraps the store's sink to count done/failed requests for the progress line."""

    def __init__(self, sink: Callable[..., None], progress: PilotProgress, total: int) -> None:
        self.sink = sink
        self.progress = progress
        self.total = total
        self.done = 0
        self.failed = 0
        self._lock = threading.Lock()

    def __call__(
        self,
        record: RequestRecord,
        chunks: list[ChunkTiming],
        rounds: list[RoundRecord],
        prefill: PrefillRecord | None,
    ) -> None:
        self.sink(record, chunks, rounds, prefill)
        with self._lock:
            self.done += 1
            self.failed += record.status != "ok"
        self.progress.requests(self.done, self.failed, self.total)


def phases_left(ctx: ArmContext, run: RunPlan) -> list[str]:
    """The run's measured phases that are not complete in the pilot file, in schedule order."""
    done = {
        p.phase
        for p in ctx.store.records("phases", run_id=run.run_id)
        if p.status == "complete" and not p.warmup
    }
    return phases_of(ctx.schedule, run, done)


def phases_of(
    schedule: Schedule, run: RunPlan, done: set[str] | frozenset[str] = frozenset()
) -> list[str]:
    """The run's measured phases less ``done``, in schedule order (a plan made before the
    pilot file exists: none done)."""
    mine = set(run.phases) if run.phases is not None else None
    missing = sorted((mine or set()) - {p.name for p in schedule.phases})
    if missing:  # a run of phases its schedule does not hold would replay nothing, silently
        raise RuntimeError(
            f"run {run.run_id}: phases {', '.join(missing)} are not in the schedule it replays"
        )
    return [
        p.name
        for p in schedule.phases
        if not p.warmup and p.name not in done and (mine is None or p.name in mine)
    ]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a load run: what was confirmed is kept; ``result`` is the run's so far."""

    def __init__(self, message: str, result: LoadResult) -> None:
        super().__init__(message)
        self.result = result


def run_phases(
    ctx: ArmContext,
    run: RunPlan,
    backend: Backend,
    url: str,
    model: str,
    arm_rec: ArmRecord,
    only: list[str] | None = None,
    warmup: bool = True,
    start_at: float | None = None,
) -> LoadResult | None:
    """The warm-up (unless ``warmup`` is False: the run is warm already) and every measured
    phase not yet complete (of ``only`` when given), with edges recorded; client-side stages
    and the phases' start times come from the schedule (``LoadRunner.for_schedule``);
    ``start_at`` (``time.perf_counter()``): the first phase starts then (a mirrored episode's
    runs are given one)."""
    store = ctx.store
    measured = [p for p in phases_left(ctx, run) if only is None or p in only]
    if not measured:
        return None
    clear_phases(store, run.run_id, measured)  # a cut phase reruns from its start
    cfg = load_config(
        ctx,
        run.run_id,
        run.arm.name,
        url,
        model,
        backend.response_extras,
        # an arm by URL: its credentials
        {"headers": dict(request_headers(backend)), "start_at": start_at},
    )
    runner = LoadRunner.for_schedule(ctx.schedule, cfg, None, measured, warmup=warmup)
    runner.sink = ProgressSink(store.sink, ctx.progress, len(runner.schedule))
    durations = {p.name: p.duration_s for p in ctx.schedule.phases}
    recorder = PhaseRecorder(
        store,
        run.run_id,
        run.arm.name,
        backend.scrape,
        durations,
        local_engine=run.arm.url is None,
        interval_s=ctx.load_settings.scrape_interval_s,
    ).attach(runner)

    def on_phase(name: str, edge: str, t: float) -> None:
        recorder.on_phase(name, edge, t)  # written before it is shown
        if edge != "start" and name in measured:
            ctx.progress.note(f"{run.arm.name}: phase {name} {recorder.phases[name].status}")

    runner.on_phase = on_phase
    ctx.progress.step(run.arm.name, f"phases {', '.join(measured)}")
    try:
        with live(runner):
            result = runner.run()
    finally:
        recorder.stop()
    store.flush()
    if result.summary.interrupted:  # the runner caught Ctrl-C and kept what was confirmed
        raise Interrupted(f"{run.arm.name}: interrupted during {', '.join(measured)}", result)
    return result


_LIVE: set[LoadRunner] = set()  # the load runs in flight (a mirrored episode's, in threads)
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()  # set by interrupt_all: a run registering late stops at once


@contextlib.contextmanager
def live(runner: LoadRunner) -> Iterator[None]:
    """``runner`` is in flight for the block: ``interrupt_all`` reaches it, also when it came
    after the interrupt (a thread of a mirrored episode still building its runner then)."""
    with _LIVE_LOCK:
        _LIVE.add(runner)
        if _STOPPING.is_set():
            runner.interrupted = True
            runner.stop("interrupted (Ctrl-C)")
    try:
        yield
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(runner)


def interrupt_all(reason: str) -> None:
    """Stop every load run in flight as Ctrl-C stops one in the main thread (its in-flight
    requests cancelled, what was confirmed kept), and every one that starts until
    ``interrupts_cleared`` (the mirrored episode clears it when its threads are done, so a
    later run in the same process is not stopped): a mirrored episode's runs in other threads,
    which no signal reaches."""
    with _LIVE_LOCK:
        _STOPPING.set()
        for runner in _LIVE:
            runner.interrupted = True
            runner.stop(reason)


def interrupts_cleared() -> None:
    """Runs may start again (a mirrored episode, before it starts its runs and when they are
    done)."""
    _STOPPING.clear()


def clear_phases(store: Store, run_id: str, phases: list[str]) -> None:
    """Delete every per-request record of ``phases`` of a run (a cut phase's partial data, or
    an in-place episode run again on every arm: ``pilot.run.episode_run``)."""
    ids = [r.request_id for r in store.records("requests", run_id=run_id) if r.phase in phases]
    for rid in ids:
        store.delete("chunks", run_id=run_id, request_id=rid)
    for table in ("requests", "rounds", "prefills", "snapshots"):
        for p in phases:
            store.delete(table, run_id=run_id, phase=p)


def baseline_goodput(ctx: PilotContext, phase: str) -> float | None:
    """Goodput of the baseline arm's first run in ``phase`` (the drill's recovery target)."""
    base = next((a for a in ctx.plans if a.role == "baseline"), None)
    if base is None:
        return None
    recs = [
        r
        for r in ctx.store.records("requests", arm=base.name)
        if level_of(r.phase) == phase and not r.warmup
    ]
    info = next((p for p in ctx.level_schedule.phases if p.name == phase), None)
    if not recs or info is None:
        return None
    return goodput(recs, info.duration_s)


def _switch_for(
    ctx: PilotContext, plan: ArmPlan, backend: Backend
) -> RuntimeSwitch | RestartSwitch | None:
    """How the drill switches ``plan``'s speculation off: in place (the builtin server), by a
    restart on the same port (every other engine specpilot starts), or not at all (None)."""
    engine = adapter_of(plan.engine)
    if engine is None:
        return None
    if engine.in_place:
        return RuntimeSwitch(backend.endpoint, ctx.admin_token)
    port = int(backend.endpoint.rsplit(":", 1)[1])
    return RestartSwitch(
        backend,
        make_plain=lambda: ctx.backend_for(plan, port=port, plain=True),
        make_spec=lambda: ctx.backend_for(plan, port=port),
        start_timeout_s=ctx.cfg.load.start_timeout_s,
    )


@dataclass
class _Timeline:
    """What the drill's switching thread did, read by the pilot once the replay ends."""

    events: list[dict[str, Any]] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _act(
    ctx: PilotContext,
    run: RunPlan,
    runner: LoadRunner,
    switch: RuntimeSwitch | RestartSwitch,
    backend: Backend,
    out: _Timeline,
) -> None:
    """The switching thread: off ``switch_after_s`` into the replay, on again ``hold_s`` after
    the switch is in force; a failure is recorded, never raised (the pilot goes on)."""
    d, marks, events = ctx.cfg.drill, out.marks, out.events
    try:
        t_run = _wait_for(lambda: runner.t_run)
        time.sleep(max(0.0, t_run + d.switch_after_s - time.perf_counter()))
        marks["requested"], marks["in_force"] = switch.off()
        events.append({"t": marks["requested"], "event": "switch off requested"})
        events.append({"t": marks["in_force"], "event": "switch off in force (server)"})
        snap = (switch.current if isinstance(switch, RestartSwitch) else backend).scrape
        _snapshot(ctx, snap, run.run_id, run.arm.name, "drill:off")
        # hold_s counts from the switch being in force: a restart (vLLM: ~40 s here) would
        # otherwise eat the whole hold and leave nothing served rolled back to compare
        time.sleep(max(0.0, marks["in_force"] + d.hold_s - time.perf_counter()))
        marks["back"], back_in_force = switch.on()
        marks["back_s"] = back_in_force - marks["back"]
        events.append({"t": marks["back"], "event": "switch on requested"})
        events.append({"t": back_in_force, "event": "switch on in force"})
    except Exception as exc:  # the drill failed: recorded, the pilot goes on
        out.errors.append(f"{type(exc).__name__}: {exc}")


def _drill_record(
    ctx: PilotContext, run: RunPlan, kind: str, records: list[RequestRecord], out: _Timeline
) -> DrillRecord:
    """The drill's record: failed with why, or summarised from the replay's records."""
    d, marks = ctx.cfg.drill, out.marks
    if out.errors or "requested" not in marks:
        reason = "; ".join(out.errors) or "the switch never ran"
        return DrillRecord(
            run.run_id, run.arm.name, DRILL_PHASE, kind, "failed", reason=reason, events=out.events
        )
    rec = summarize(
        records,
        requested_t=marks["requested"],
        in_force_t=marks["in_force"],
        back_t=marks.get("back"),
        run_id=run.run_id,
        arm=run.arm.name,
        kind=kind,
        goodput_baseline=baseline_goodput(ctx, d.phase),
        window_s=d.recovery_window_s,
        events=out.events,
        back_in_force_s=marks.get("back_s"),
    )
    rec.detail["source_phase"] = d.phase  # the analysis pairs it with the baseline's
    return rec


def run_drill(ctx: PilotContext, run: RunPlan, held: Held, url: str, model: str) -> DrillRecord:
    """Replay the drill phase; switch speculation off after ``switch_after_s``, on again after
    ``hold_s``; summarise from the drill phase's records."""
    plan, d = run.arm, ctx.cfg.drill
    backend = held.engine()
    if plan.url is not None:
        return not_possible(
            run.run_id, plan.name, "the arm is given by URL: specpilot cannot switch or restart it"
        )
    switch = _switch_for(ctx, plan, backend)
    if switch is None:
        return not_possible(run.run_id, plan.name, f"no way to switch {plan.engine} off")
    requests = drill_schedule(ctx.level_schedule.requests, d.phase, d.replay_s)
    clear_phases(ctx.store, run.run_id, [DRILL_PHASE])  # a cut drill's records, on a rerun
    cfg = load_config(
        ctx,
        run.run_id,
        plan.name,
        url,
        model,
        backend.response_extras,
        {
            "abort_after_connect_errors": None,
            "cold_start_requests": 0,  # the drill's requests are compared with the baseline's
            "cancel_fraction": 0.0,  # as they are: none marked cold, none cancelled on purpose,
            "run_stages": True,  # and its client-side stages run (a rollback's whole path)
        },
    )
    cfg = cfg.with_options(stages=dict(ctx.schedule.stages), stages_base_dir=ctx.schedule.base_dir)
    runner = LoadRunner(requests, cfg, ProgressSink(ctx.store.sink, ctx.progress, len(requests)))
    out = _Timeline()
    actor = threading.Thread(
        target=_act, args=(ctx, run, runner, switch, backend, out), name="drill", daemon=True
    )
    ctx.progress.step(plan.name, f"rollback drill ({switch.kind})")
    actor.start()
    result = runner.run()
    actor.join(timeout=ctx.cfg.load.start_timeout_s)
    held.backend = switch.current if isinstance(switch, RestartSwitch) else backend
    if result.summary.interrupted:
        raise KeyboardInterrupt(f"{plan.name}: interrupted during the rollback drill")
    ctx.store.flush()
    rec = _drill_record(ctx, run, switch.kind, result.records, out)
    ctx.store.add_drills([rec])
    return rec


def not_drilled(run_id: str, plan: ArmPlan) -> DrillRecord:
    """The record of a candidate arm the pilot did not drill, saying why."""
    if plan.url is not None:
        return not_possible(
            run_id,
            plan.name,
            "the arm is given by URL: specpilot cannot switch it off or restart it, so its "
            "rollback was not drilled",
        )
    return DrillRecord(
        run_id,
        plan.name,
        DRILL_PHASE,
        "none",
        "not_drilled",
        reason="drill: false for this arm (by default the pilot drills the speculative arm)",
    )


def _wait_for(get: Callable[[], float | None], timeout_s: float = 60.0) -> float:
    deadline = time.monotonic() + timeout_s
    while (value := get()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError("the drill's load run never started")
        time.sleep(0.01)
    return value


def _snapshot(
    ctx: PilotContext,
    scrape: Callable[[str, str, str, str], MetricSnapshot],
    run_id: str,
    arm: str,
    label: str,
) -> None:
    try:
        ctx.store.add_snapshots([scrape(run_id, arm, DRILL_PHASE, label)])
    except Exception:  # a failed scrape does not stop the drill
        return
