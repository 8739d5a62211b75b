"""``SeriesSampler``: the engine's own figures every second or two while a phase runs.

One thread per run. ``open(phase)`` at a phase's start and ``close(phase, t_end)`` at its end
(``PhaseRecorder`` calls both from its edge hook); while a phase is open the thread calls
``scrape(phase)`` every ``interval_s`` (the first one ``interval_s`` after the start, the edge
snapshot being the figure at the start) and keeps what it returns, labelled ``DURING``. When
phases overlap (``phase_timing: schedule``), a tick falls in the latest started one. A phase's
snapshots are written together when it closes, those taken after its end left out; a phase
never closed (the process died) writes none, as its requests are rerun from its start.

A tick that takes longer than ``interval_s`` (a slow endpoint) delays the next one; ticks are
never queued up.

    >>> import time
    >>> from specpilot.records import MetricSnapshot
    >>> got = []
    >>> snap = lambda phase: MetricSnapshot("r", "a", phase, "during", time.perf_counter(), "e")
    >>> s = SeriesSampler(snap, got.extend, interval_s=0.05)
    >>> s.open("p"); time.sleep(0.18); s.close("p", time.perf_counter()); s.stop()
    >>> 2 <= len(got) <= 4 and {x.phase for x in got} == {"p"}
    True
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from specpilot.records import MetricSnapshot


class SeriesSampler:
    def __init__(
        self,
        scrape: Callable[[str], MetricSnapshot | None],
        write: Callable[[list[MetricSnapshot]], object],
        interval_s: float = 1.0,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.scrape = scrape
        self.write = write
        self.interval_s = interval_s
        self._open: list[str] = []  # in start order: the last is the current phase
        self._kept: dict[str, list[MetricSnapshot]] = {}
        self._cond = threading.Condition()
        self._due = 0.0
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.taken = 0  # every tick, kept or not (the overhead benchmark counts them)

    def open(self, phase: str) -> None:
        with self._cond:
            if not self._open:
                self._due = time.perf_counter() + self.interval_s
            self._open.append(phase)
            self._kept.setdefault(phase, [])
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="series", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def close(self, phase: str, t_end: float) -> None:
        """Write ``phase``'s snapshots taken up to ``t_end`` (perf_counter, the phase's end)."""
        with self._cond:
            if phase in self._open:
                self._open.remove(phase)
            kept = [s for s in self._kept.pop(phase, []) if s.t <= t_end]
            self._cond.notify_all()
        if kept:
            self.write(kept)

    def stop(self) -> None:
        """End the thread (after its tick in flight); phases still open write nothing."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _next_phase(self) -> str | None:
        """The phase of the next tick, once due (None: stopped)."""
        with self._cond:
            while not self._stopped:
                if not self._open:
                    self._cond.wait()
                    continue
                wait = self._due - time.perf_counter()
                if wait <= 0:
                    return self._open[-1]
                self._cond.wait(wait)
            return None

    def _run(self) -> None:
        while (phase := self._next_phase()) is not None:
            snap = self.scrape(phase)
            with self._cond:
                self.taken += 1
                self._due = max(self._due + self.interval_s, time.perf_counter())
                if snap is not None and phase in self._kept:
                    self._kept[phase].append(snap)
