"""Phases of a load run: their start offsets, and their edges with the ``on_phase`` hooks.

An edge is ``("start", t)`` when a phase begins and ``("end", t)`` when its last request has
finished (``t``: that request's done time) or when a stop cuts it (``cut`` then names it).
Hooks run in order on one helper thread, so a slow scrape never delays a send.

    >>> seen = []
    >>> edges = PhaseEdges({"peak": 2}, lambda p, e, t: seen.append((p, e, t)))
    >>> _ = edges.edge("peak", "start", 1.0); edges.request_done("peak", 2.0)
    >>> edges.request_done("peak", 3.5); edges.close(); seen
    [('peak', 'start', 1.0), ('peak', 'end', 3.5)]
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from specpilot.errors import ConfigError

PhaseHook = Callable[[str, str, float], None]  # (phase, "start" | "end", t)


def phase_starts_for(
    phases: Iterable[Any], selected: Iterable[str] | None = None
) -> dict[str, float]:
    """Start offsets (s) of the selected phases on one timeline, in plan order.

    ``phases`` are a schedule's ``PhaseInfo`` (anything with ``name`` and ``duration_s``). A
    phase left out of the selection takes no time, so running only ``peak`` does not first wait
    through an off-peak phase; with every phase selected the offsets are ``PhaseInfo.start_s``.

        >>> from types import SimpleNamespace as P
        >>> plan = [P(name="warmup", duration_s=2.0), P(name="off", duration_s=60.0),
        ...         P(name="peak", duration_s=30.0)]
        >>> phase_starts_for(plan), phase_starts_for(plan, ["warmup", "peak"])
        ({'warmup': 0.0, 'off': 2.0, 'peak': 62.0}, {'warmup': 0.0, 'peak': 2.0})
    """
    keep = None if selected is None else set(selected)
    out: dict[str, float] = {}
    t = 0.0
    for p in phases:
        if keep is None or p.name in keep:
            out[p.name] = round(t, 6)
            t += float(p.duration_s)
    return out


def resolve_starts(names: list[str], given: Mapping[str, float] | None) -> dict[str, float]:
    """Each phase's start offset: given ones, or 0 for a schedule of one phase."""
    starts = dict(given or {})
    missing = [n for n in names if n not in starts]
    if missing and len(names) == 1:
        starts[missing[0]] = 0.0
    elif missing:
        raise ConfigError(
            f"phases {', '.join(missing)} have no start time: set the phase_starts option "
            "(phase_starts_for(schedule.phases, ...)), use LoadRunner.for_schedule, or "
            "phase_timing='back_to_back'"
        )
    return {n: float(starts[n]) for n in names}


class PhaseEdges:
    """Tracks which phases started, ended and were cut; calls the hook at each edge."""

    def __init__(self, sizes: Mapping[str, int], hook: PhaseHook | None) -> None:
        self.sizes = dict(sizes)
        self.hook = hook
        self.started: set[str] = set()
        self.ended: set[str] = set()
        self.cut: set[str] = set()
        self.notes: list[str] = []
        self._done: Counter[str] = Counter()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._futures: list[concurrent.futures.Future[None]] = []

    def edge(self, phase: str, edge: str, t: float) -> concurrent.futures.Future[None] | None:
        """Record the edge and queue the hook call; returns its future (None: no hook)."""
        (self.started if edge == "start" else self.ended).add(phase)
        if self.hook is None:
            return None
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="on_phase")
        fut = self._pool.submit(self._call, phase, edge, t)
        self._futures.append(fut)
        return fut

    def _call(self, phase: str, edge: str, t: float) -> None:
        assert self.hook is not None
        try:
            self.hook(phase, edge, t)
        except Exception as exc:  # a failed scrape must not end the run: it is reported
            self.notes.append(f"on_phase({phase!r}, {edge!r}) failed: {exc!r}")

    def request_done(self, phase: str, t: float, cut: bool = False) -> None:
        """One more request of ``phase`` finished at ``t``; the last one ends the phase.
        ``cut``: a stop ended this request, not the server: its phase ends as cut even when
        every request of it has an ending (a phase whose last requests were in flight at a
        Ctrl-C is not complete)."""
        if cut and phase not in self.ended:
            self.cut.add(phase)
        self._done[phase] += 1
        if (
            self._done[phase] == self.sizes.get(phase, 0)
            and phase in self.started
            and phase not in self.ended
        ):
            self.edge(phase, "end", t)

    def cut_open(self, order: Iterable[str], t: float) -> None:
        """End every started, unfinished phase at ``t`` as cut (the run stopped first)."""
        for phase in order:
            if phase in self.started and phase not in self.ended:
                self.cut.add(phase)
                self.edge(phase, "end", t)

    async def idle(self) -> None:
        """Wait (without blocking the event loop) until every queued hook call has run."""
        pending = [f for f in self._futures if not f.done()]
        if pending:
            await asyncio.to_thread(concurrent.futures.wait, pending)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
