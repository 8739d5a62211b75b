"""The pilot's ETA: every step still to run, each at its planned time, from the first line on.

The plan (``plan_steps``) lists what the pilot will do: each arm's engine start, its load
calls (the warm-up and the measured phases: the schedule's last arrival in each, plus the
drain after it, since phases run back to back), its rollback drill, quality pass and
compatibility suite, and the pilot's cross-arm checks and report. A step's time comes from
the steps of its kind already measured in this run (``learn``: the mean cold start of the
same engine, the mean drain per phase, seconds per quality round or compat check, which
another engine's arm measured when this engine's has not yet) and, before any is measured,
from the stated priors below (the code keeps no cache of earlier runs' times). ``eta_s`` sums the steps not done; inside a running step the elapsed time is
subtracted, never below the step's floor (its scheduled arrivals not yet sent), so the ETA
counts down between step edges.

    >>> plan = [Step("a:start", "start", "builtin"),
    ...         Step("a:load:peak", "load", "builtin", sched_s=15.0, drains=2)]
    >>> eta_s(plan, {})                       # priors: a 10 s start, 15 s + 2 drains of 3 s
    31.0
    >>> eta_s(plan, {"a:start": 12.0})        # the start measured: only the load is left
    21.0
    >>> eta_s(plan, {"a:start": 12.0}, ("a:load:peak", 5.0))  # 5 s into the load
    16.0

``EtaClock`` is the thin stateful part: the orchestrator times each step with it and the
status line reads ``eta_s()`` at every redraw.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from specpilot.backends.adapters import ADAPTERS

if TYPE_CHECKING:
    from specpilot.workload import Schedule

# Priors, until this run measures a step of the kind: a quick pilot on the 2-core CPU with
# other work running (builtin engines started in 8-22 s from a warm format cache, llama.cpp in
# 2 s, quality passes took 4-7 s for 3 rounds, compat checks 1-2 s each, the report 6 s for
# six arm runs); vLLM and SGLang load a model for a minute or more.
PRIOR_START_S = {**{e: a.start_prior_s for e, a in ADAPTERS.items()}, "url": 0.5}
PRIOR_START_OTHER_S = 30.0  # an engine kind without a prior of its own
PRIOR_DRAIN_S = 3.0  # after a phase's last arrival, until its requests are answered
PRIOR_PER_UNIT_S = {
    "quality": 2.0,  # per round of the quality pass (``quality_rounds``)
    "compat": 1.5,  # per compatibility check
    "cross_arm": 0.02,  # per stored answer the cross-arm step checks again
    "report": 1.5,  # per arm run the analysis covers
}
UNIT_KINDS = tuple(PRIOR_PER_UNIT_S)
TOGETHER = "load/together"  # learned: the drain per phase of a group's slowest member
PREDICTED = "load/simulated"  # learned: measured over simulated drains of the loads so far
# engine restarts a drill costs: the builtin server switches at run time, the others restart
DRILL_RESTARTS = {e: a.drill_restarts for e, a in ADAPTERS.items()}


@dataclass(frozen=True)
class Step:
    """One step of the plan. ``kind``: start | load | drill | quality | compat | cross_arm |
    report; ``engine``: the arm's engine ("url" for an arm given by URL, "" pilot-wide)."""

    key: str  # unique in the plan: the orchestrator times the step under this name
    kind: str
    engine: str = ""
    run_id: str = ""
    sched_s: float = 0.0  # the schedule's part: the last arrival of each phase replayed
    drains: int = 0  # phases the step waits to drain (the warm-up counts as one)
    units: float = 1.0  # quality rounds, compat checks, answers, arm runs (UNIT_KINDS)
    restarts: int = 0  # engine restarts inside the step (a drill by restart: 2)
    hold_s: float = 0.0  # a drill: switch_after_s + hold_s, the switch's own timetable
    # a load: the seconds after its last arrival simulated from the capacity probe's figures
    # (None: the learned mean drain per phase); measured loads scale the rest (``learn``)
    drain_s: float | None = None
    # steps with one non-empty ``together`` run at once (a mirrored episode's loads on every
    # arm): the group takes its longest step's time, not their sum
    together: str = ""


def start_key(run_id: str) -> str:
    return f"{run_id}:start"


def load_key(run_id: str, phases: Sequence[str]) -> str:
    return f"{run_id}:load:{','.join(phases)}"


def step_key(run_id: str, kind: str) -> str:
    """The key of a per-arm step that runs once (drill, quality, compat)."""
    return f"{run_id}:{kind}"


# -- the estimate: pure functions over the plan and the measured seconds ------------------------


def sample(step: Step, seconds: float) -> float:
    """What a measured step teaches about the others of its kind: a load's drain per phase,
    a unit kind's seconds per unit, else the step's seconds."""
    if step.kind == "load" and step.drain_s:  # how far the simulated drain was off
        return max(0.0, seconds - step.sched_s) / step.drain_s
    if step.kind == "load":
        return max(0.0, seconds - step.sched_s) / max(1, step.drains)
    if step.kind in UNIT_KINDS:
        return seconds / step.units if step.units > 0 else 0.0
    return seconds


def learn(plan: Sequence[Step], done: Mapping[str, float]) -> dict[tuple[str, str], float]:
    """(kind, engine) -> the mean ``sample`` of the measured steps of that kind and engine;
    (kind, "*") -> of that kind on any engine."""
    got: dict[tuple[str, str], list[float]] = {}
    for s in plan:
        if s.key in done:
            x = sample(s, done[s.key])
            if s.kind == "load" and s.drain_s:  # its ratio, and its seconds per drain (a drill)
                got.setdefault((PREDICTED, s.engine), []).append(x)
                got.setdefault((PREDICTED, "*"), []).append(x)
                s, x = replace(s, drain_s=None), sample(replace(s, drain_s=None), done[s.key])
            got.setdefault((s.kind, s.engine), []).append(x)
            got.setdefault((s.kind, "*"), []).append(x)
    # a group run at once took its slowest member's time: what its groups to come will take
    # (arms by URL share one engine key, so their mean would understate it)
    groups: dict[str, list[Step]] = {}
    for s in plan:
        if s.together and s.kind == "load":
            groups.setdefault(s.together, []).append(s)
    for members in groups.values():
        if all(m.key in done for m in members):
            slow = max(members, key=lambda m: done[m.key] - m.sched_s)
            plain = replace(slow, drain_s=None)
            got.setdefault((TOGETHER, "*"), []).append(sample(plain, done[slow.key]))
    return {k: sum(v) / len(v) for k, v in got.items()}


def estimate(step: Step, learned: Mapping[tuple[str, str], float]) -> float:
    """Seconds the step is expected to take: measured kinds first, priors before."""
    got = learned.get((step.kind, step.engine))
    start = learned.get(("start", step.engine), PRIOR_START_S.get(step.engine, PRIOR_START_OTHER_S))
    drain = learned.get(("load", step.engine), PRIOR_DRAIN_S)
    if step.kind == "start":
        return start
    if step.kind == "load" and step.together and (TOGETHER, "*") in learned:
        return step.sched_s + step.drains * learned[(TOGETHER, "*")]
    if step.kind == "load" and step.drain_s is not None:
        scale = learned.get((PREDICTED, step.engine), learned.get((PREDICTED, "*"), 1.0))
        return step.sched_s + step.drain_s * scale
    if step.kind == "load":
        return step.sched_s + step.drains * drain
    if step.kind == "drill":
        if got is not None:
            return got
        # the replay and the switch's own timetable (off, hold, on) run side by side
        return max(step.sched_s + step.drains * drain, step.hold_s + step.restarts * start)
    # a quality pass or compat suite not yet measured on this engine: as on the others so far
    if got is None:
        got = learned.get((step.kind, "*"), PRIOR_PER_UNIT_S.get(step.kind, 0.0))
    return got * step.units


def floor_s(step: Step, elapsed: float) -> float:
    """The least a running step still takes: its scheduled arrivals not yet sent."""
    return max(0.0, step.sched_s - elapsed)


def eta_s(
    plan: Sequence[Step],
    done: Mapping[str, float],
    running: tuple[str, float] | Mapping[str, float] | None = None,
) -> float:
    """Seconds left: every step not done at its estimate, steps run ``together`` at their
    longest; ``running`` = (key, seconds into it), or such a mapping (steps run at once)."""
    learned = learn(plan, done)
    now = dict([running] if isinstance(running, tuple) else (running or {}))
    left = 0.0
    groups: dict[str, float] = {}  # a group of steps that run at once: its longest
    for s in plan:
        if s.key in done:
            continue
        est = estimate(s, learned)
        if s.key in now:
            est = max(est - now[s.key], floor_s(s, now[s.key]))
        if s.together:
            groups[s.together] = max(groups.get(s.together, 0.0), est)
        else:
            left += est
    return max(0.0, left + sum(groups.values()))


# -- the plan: pure over what each run has left and the schedule's timetable -------------------


@dataclass(frozen=True)
class RunLeft:
    """What one arm run still has to do (read from the pilot file: ``runs_left``)."""

    run_id: str
    engine: str
    phases: tuple[str, ...] = ()  # measured phases not complete
    drill_restarts: int | None = None  # None: no drill step; 0: runtime switch; 2: restart
    quality_rounds: int = 0  # 0: no quality pass left
    compat_checks: int = 0  # 0: no compatibility suite left


@dataclass(frozen=True)
class Timetable:
    """The schedule's part of the plan."""

    arrivals: dict[str, float]  # measured phase -> its last scheduled arrival (s from its start)
    warmup_s: float | None = None  # the warm-up's last arrival; None: no warm-up phase
    drill_phase: str = ""
    drill_hold_s: float = 0.0  # switch_after_s + hold_s
    # phase (the warm-up's name included) -> its simulated drain (``simulate.sustain``)
    drain_s: dict[str, float] = field(default_factory=dict)
    warmup_name: str | None = None
    mirrored: bool = False  # a mirrored design: an episode's loads on every arm run at once


def run_steps(run: RunLeft, tt: Timetable) -> list[Step]:
    """One run's steps: its start, its load calls, drill, quality pass, compatibility suite."""
    rid, eng = run.run_id, run.engine
    out = [Step(start_key(rid), "start", eng, rid)]
    warm = 0 if tt.warmup_s is None else 1
    for i, phases in enumerate([[p] for p in run.phases]):  # one call an episode
        # planned as if a run's first call replays the warm-up; in the episode design each
        # process's fingerprint (or the process it reaches) has warmed it instead, four short
        # requests the plan does not count: the two are of a size, and the plan stands for both
        w = warm if i == 0 else 0
        sched = w * (tt.warmup_s or 0.0) + sum(tt.arrivals.get(p, 0.0) for p in phases)
        step = Step(load_key(rid, phases), "load", eng, rid, sched, w + len(phases))
        if tt.mirrored:
            step = replace(step, together="|".join(phases))
        drained = [*phases, *([tt.warmup_name] if w and tt.warmup_name else [])]
        if tt.drain_s and all(p in tt.drain_s for p in drained):
            step = replace(step, drain_s=sum(tt.drain_s[p] for p in drained))
        out.append(step)
    if run.drill_restarts is not None:
        sched = tt.arrivals.get(tt.drill_phase, 0.0)
        drill = Step(step_key(rid, "drill"), "drill", eng, rid, sched_s=sched, drains=1)
        out.append(replace(drill, restarts=run.drill_restarts, hold_s=tt.drill_hold_s))
    if run.quality_rounds:
        out.append(Step(step_key(rid, "quality"), "quality", eng, rid, units=run.quality_rounds))
    if run.compat_checks:
        out.append(Step(step_key(rid, "compat"), "compat", eng, rid, units=run.compat_checks))
    return out


def plan_steps(runs: Sequence[RunLeft], tt: Timetable, answers: int, arm_runs: int) -> list[Step]:
    """Every step left: the runs' own, then the cross-arm checks over ``answers`` stored
    answers and the analysis and report over ``arm_runs`` runs."""
    out = [s for r in runs for s in run_steps(r, tt)]
    out.append(Step("cross_arm", "cross_arm", units=answers))
    out.append(Step("report", "report", units=arm_runs))
    return out


# -- the stateful part: the orchestrator's clock ------------------------------------------------


@dataclass
class EtaClock:
    """Times the plan's steps as they run; ``eta_s()`` is None until a plan is set."""

    plan: list[Step] | None = None
    now: Callable[[], float] = time.monotonic
    done: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)  # key -> started at (steps at once)
    _samples: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def eta_s(self) -> float | None:
        with self._lock:
            if self.plan is None:
                return None
            t = self.now()
            return eta_s(self.plan, self.done, {k: t - at for k, at in self.running.items()})

    @contextmanager
    def timed(self, key: str) -> Iterator[None]:
        """Time one step (several at once, each under its key); a step that raises is not
        measured (its run is dropped)."""
        with self._lock:
            self.running[key] = self.now()
        try:
            yield
        except BaseException:
            with self._lock:
                self.running.pop(key, None)
            raise
        with self._lock:
            started = self.running.pop(key, self.now())
            self.done[key] = self._samples.pop(key, self.now() - started)

    def sample_as(self, key: str, seconds: float) -> None:
        """Learn from ``seconds`` instead of the step's whole time (a start that also measured
        the weight formats: the other starts read the cache and take the restart's time)."""
        with self._lock:
            self._samples[key] = seconds

    def estimate_s(self, keys: Sequence[str]) -> float:
        """Seconds the steps ``keys`` not done yet are expected to take."""
        want = set(keys)
        with self._lock:
            if self.plan is None:
                return 0.0
            learned = learn(self.plan, self.done)
            left = [s for s in self.plan if s.key in want and s.key not in self.done]
            alone = sum(estimate(s, learned) for s in left if not s.together)
            groups: dict[str, float] = {}
            for s in left:
                if s.together:
                    groups[s.together] = max(groups.get(s.together, 0.0), estimate(s, learned))
            return alone + sum(groups.values())

    def drop_steps(self, keys: Sequence[str]) -> None:
        """Steps that will not run (episodes the pilot's budget or looks dropped)."""
        gone = set(keys)
        with self._lock:
            if self.plan is not None:
                self.plan = [s for s in self.plan if s.key not in gone or s.key in self.done]

    def drop_run(self, run_id: str) -> None:
        """A failed run's steps still to come will not run: out of the plan."""
        with self._lock:
            if self.plan is not None:
                keep = [s for s in self.plan if s.run_id != run_id or s.key in self.done]
                self.plan = keep


# -- reading the plan from a pilot about to run -------------------------------------------------


def timetable(schedule: Schedule, drill_phase: str, hold_s: float) -> Timetable:
    """The last scheduled arrival of each phase (client stages included)."""
    last: dict[str, float] = {}
    for r in schedule.requests:
        t = r.send_t + sum(r.client_stages.values())
        last[r.phase] = max(last.get(r.phase, 0.0), t)
    warm = next((p.name for p in schedule.phases if p.warmup), None)
    return Timetable(
        arrivals={p.name: last.get(p.name, 0.0) for p in schedule.phases if not p.warmup},
        warmup_s=last.get(warm, 0.0) if warm is not None else None,
        drill_phase=drill_phase,
        drill_hold_s=hold_s,
    )


def quality_rounds(temperatures: Sequence[float], concurrency: int) -> int:
    """Requests of a quality pass one after the other: the greedy ones go one at a time, the
    sampled ones ``concurrency`` at once.

    >>> quality_rounds([0.0, 0.0, 0.7, 0.7, 0.7, 0.7, 0.7], 4)
    4
    """
    sampled = sum(1 for t in temperatures if t > 0)
    return len(temperatures) - sampled + -(-sampled // max(1, concurrency))
