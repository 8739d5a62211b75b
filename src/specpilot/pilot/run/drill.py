"""The rollback drill (R8): with an arm under peak load, switch speculation off, measure the
interruption, the time until the switch is in force and until goodput is back at the
baseline's level; then switch it back on.

Two ways to switch, as the engine allows:

- ``runtime_switch``: the builtin server's admin API (``PUT /admin/strategy``, k = 0); a new
  request resolves its strategy at arrival, requests in flight keep theirs.
- ``restart``: engines that need one (llama.cpp): stop the server, start it without
  speculation on the same port, later restart it with speculation. Requests that arrive while
  it is down fail: that is the interruption a real rollback costs.

The drill replays the pilot's peak phase once more as a separate ``drill`` phase, so the
measured phases stay clean; ``replay_s`` cuts the replay after the switch back and its recovery
window (nothing later is read).

The drill's metrics (``summarize``, ``recovery_time``) are analysis: ``analysis.rollback.drill``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx

from specpilot.backends.protocol import Backend
from specpilot.records import DRILL_PHASE, DrillRecord, ScheduledRequest


def drill_schedule(
    requests: Sequence[ScheduledRequest], phase: str, replay_s: float | None = None
) -> list[ScheduledRequest]:
    """The requests of ``phase`` again, as the ``drill`` phase (same prompts, same times), those
    sent in its first ``replay_s`` seconds (None: all).

        >>> rs = [ScheduledRequest(i, i * 2.0, "peak", "g", "p", [], 4) for i in range(5)]
        >>> [r.send_t for r in drill_schedule(rs, "peak", replay_s=5.0)]
        [0.0, 2.0, 4.0]
    """
    picked = [r for r in requests if r.phase == phase and not r.warmup]
    if not picked:
        raise ValueError(f"drill.phase {phase!r} has no requests in the schedule")
    if replay_s is not None:
        picked = [r for r in picked if r.send_t < replay_s]
    return [replace(r, phase=DRILL_PHASE) for r in picked]


def not_possible(run_id: str, arm: str, reason: str) -> DrillRecord:
    return DrillRecord(
        run_id=run_id, arm=arm, phase=DRILL_PHASE, kind="none", status="not_possible", reason=reason
    )


class RuntimeSwitch:
    """The builtin server's admin switch: ``off()`` sets k = 0 for every scope, ``on()``
    restores the table it replaced."""

    kind = "runtime_switch"

    def __init__(self, endpoint: str, token: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}
        self._saved: dict[str, Any] | None = None

    def _put(self, scope: str, k: int) -> float:
        r = httpx.put(
            self.endpoint + "/admin/strategy",
            json={"scope": scope, "k": k},
            headers=self.headers,
            timeout=10.0,
        )
        r.raise_for_status()
        return float(r.json().get("in_force_after_s", 0.0))

    def off(self) -> tuple[float, float]:
        """-> (requested_t, in_force_t) on this host's monotonic clock. The table ``on()``
        restores is read at the first ``off()`` only: a switch kept for a process's life
        (``pilot.run.planted.Switched``) never takes a table left at k = 0 for the one to restore."""
        if self._saved is None:
            got = httpx.get(self.endpoint + "/admin/strategy", headers=self.headers, timeout=10.0)
            got.raise_for_status()
            self._saved = got.json()
        t0 = time.perf_counter()
        server_s = self._put("default", 0)
        for tag in (self._saved or {}).get("tags", {}):
            self._put(f"tag:{tag}", 0)
        for model in (self._saved or {}).get("models", {}):
            self._put(f"model:{model}", 0)
        return t0, t0 + server_s

    def on(self) -> tuple[float, float]:
        t0 = time.perf_counter()
        if self._saved is None:  # off() never read the table: nothing was switched
            return t0, t0
        saved = self._saved
        server_s = self._put("default", int(saved.get("default", 0)))
        for tag, k in saved.get("tags", {}).items():
            self._put(f"tag:{tag}", int(k))
        for model, k in saved.get("models", {}).items():
            self._put(f"model:{model}", int(k))
        return t0, t0 + server_s


class RestartSwitch:
    """Switch by restarting the engine (llama.cpp): the same port, speculation off, then on."""

    kind = "restart"

    def __init__(
        self,
        current: Backend,
        make_plain: Callable[[], Backend],
        make_spec: Callable[[], Backend],
        start_timeout_s: float,
    ) -> None:
        self.current = current
        self.make_plain = make_plain
        self.make_spec = make_spec
        self.timeout = start_timeout_s

    def _swap(self, make: Callable[[], Backend]) -> tuple[float, float]:
        t0 = time.perf_counter()
        self.current.stop()
        self.current = make()
        self.current.start(self.timeout)
        return t0, time.perf_counter()

    def off(self) -> tuple[float, float]:
        return self._swap(self.make_plain)

    def on(self) -> tuple[float, float]:
        return self._swap(self.make_spec)
