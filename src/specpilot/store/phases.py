"""``PhaseRecorder``: at every phase edge of a load run, scrape the engine and write the phase.

Orchestration-neutral: it needs a store, a run id and arm, a way to scrape (a backend's
``scrape``, ``backends.scrape_endpoint`` bound to a URL, or None) and the phases' planned
durations. ``attach(runner)`` writes each phase as ``planned`` and hooks the runner; then each
start writes the phase as ``running`` with the clock anchor (``t_run``, ``wall_t_run``) and a
``before`` snapshot, each end ``complete`` (or ``interrupted`` with ``cut_t`` when a stop cut
it) and an ``after`` snapshot; with ``local_engine`` (the engine is this process's child; not
an endpoint given by URL, whose own CPU would read as other load) or a ``cpu`` sampler
(``backends.facts.cpu_sample``) a complete phase also gets the CPU used outside the tree. A
phase that never started stays ``planned``. A failed scrape is written as a snapshot whose
``raw`` says why (the run goes on). With ``interval_s`` > 0 the engine is also scraped every
``interval_s`` while a phase runs (``store.series.SeriesSampler``): snapshots labelled
``DURING`` with the phase they fall in, written when the phase ends; ``stop()`` ends that
thread. The edges stay the only snapshots counter deltas are taken over.

    >>> from specpilot.loadgen import LoadConfig, LoadRunner             # doctest: +SKIP
    >>> runner = LoadRunner.for_schedule(schedule, cfg, sink=store.sink)  # doctest: +SKIP
    >>> PhaseRecorder(store, "run-1", "speculative", backend.scrape,      # doctest: +SKIP
    ...               {p.name: p.duration_s for p in schedule.phases}).attach(runner)
    >>> result = runner.run()                                             # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from specpilot.records import DURING, SCRAPE_FAILED, MetricSnapshot, PhaseRecord
from specpilot.store.series import SeriesSampler
from specpilot.store.store import Store

Scrape = Callable[[str, str, str, str], MetricSnapshot]  # (run_id, arm, phase, label)

if TYPE_CHECKING:
    from specpilot.backends.facts import CpuSample


class PhaseRecorder:
    def __init__(
        self,
        store: Store,
        run_id: str,
        arm: str,
        scrape: Scrape | None,
        durations: Mapping[str, float],
        cpu: Callable[[], CpuSample | None] | None = None,
        *,
        local_engine: bool = False,
        interval_s: float = 0.0,
    ) -> None:
        if local_engine and cpu is None:  # the engine is this process's child
            from specpilot.backends.facts import cpu_sample

            cpu = cpu_sample
        self.store = store
        self.run_id = run_id
        self.arm = arm
        self.scrape = scrape
        self.durations = dict(durations)
        self.phases: dict[str, PhaseRecord] = {}
        self.snapshots: list[MetricSnapshot] = []
        self._runner: Any = None
        self._lock = threading.Lock()
        self.cpu = cpu
        self._cpu_at_start: dict[str, CpuSample | None] = {}
        self.series = (
            SeriesSampler(lambda p: self._scrape(p, DURING), store.add_snapshots, interval_s)
            if interval_s > 0 and scrape is not None
            else None
        )

    def attach(self, runner: Any) -> PhaseRecorder:
        """Write the runner's phases as planned and call ``on_phase`` at each edge."""
        self._runner = runner
        starts = dict(runner.phase_starts)
        t = 0.0
        for name in runner.phase_names:  # back-to-back timing: nominal offsets in plan order
            starts.setdefault(name, t)
            t = starts[name] + self.durations.get(name, 0.0)
        for name in runner.phase_names:
            duration = float(self.durations.get(name, 0.0))
            scheduled = int(runner.phase_sizes[name])
            self.phases[name] = PhaseRecord(
                run_id=self.run_id,
                arm=self.arm,
                phase=name,
                planned_start_s=starts[name],
                planned_end_s=starts[name] + duration,
                offered_rate=scheduled / duration if duration > 0 else 0.0,
                scheduled=scheduled,
                warmup=all(r.warmup for r in runner.schedule if r.phase == name),
            )
        self.store.add_phases(self.phases.values())
        runner.on_phase = self.on_phase
        return self

    def on_phase(self, name: str, edge: str, t: float) -> None:
        """The runner's hook: scrape now, then write the phase's new state and the snapshot;
        the series inside the phase starts after its ``before`` and is written before its
        ``after``."""
        if edge != "start" and self.series is not None:
            self.series.close(name, t)
        snap = self._scrape(name, "before" if edge == "start" else "after")
        if edge == "start" and self.series is not None:
            self.series.open(name)
        sample = self._cpu_sample()
        runner = self._runner
        with self._lock:
            rec = self.phases[name]
            if edge == "start":
                self._cpu_at_start[name] = sample
                rec = dataclasses.replace(
                    rec,
                    status="running",
                    actual_start_t=t,
                    t_run=getattr(runner, "t_run", None),
                    wall_t_run=getattr(runner, "wall_t_run", None),
                )
            elif name in getattr(runner, "cut_phases", ()):
                rec = dataclasses.replace(rec, status="interrupted", cut_t=t)
            else:
                from specpilot.backends.facts import cpu_contention

                use = cpu_contention(self._cpu_at_start.get(name), sample)
                other, steal = use if use is not None else (None, None)
                rec = dataclasses.replace(
                    rec,
                    status="complete",
                    actual_end_t=t,
                    other_cpu_cores=other,
                    steal_fraction=steal,
                )
            self.phases[name] = rec
        self.store.add_phases([rec])
        if snap is not None:
            self.snapshots.append(snap)
            self.store.add_snapshots([snap])

    def stop(self) -> None:
        """End the series' thread (the run is over)."""
        if self.series is not None:
            self.series.stop()

    def _cpu_sample(self) -> CpuSample | None:
        try:
            return self.cpu() if self.cpu is not None else None
        except Exception:  # the figure is lost, not the phase
            return None

    def _scrape(self, phase: str, label: str) -> MetricSnapshot | None:
        if self.scrape is None:
            return None
        try:
            return self.scrape(self.run_id, self.arm, phase, label)
        except Exception as exc:  # recorded, not fatal: the phase's counters are then unknown
            return MetricSnapshot(
                self.run_id,
                self.arm,
                phase,
                label,
                time.perf_counter(),
                "unknown",
                {},
                f"{SCRAPE_FAILED}{type(exc).__name__}: {exc}",
            )
