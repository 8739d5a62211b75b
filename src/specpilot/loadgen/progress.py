"""A live progress line (sent / done / failed / rate) on stderr, where ``specpilot.terminal.live``
allows one (a terminal outside CI); silent otherwise.

Refreshed from the event loop at 2 Hz (no refresh thread competing with the sender).

    >>> ProgressDisplay(10, False, {"sent": 0, "done": 0, "failed": 0}).enabled
    False
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from specpilot.terminal import live


class ProgressDisplay:
    """The load run's progress line (``rich``), fed by the runner's counts."""

    def __init__(self, total: int, requested: bool | None, counts: dict[str, int]) -> None:
        self.total = total
        self.counts = counts
        self.enabled = live(requested)
        self._progress: Any = None
        self._task_id: Any = None

    async def run(self) -> None:
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("[bold]load[/]"),
            BarColumn(),
            TextColumn("{task.fields[line]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            auto_refresh=False,
            transient=False,
        )
        self._progress.start()
        self._task_id = self._progress.add_task("load", total=self.total, line="")
        t_prev, done_prev = time.perf_counter(), 0
        while True:
            await asyncio.sleep(0.5)
            now = time.perf_counter()
            c = self.counts
            rate = (c["done"] - done_prev) / max(now - t_prev, 1e-9)
            t_prev, done_prev = now, c["done"]
            line = (
                f"sent {c['sent']}  done {c['done']}/{self.total}  failed {c['failed']}  "
                f"in flight {c['sent'] - c['done']}  {rate:.1f} req/s"
            )
            self._progress.update(self._task_id, completed=c["done"], line=line)
            self._progress.refresh()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.update(self._task_id, completed=self.counts["done"])
            self._progress.refresh()
            self._progress.stop()
            self._progress = None
