"""What the pilot shows while it runs: arm, step, requests done/failed, ETA.

On a terminal a one-line live status (rich) is redrawn twice a second, its elapsed time and
ETA read afresh at each redraw (the ETA counts down inside a step: ``pilot.eta.remaining``); elsewhere
(``specpilot.terminal.live``: in CI or when stderr is not a terminal) one plain line per step
edge, so logs stay short.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from specpilot.pilot.eta.remaining import EtaClock
from specpilot.terminal import live


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0, int(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


@dataclass
class PilotProgress:
    """Call ``step(arm, what)`` at each edge and ``requests(done, failed, total)`` while a load
    phase runs; ``clock`` times the pilot's planned steps (the orchestrator sets its plan and
    times each step with it) and gives the ETA."""

    quiet: bool | None = None  # None: plain lines unless specpilot.terminal.live()
    arm: str = ""
    what: str = ""
    counts: dict[str, int] = field(default_factory=lambda: {"done": 0, "failed": 0, "total": 0})
    clock: EtaClock = field(default_factory=EtaClock)
    started: float = field(default_factory=time.monotonic)
    _live: Any = None

    def __post_init__(self) -> None:
        if self.quiet is None:
            self.quiet = not live()

    def __enter__(self) -> PilotProgress:
        if not self.quiet:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                console=Console(stderr=True),
                refresh_per_second=2,
                transient=True,
                get_renderable=self._line,
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    @property
    def eta_s(self) -> float | None:
        """Seconds left by the plan (None before the plan is set)."""
        return self.clock.eta_s()

    def _line(self) -> str:
        c = self.counts
        load = f"  {c['done']}/{c['total']} done, {c['failed']} failed" if c["total"] else ""
        return (
            f"[{_fmt_s(time.monotonic() - self.started)}] {self.arm}: {self.what}{load}"
            f"  ETA {_fmt_s(self.eta_s)}"
        )

    def step(self, arm: str, what: str) -> None:
        self.arm, self.what = arm, what
        self.counts = {"done": 0, "failed": 0, "total": 0}
        if self._live is not None:
            self._live.refresh()
        else:
            print(self._line(), file=sys.stderr, flush=True)

    def requests(self, done: int, failed: int, total: int) -> None:
        self.counts = {"done": done, "failed": failed, "total": total}

    def note(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, file=sys.stderr, flush=True)
