"""What the pilot shows while it runs: arm, step, requests done/failed, ETA.

On a terminal a one-line live status (rich) is refreshed twice a second; elsewhere
(``specpilot.terminal.live``: in CI or when stderr is not a terminal) one plain line per step
edge, so logs stay short.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from specpilot.terminal import live


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0, int(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


@dataclass
class PilotProgress:
    """Call ``step(arm, what)`` at each edge and ``requests(done, failed, total)`` while a load
    phase runs; ``eta_s`` is the planned time left (the orchestrator keeps it up to date)."""

    quiet: bool | None = None  # None: plain lines unless specpilot.terminal.live()
    arm: str = ""
    what: str = ""
    counts: dict[str, int] = field(default_factory=lambda: {"done": 0, "failed": 0, "total": 0})
    eta_s: float | None = None
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
                self._line(), console=Console(stderr=True), refresh_per_second=2, transient=True
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def _line(self) -> str:
        c = self.counts
        load = f"  {c['done']}/{c['total']} done, {c['failed']} failed" if c["total"] else ""
        return (
            f"[{_fmt_s(time.monotonic() - self.started)}] {self.arm}: {self.what}{load}"
            f"  ETA {_fmt_s(self.eta_s)}"
        )

    def step(self, arm: str, what: str, eta_s: float | None = None) -> None:
        self.arm, self.what = arm, what
        self.counts = {"done": 0, "failed": 0, "total": 0}
        if eta_s is not None:
            self.eta_s = eta_s
        if self._live is not None:
            self._live.update(self._line())
        else:
            print(self._line(), file=sys.stderr, flush=True)

    def requests(self, done: int, failed: int, total: int) -> None:
        self.counts = {"done": done, "failed": failed, "total": total}
        if self._live is not None:
            self._live.update(self._line())

    def note(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, file=sys.stderr, flush=True)
