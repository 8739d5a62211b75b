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

    def __init__(self, pilot: PilotContext, runs: Sequence[RunPlan]) -> None:
        self.p = pilot
        self.runs = list(runs)
        self.failed: list[str] = []
        self.steps: list[ArmSteps] = []

    def _fail(self, steps: ArmSteps, exc: BaseException) -> None:
        self.failed.append(steps.run.arm.name)
        self.p.record_failure(steps.run, exc)
        steps.stop()
        self.steps.remove(steps)

    def _each(self, steps: Sequence[ArmSteps], call: str, *args: Any) -> None:
        """``call`` on each arm in turn (each step timed for the ETA by ``ArmSteps``); an arm
        that fails leaves the rotation, its steps still to come out of the ETA."""
        for s in list(steps):
            try:
                getattr(s, call)(*args)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # one arm failing does not lose the others
                self._fail(s, exc)

    def run(self) -> list[str]:
        p = self.p
        self.steps = [ArmSteps(p, r, p.arm_record(r)) for r in self.runs]
        self.steps = [s for s in self.steps if s.rec.status != "complete"]
        phases = [ph.name for ph in p.schedule.phases if not ph.warmup]
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
