"""Runs the episode design (``pilot.design``): every process of every arm started first (one
at a time, each fingerprinted), then each level's episodes in turn, each replayed on every arm
in the design's order (mirrored: on every arm at once, ``mirrored``) on the process the
design gives, drained before the next; then each
arm's drill, quality pass and compatibility suite on its first process, and every engine stops.

A run whose start fails, or that fails in an episode, is recorded as failed and leaves the
rotation (its arm's other processes go on); Ctrl-C stops every engine and marks the runs in
flight as interrupted. A resumed pilot starts every process again and runs only the episodes
not complete: no finished episode is run or rewritten again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specpilot.loadgen import gcfreeze
from specpilot.pilot.config.file import PilotConfigError
from specpilot.pilot.design import K0, PLANTED, WITHIN
from specpilot.pilot.eta import remaining as eta
from specpilot.pilot.plan.arms import ArmPlan
from specpilot.pilot.plan.runplans import matched_after
from specpilot.pilot.run.armrun import (
    LOAD_STEP,
    clear_phases,
    interrupt_all,
    interrupts_cleared,
    phases_left,
)
from specpilot.pilot.run.context import PilotContext, RunPlan
from specpilot.pilot.run.looks import Looks, blocks
from specpilot.pilot.run.planted import (
    InPlaceSteps,
    PlantedSteps,
    Reaching,
    SwitchFailed,
    WithinSteps,
    owner_of,
)
from specpilot.pilot.run.steps import ArmSteps
from specpilot.records import StrategySpec

Key = tuple[str, int]  # a run: (arm, process)


def planted_plan(baseline: ArmPlan) -> ArmPlan:
    """The planted arm's plan: the baseline's, renamed, never drilled, no strategy."""
    return dataclasses.replace(
        baseline, name=PLANTED, role=PLANTED, drill=False, strategy=StrategySpec()
    )


def episode_runs(plans: Sequence[ArmPlan], design: dict[str, Any], pilot_id: str) -> list[RunPlan]:
    """One run per (arm, process), each with the episodes the design gives it; the baseline's
    first (the planted arm reaches its processes), the planted arm's last."""
    by_name = {p.name: p for p in plans}
    base = by_name[design["baseline"]]
    if design.get("planted"):
        by_name[PLANTED] = planted_plan(base)
    for a in design["arms"]:
        if a.endswith(K0) and a[: -len(K0)] in by_name:  # switched off in place
            by_name[a] = dataclasses.replace(
                by_name[a[: -len(K0)]], name=a, role=WITHIN, drill=False, strategy=StrategySpec()
            )
    skipped = (design.get("looks") or {}).get("skipped") or {}  # a resumed pilot's dropped
    # the arms that reach another's processes after that arm: in place, the baseline reaches
    # the speculative arm's, and the planted arm the baseline's
    first = design.get("in_place") or base.name
    arms = matched_after(
        sorted(
            design["arms"],
            key=lambda a: (a != first, a == PLANTED, a.endswith(K0) or a == base.name),
        ),
        by_name,
    )
    out: list[RunPlan] = []
    for arm in arms:
        for j in range(int(design["processes"])):
            mine = tuple(
                name
                for name, e in design["episodes"].items()
                if e["process"][arm] == j and name not in skipped
            )
            out.append(
                RunPlan(by_name[arm], 0, len(out), f"{pilot_id}.{arm}.p{j}", process=j, phases=mine)
            )
    return out


def reopen_split(ctx: PilotContext, runs: Sequence[RunPlan], design: dict[str, Any]) -> None:
    """In place, an episode a stop left complete on one arm of a process and not on another
    runs again on both: a resumed pilot starts every process anew, and the two halves would
    pair two processes whose offsets differ (7-20% here), where the design has them cancel.
    Their records are deleted and the runs marked running, before the ETA and the budget are
    planned; an episode complete on every run of its process is neither run nor rewritten.
    Mirrored (``design: mirrored``), the same holds for every arm of an episode: its halves
    ran at once, and one run again alone would pair it with a partner of another time."""
    mirror = design.get("design") == "mirrored"
    if not design.get("in_place") and not mirror:
        return
    left = {r.run_id: set(phases_left(ctx, r)) for r in runs}
    # mirrored: an episode's runs on every arm ran at once, whatever their processes
    pending = {(n, 0 if mirror else r.process) for r in runs for n in left[r.run_id]}
    for r in runs:
        done = [n for n in r.phases or () if n not in left[r.run_id]]
        redo = [n for n in done if (n, 0 if mirror else r.process) in pending]
        if not redo:
            continue
        clear_phases(ctx.store, r.run_id, redo)
        for name in redo:
            ctx.store.delete("phases", run_id=r.run_id, phase=name)
        rec = ctx.arm_record(r)
        steps = [x for x in rec.completed_steps if x != LOAD_STEP]
        ctx.store.add_arm(dataclasses.replace(rec, status="running", completed_steps=steps))
        ctx.progress.note(f"{r.arm.name}: {', '.join(redo)} again (split by the stop)")
    ctx.store.flush()


MIRROR_LEAD_S = 1.0  # a mirrored episode's runs build their clients, then start together


def mirrored(keys: Sequence[Key], call: Callable[[Key, float], None]) -> None:
    """``call(key, start_at)`` for every key at once, one thread each, all given one
    ``start_at`` (``time.perf_counter()``, ``MIRROR_LEAD_S`` ahead): each run's load generator
    sends its episode's first request then, so every scheduled request goes to one process of
    each arm at the same instant. The collector is frozen here first, once (``loadgen.gcfreeze``:
    no run's collection pauses another's setup in the lead). Returns when every run has
    drained. Ctrl-C (which reaches the main thread only) stops every run in flight as it would
    stop one (``armrun.interrupt_all``), waits for them to keep what was confirmed, and is
    raised again. The wait is on events the threads set, never ``Thread.join``: a join that
    Ctrl-C interrupts can mark a running thread stopped (CPython 3.11's
    ``_wait_for_tstate_lock``), and the pilot would go on while it runs."""
    interrupts_cleared()
    ended = {k: threading.Event() for k in keys}

    def one(key: Key, at: float) -> None:
        try:
            with contextlib.suppress(KeyboardInterrupt):  # stopped by the main thread's Ctrl-C
                call(key, at)
        finally:
            ended[key].set()

    threads: dict[Key, threading.Thread] = {}
    with gcfreeze.held():
        at = time.perf_counter() + MIRROR_LEAD_S
        try:  # from the first start on: Ctrl-C may come while the threads start
            for k in keys:
                name = f"mirror-{k[0]}-p{k[1]}"
                threads[k] = threading.Thread(target=one, args=(k, at), name=name, daemon=True)
                threads[k].start()
            for k in keys:
                while not ended[k].wait(0.2):  # Ctrl-C reaches the main thread between waits
                    pass
        except KeyboardInterrupt:
            interrupt_all("interrupted (Ctrl-C)")
            for k, t in threads.items():
                if t.ident is not None:  # it started (a start Ctrl-C cut short may not have)
                    ended[k].wait(30)
            raise
        finally:  # the interrupt was this episode's: later runs in this process start again
            interrupts_cleared()


HEADROOM = 0.85  # of the memory available before the first start: the pilot, the load generator
# and the quality checks need the rest


def _available_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def processes_that_fit(
    available: int | None, rss: Mapping[str, int], arms: Sequence[str], processes: int
) -> str | None:
    """None when ``processes`` per arm fit in ``HEADROOM`` of ``available`` at the resident
    memory measured so far (an arm not measured yet counts as the largest measured); else why
    not, naming the field and the largest value that fits. Checked after every start, so a
    pilot that cannot hold its processes stops before anything is measured.

        >>> gib = 2**30
        >>> processes_that_fit(24 * gib, {"b": gib}, ["b", "s"], 4) is None
        True
        >>> print(processes_that_fit(24 * gib, {"b": gib}, ["b", "s"], 12))
        episodes.processes 12: 24 engine processes of about 1.0 GiB each need 24.0 GiB, and 20.4 GiB (85% of the 24.0 GiB available before the first start) is what they may take -> set episodes.processes to at most 10
    """
    if not available or not rss:
        return None
    each = [rss.get(a, max(rss.values())) for a in arms]
    need = processes * sum(each)
    room = HEADROOM * available
    if need <= room:
        return None
    fits = int(room // sum(each))
    gib = 2**30
    fix = (
        f"set episodes.processes to at most {fits}"
        if fits >= 1
        else "free memory or run fewer arms: not even one process per arm fits"
    )
    return (
        f"episodes.processes {processes}: {processes * len(arms)} engine processes of about "
        f"{sum(each) / len(each) / gib:.1f} GiB each need {need / gib:.1f} GiB, and "
        f"{room / gib:.1f} GiB ({HEADROOM:.0%} of the {available / gib:.1f} GiB available before "
        f"the first start) is what they may take -> {fix}"
    )


class EpisodeRun:
    """The episode design's execution (module docstring)."""

    def __init__(
        self, pilot: PilotContext, runs: Sequence[RunPlan], design: dict[str, Any]
    ) -> None:
        self.p = pilot
        self.runs = list(runs)
        self.design = design
        self.failed: list[str] = []
        self.steps: dict[tuple[str, int], ArmSteps] = {}
        self._failing = threading.Lock()

    def _steps(self) -> dict[tuple[str, int], ArmSteps]:
        p = self.p
        out: dict[tuple[str, int], ArmSteps] = {}
        bases: dict[int, ArmSteps] = {}
        for r in self.runs:
            rec = p.arm_record(r)
            if r.arm.role == PLANTED:
                s: ArmSteps = PlantedSteps(
                    p, r, rec, bases=bases, factor=float(self.design["planted"])
                )
            elif r.arm.role == WITHIN:
                own = r.arm.name[: -len(K0)]
                s = WithinSteps(p, r, rec, of={j: x for (a, j), x in out.items() if a == own})
            elif r.arm.name == self.design["baseline"] and self.design.get("in_place"):
                own = self.design["in_place"]
                s = InPlaceSteps(p, r, rec, of={j: x for (a, j), x in out.items() if a == own})
            else:
                s = ArmSteps(p, r, rec)
                s.fingerprint = True
            if r.arm.name == self.design["baseline"]:
                bases[r.process] = s
            out[(r.arm.name, r.process)] = s
        return out

    def _call(self, key: tuple[str, int], step: Callable[[ArmSteps], None]) -> None:
        """``step`` on the run ``key`` (gone already: nothing); a run that fails leaves the
        rotation with every run its failure puts in doubt (``_sharing``). Safe from the threads
        of a mirrored episode: one failure is handled at a time."""
        s = self.steps.get(key)
        if s is None:
            return
        try:
            step(s)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # one run failing does not lose the others
            with self._failing:
                self._failed(key, s, exc)

    def _failed(self, key: tuple[str, int], s: ArmSteps, exc: Exception) -> None:
        if key in self.steps:
            gone = [self.steps.pop(k) for k in self._sharing(key, exc)]
            for t in gone:
                if t is s or self.p.arm_record(t.run).status != "complete":
                    self.failed.append(t.run.arm.name)
                    self.p.record_failure(t.run, exc)
            for t in sorted(gone, key=lambda t: not isinstance(t, Reaching)):
                t.stop()

    def _sharing(self, key: tuple[str, int], exc: BaseException) -> list[tuple[str, int]]:
        """``key``, and every other run on its engine process where the process itself is in
        doubt: its switch did not answer (its strategy is unknown), or the run that started it
        failed (the process is gone). A run's own error (a proxy, the load generator) is its
        alone."""
        s = self.steps[key]
        if not isinstance(exc, SwitchFailed) and isinstance(s, Reaching):
            return [key]
        owner = owner_of(s)
        return [key] + [k for k, t in self.steps.items() if k != key and owner_of(t) is owner]

    def _episode(self, name: str) -> None:
        """Episode ``name`` on every arm: in the design's order, or mirrored all at once."""
        ep = self.design["episodes"][name]
        keys = []
        for arm in ep["order"]:
            key = (arm, int(ep["process"][arm]))
            run = self.steps[key].run if key in self.steps else None
            if run is not None and name in phases_left(self.p, run):
                keys.append(key)
        if self.design.get("design") == "mirrored" and len(keys) > 1:
            mirrored(keys, lambda key, at: self._call(key, lambda s: s.load([name], at)))
            return
        for key in keys:
            self._call(key, lambda s: s.load([name]))

    def _keys_of(self, name: str) -> list[str]:
        return [eta.load_key(s.run.run_id, [name]) for s in self.steps.values()]

    def _episodes(self) -> None:
        """The blocks of episodes, a look after each that leaves episodes to run, the budget
        checked before every episode not yet complete (``pilot.run.looks``); then the last look.
        A resumed pilot walks the same blocks: its complete episodes are neither run nor
        dropped again, and its looks already run are not repeated."""
        looks = Looks(self.p, self.design, self._keys_of)
        order = blocks(self.design)
        flat = [n for b in order for n in b]
        pending = {n for s in self.steps.values() for n in phases_left(self.p, s.run)}
        done: list[str] = []
        for j, block in enumerate(order):
            for name in block:
                if name in pending:
                    looks.trim([n for n in flat[flat.index(name) :] if n in pending])
                if looks.runs(name):
                    if name in pending:
                        self._episode(name)
                        pending.discard(name)
                    done.append(name)
            ahead = [n for b in order[j + 1 :] for n in b]
            looks.trim([n for n in ahead if n in pending])
            if any(looks.runs(n) for n in ahead) and j >= len(looks.lk["ran"]):
                looks.look(j, done, ahead)
        for s in self.steps.values():  # the episodes not run leave the runs
            if s.run.phases is not None:
                s.run.phases = tuple(n for n in s.run.phases if looks.runs(n))
            if LOAD_STEP not in s.rec.completed_steps and not phases_left(self.p, s.run):
                s.done(LOAD_STEP)
        looks.final(done)

    def run(self) -> list[str]:
        p = self.p
        self.steps = self._steps()
        available = _available_bytes()  # before the first start
        rss: dict[str, int] = {}  # arm -> its first process's resident memory
        own = [  # the arms with processes of their own
            a
            for a in self.design["arms"]
            if a != PLANTED
            and not a.endswith(K0)
            and not (self.design.get("in_place") and a == self.design["baseline"])
        ]
        try:
            for key, s in list(self.steps.items()):  # one at a time: each start on an idle machine
                self._call(key, lambda s: s.start())
                if key in self.steps:
                    snap = p.snapshot_at_start(s.run, s.held.engine())
                    if snap is not None and snap.rss_bytes and s.run.arm.name in own:
                        rss.setdefault(s.run.arm.name, int(snap.rss_bytes))
                    fit = processes_that_fit(available, rss, own, int(self.design["processes"]))
                    if fit is not None:
                        raise PilotConfigError(fit)
            self._episodes()
            # the runs that reach a process first: the speculative arm's compatibility suite,
            # whose last probe can end an engine, comes after the in-place baseline's
            for key in sorted(self.steps, key=lambda k: not isinstance(self.steps[k], Reaching)):
                self._call(key, lambda s: s.finish())
        except KeyboardInterrupt:
            for s in self.steps.values():
                latest = p.arm_record(s.run)
                if latest.status != "complete":
                    p.store.add_arm(dataclasses.replace(latest, status="interrupted"))
            raise
        finally:  # the planted proxies and in-place arms first, then the engines behind them
            for s in sorted(self.steps.values(), key=lambda s: not isinstance(s, Reaching)):
                s.stop()
        return self.failed
