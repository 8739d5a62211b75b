"""The interleaved measurement design: every arm's engine up at once, the phases replayed on
each arm in turn, so a machine that drifts hits every arm alike.

Sequential arm runs (one arm started, measured, checked and stopped after the other) put
minutes between the arms' measurements; on a shared VM the machine's speed moves 10-40% over
minutes, and that drift lands in the comparison as a "difference". Here all arms of a
repetition are started first (each cold start timed on its own, the others idle), then for
each measured phase every arm replays that phase in turn, back to back, in an order that
alternates from phase to phase (forward, then reversed: A B C, C B A, A B C, ...), so the
drift between two arms' runs of a phase is what a few tens of seconds bring, and its sign
changes. Then each arm's drill, compatibility suite and quality pass run as before (one arm
busy at a time), and every engine stops.

An arm whose start fails, or that fails in a phase, is recorded as failed and leaves the
rotation; Ctrl-C stops every engine and marks the arms in flight as interrupted.

    >>> [o for o in phase_orders(["a", "b", "c"], ["off", "peak", "burst"])]
    [('off', ['a', 'b', 'c']), ('peak', ['c', 'b', 'a']), ('burst', ['a', 'b', 'c'])]
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from specpilot.pilot.context import PilotContext, RunPlan
from specpilot.pilot.steps import ArmSteps


def phase_orders(arms: Sequence[str], phases: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(phase, arm order) for each phase: forward, reversed, forward, ..."""
    return [(ph, list(arms) if i % 2 == 0 else list(reversed(arms))) for i, ph in enumerate(phases)]


def design_note(arms: Sequence[str], phases: Sequence[str]) -> str:
    orders = "; ".join(f"{ph}: {' '.join(o)}" for ph, o in phase_orders(arms, phases))
    return (
        f"measurement design: interleaved ({len(arms)} engines up at once, each phase replayed "
        f"on every arm in turn, order alternating by phase: {orders})"
    )


class Interleaved:
    """Runs one repetition's runs interleaved (module docstring)."""

    def __init__(
        self, pilot: PilotContext, runs: Sequence[RunPlan], later_repetitions: int = 0
    ) -> None:
        self.p = pilot
        self.runs = list(runs)
        self.failed: list[str] = []
        self.steps: list[ArmSteps] = []
        self.later = later_repetitions  # repetitions still to run after this one
        self.left: dict[str, int] = {}  # step kind -> calls still to make in this repetition
        self.spent: dict[str, list[float]] = {}  # step kind -> seconds each call took
        self.total: dict[str, int] = {}  # step kind -> calls in one repetition
        self.loads_done: dict[str, int] = {}  # arm -> its load calls so far
        self.phases_n = 0  # measured phases each arm loads

    def eta(self) -> float:
        """Seconds left: the calls still to make at the mean measured time of their kind (a
        kind not measured yet: the mean of all calls so far, else 30 s), and as long again
        per later repetition."""
        done = [t for v in self.spent.values() for t in v]
        guess = sum(done) / len(done) if done else 30.0

        def mean(kind: str) -> float:
            v = self.spent.get(kind)
            return sum(v) / len(v) if v else guess

        left = sum(n * mean(kind) for kind, n in self.left.items())
        whole = sum(mean(kind) * n for kind, n in self.total.items())
        return left + self.later * whole

    def _fail(self, steps: ArmSteps, exc: BaseException) -> None:
        self.failed.append(steps.run.arm.name)
        self.p.record_failure(steps.run, exc)
        steps.stop()
        self.steps.remove(steps)

    def _each(self, steps: Sequence[ArmSteps], call: str, *args: Any) -> None:
        for s in list(steps):
            t0 = time.perf_counter()
            failed: Exception | None = None
            try:
                getattr(s, call)(*args)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # one arm failing does not lose the others
                failed = exc
            self.left[call] = max(0, self.left.get(call, 0) - 1)
            if call == "load":
                self.loads_done[s.run.arm.name] = self.loads_done.get(s.run.arm.name, 0) + 1
            if failed is None:
                self.spent.setdefault(call, []).append(time.perf_counter() - t0)
            else:  # its own calls still to come will not be made: out of the ETA
                self._fail(s, failed)
                if call == "start":
                    self.left["load"] = max(0, self.left.get("load", 0) - self.phases_n)
                elif call == "load":
                    rest = self.phases_n - self.loads_done.get(s.run.arm.name, 0)
                    self.left["load"] = max(0, self.left.get("load", 0) - rest)
                if call != "finish":
                    self.left["finish"] = max(0, self.left.get("finish", 0) - 1)
            self.p.progress.eta_s = self.eta()

    def run(self) -> list[str]:
        p = self.p
        self.steps = [ArmSteps(p, r, p.arm_record(r)) for r in self.runs]
        self.steps = [s for s in self.steps if s.rec.status != "complete"]
        phases = [ph.name for ph in p.schedule.phases if not ph.warmup]
        n = len(self.steps)
        self.phases_n = len(phases)
        self.total = {"start": n, "load": n * len(phases), "finish": n}
        self.left = dict(self.total)
        p.progress.eta_s = self.eta()
        try:
            for s in list(self.steps):  # one at a time: each cold start on an idle machine
                self._each([s], "start")
                if s in self.steps:
                    p.snapshot_at_start(s.run, s.holder["backend"])
            names = [s.run.arm.name for s in self.steps]
            for phase, order in phase_orders(names, phases):
                by_name = {s.run.arm.name: s for s in self.steps}
                self._each([by_name[n] for n in order if n in by_name], "load", [phase])
            self._each(self.steps, "finish")
        except KeyboardInterrupt:
            for s in self.steps:
                latest = p.arm_record(s.run)
                if latest.status != "complete":
                    p.store.add_arm(dataclasses.replace(latest, status="interrupted"))
            raise
        finally:
            for s in self.steps:
                s.stop()
        return self.failed
