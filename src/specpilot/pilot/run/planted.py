"""The runs that reach another run's engine process. The planted arm: the baseline's processes
(in place: the speculative ones switched off) reached through a proxy that dilates every
latency the client sees by exactly 1 + f (``loadgen.dilate.DilatingProxy``). Its true effect
against the baseline is known (+f), so the pilot must find it: the report prints what it found
next to the A/A line, and a load level where it was not found cannot carry a direction for any
candidate. It serves no quality pass, compatibility suite or drill (it is the baseline's
engine), and it is never a candidate. A speculative process switched off at run time serves
the ``within`` second estimate, or, with ``episodes.in_place``, the baseline itself.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from specpilot.backends.protocol import Backend, Manifest, request_headers
from specpilot.loadgen.dilate import DilatingProxy
from specpilot.pilot.run import armrun
from specpilot.pilot.run.context import Held
from specpilot.pilot.run.drill import RuntimeSwitch
from specpilot.pilot.run.steps import ArmSteps
from specpilot.records import ArmRecord, MetricSnapshot, ResponseExtras

if TYPE_CHECKING:
    from specpilot.pilot.run.context import PilotContext, RunPlan
    from specpilot.pilot.run.drill import RuntimeSwitch


class _Through:
    """A backend reached through another run's process: its name, description, response
    parsing and credentials are that process's; ``kill`` is refused (the process is not its
    own to end)."""

    def __init__(self, base: Backend) -> None:
        self.base = base
        self.name = base.name

    @property
    def headers(self) -> Mapping[str, str]:
        return request_headers(self.base)

    def kill(self) -> None:
        raise RuntimeError(f"{self.base.name}: a run reaching another's process cannot kill it")

    def describe(self) -> Manifest:
        return self.base.describe()

    def response_extras(
        self, obj: Mapping[str, object], headers: Mapping[str, str] | None = None
    ) -> ResponseExtras:
        return self.base.response_extras(obj, headers)


class PlantedBackend(_Through):
    """The baseline process's backend seen through the dilating proxy: its endpoint is the
    proxy's; scrapes and response parsing are the baseline engine's own."""

    def __init__(self, base: Backend, factor: float) -> None:
        super().__init__(base)
        self.proxy = DilatingProxy(base.endpoint, factor)

    @property
    def endpoint(self) -> str:
        return str(self.proxy.url)

    def start(self, timeout_s: float | None = None) -> None:
        self.proxy.start()

    def stop(self) -> None:  # the proxy only: the engine is the baseline's
        self.proxy.stop()

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot:
        return self.base.scrape(run_id, arm, phase, label)


class Reaching(ArmSteps):
    """A run that reaches another run's process: it starts and stops no engine."""

    def reached(self) -> ArmSteps:
        """The run whose process this one reaches (itself a reaching run, or the owner)."""
        raise NotImplementedError


def owner_of(steps: ArmSteps) -> ArmSteps:
    """The run that started the engine process ``steps`` runs on."""
    while isinstance(steps, Reaching):
        steps = steps.reached()
    return steps


class SwitchFailed(RuntimeError):
    """The run-time switch did not answer: the process's strategy is unknown, so every run on
    it leaves the rotation (``pilot.run.episode_run``)."""


class Switched(Reaching):
    """A run on a speculative process with speculation switched off at run time (the builtin
    server's admin switch) for each of its episodes, and on again after."""

    of: dict[int, ArmSteps]  # the speculative arm's run on each process

    def reached(self) -> ArmSteps:
        return self.of[self.run.process]

    def switch(self) -> RuntimeSwitch:
        """The process's switch, one for its life (every run reaching it shares it): the
        table it restores is the process's as started, whatever an earlier failure left."""
        held = self.reached().held  # the process's: its backend, and now its switch
        if held.switch is None:
            held.switch = RuntimeSwitch(self.url, self.p.admin_token)
        return held.switch

    def load(self, phases: list[str] | None = None, start_at: float | None = None) -> None:
        switched_off(self.switch(), lambda: super(Switched, self).load(phases, start_at))


class PlantedSteps(Reaching):
    """One planted run: in front of baseline process ``run.process`` (``bases`` by process);
    where the baseline is a speculative process switched off in place, switched off too."""

    def __init__(
        self,
        pilot: PilotContext,
        run: RunPlan,
        rec: ArmRecord,
        *,
        bases: dict[int, ArmSteps],
        factor: float,
    ) -> None:
        super().__init__(pilot, run, rec)
        self.bases = bases
        self.factor = factor

    def reached(self) -> ArmSteps:
        return self.bases[self.run.process]

    def _start(self) -> None:
        base = self.bases[self.run.process]
        backend = PlantedBackend(base.held.engine(), self.factor)
        backend.start()
        self.held = Held(backend)
        self.url, self.model, self.headers = backend.endpoint, base.model, base.headers
        how = "every latency the client sees dilated by 1 + factor (loadgen.dilate)"
        reaching(self, base, "planted", {"factor": self.factor, "upstream": base.url, "how": how})

    def load(self, phases: list[str] | None = None, start_at: float | None = None) -> None:
        base = self.bases[self.run.process]
        if not isinstance(base, Switched):
            super().load(phases, start_at)
            return
        switched_off(base.switch(), lambda: super(PlantedSteps, self).load(phases, start_at))

    def finish(self) -> None:
        replay_done(self)


class InPlaceBackend(_Through):
    """A speculative process seen as its own plain arm: the same endpoint; stopping it stops
    nothing (the process is the speculative arm's). Its scrapes keep the counters (speculation
    is off in its episodes) and leave out the process's memory: that is the speculative arm's,
    draft included, and the baseline's own was not measured."""

    @property
    def endpoint(self) -> str:
        return str(self.base.endpoint)

    def start(self, timeout_s: float | None = None) -> None:
        return None

    def stop(self) -> None:
        return None

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot:
        snap = self.base.scrape(run_id, arm, phase, label)
        return dataclasses.replace(
            snap,
            rss_bytes=None,
            gpu_memory_bytes=None,
            draft_weight_bytes=None,
            draft_kv_bytes=None,
        )


class WithinSteps(Switched):
    """One run of a speculative arm's process with speculation switched off at run time for
    each of its episodes (``Switched``): against the speculative arm's runs of the same
    process, the process effect cancels."""

    def __init__(
        self, pilot: PilotContext, run: RunPlan, rec: ArmRecord, *, of: dict[int, ArmSteps]
    ) -> None:
        super().__init__(pilot, run, rec)
        self.of = of

    def _start(self) -> None:
        spec = self.of[self.run.process]
        self.held = Held(InPlaceBackend(spec.held.engine()))
        self.url, self.model = spec.url, spec.model
        how = (
            "the speculative process with k = 0 for every scope during its episodes (the "
            "builtin server's runtime switch), on again after each"
        )
        reaching(self, spec, "within", {"how": how})

    def finish(self) -> None:
        replay_done(self)


class InPlaceSteps(WithinSteps):
    """The baseline of an ``episodes.in_place`` pilot: the speculative arm's process
    ``run.process`` switched off for each of its episodes, and on its first process for the
    quality pass and the compatibility suite (the baseline's answers, from the same process)."""

    def finish(self) -> None:
        steps = set(self.rec.completed_steps)
        done = "quality" in steps and ("compat" in steps or not self.p.cfg.compat.enabled)
        if self.run.process > 0 or done:  # nothing runs on the process: no switch to fail
            ArmSteps.finish(self)
            return
        switched_off(self.switch(), lambda: ArmSteps.finish(self))


def switched_off(switch: RuntimeSwitch, work: Callable[[], None]) -> None:
    """``work()`` with speculation off on the switch's process, on again after, whatever
    happened; a switch that does not answer raises ``SwitchFailed`` (``EpisodeRun`` then fails
    every run of the process), an error of ``work`` itself is raised as it is."""
    try:
        try:
            switch.off()
        except Exception as exc:
            raise SwitchFailed(f"speculation could not be switched off: {exc}") from exc
        work()
    finally:
        try:
            switch.on()
        except Exception as exc:
            raise SwitchFailed(f"speculation could not be switched on again: {exc}") from exc


def reaching(steps: ArmSteps, of: ArmSteps, key: str, info: dict[str, object]) -> None:
    """Record a run that reaches another run's (warm) process: its manifest names that run
    under ``key`` (``analysis.episodes.celltest.physical_of`` reads it), the frozen settings are its."""
    manifest = {
        key: {"of_run": of.run.run_id, **info},
        "hardware": of.rec.manifest.get("hardware", {}),
        "frozen_sha256": of.rec.manifest_sha256,
    }
    if "capacity" in of.rec.manifest:  # the slots it serves with (the simulator reads them)
        manifest["capacity"] = of.rec.manifest["capacity"]
    steps.save(
        dataclasses.replace(
            steps.rec,
            status="running",
            manifest=manifest,
            manifest_sha256=of.rec.manifest_sha256,
            started_unix=steps.rec.started_unix or time.time(),
        )
    )
    steps.warm = True


def replay_done(steps: ArmSteps) -> None:
    """An arm that only replays episodes on another arm's processes (planted, switched off in
    place): complete once its episodes are; no drill, quality pass or compatibility suite."""
    if armrun.LOAD_STEP not in steps.rec.completed_steps:
        raise RuntimeError(f"arm {steps.run.arm.name}: measured phases left")
    steps.save(dataclasses.replace(steps.rec, status="complete", finished_unix=time.time()))
