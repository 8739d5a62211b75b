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
measured phases stay clean. ``summarize`` is a pure function of the drill's records and events.

    >>> from specpilot.records import RequestRecord
    >>> recs = [RequestRecord("r", "s", "drill", "g", f"drill-{i}", i * 1.0, "ok", sent_t=i * 1.0,
    ...         first_content_t=i + 0.1, done_t=i + 0.5, deadline_s=2.0, ttft_slo_s=1.0,
    ...         served_k=3 if i < 3 else 0) for i in range(10)]
    >>> d = summarize(recs, requested_t=2.5, in_force_t=2.5001, back_t=None, run_id="r", arm="s",
    ...               kind="runtime_switch", goodput_baseline=1.0, window_s=2.0)
    >>> d.status, d.interrupted, d.delayed, round(d.switch_in_force_s, 1), d.recovery_s
    ('done', 0, 0, 0.5, 0.5)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx

from specpilot.records import DRILL_PHASE, DrillRecord, RequestRecord, ScheduledRequest

FAILED = ("error", "timeout", "rejected", "cancelled")


def drill_schedule(requests: Sequence[ScheduledRequest], phase: str) -> list[ScheduledRequest]:
    """The requests of ``phase`` again, as the ``drill`` phase (same prompts, same times)."""
    picked = [r for r in requests if r.phase == phase and not r.warmup]
    if not picked:
        raise ValueError(f"drill.phase {phase!r} has no requests in the schedule")
    return [replace(r, phase=DRILL_PHASE) for r in picked]


def on_time(r: RequestRecord) -> bool:
    """ok, first content within the group's TTFT SLO, done within its deadline."""
    if r.status != "ok" or r.sent_t is None or r.done_t is None:
        return False
    if r.ttft_slo_s is not None and (
        r.first_content_t is None or r.first_content_t - r.sent_t > r.ttft_slo_s
    ):
        return False
    return r.deadline_s is None or r.done_t - r.scheduled_t <= r.deadline_s


def goodput(records: Sequence[RequestRecord], duration_s: float) -> float:
    """On-time completions per second over a phase (every scheduled request counted)."""
    return sum(on_time(r) for r in records) / duration_s if duration_s > 0 else 0.0


def _overlaps(r: RequestRecord, a: float, b: float) -> bool:
    start = r.sent_t if r.sent_t is not None else r.scheduled_t
    end = r.done_t if r.done_t is not None else start
    return start <= b and end >= a


def recovery_time(
    records: Sequence[RequestRecord], from_t: float, target: float, window_s: float, until_t: float
) -> float | None:
    """Seconds after ``from_t`` until on-time completions per second over the next
    ``window_s`` first reach ``target`` (None: not before ``until_t``)."""
    done = sorted(r.done_t for r in records if on_time(r) and r.done_t is not None)
    if target <= 0:
        return 0.0
    need = target * window_s
    step = window_s / 8
    t = from_t
    while t + window_s <= until_t + 1e-9:
        n = sum(1 for x in done if t <= x < t + window_s)
        if n >= need - 1e-9:
            return max(0.0, t - from_t)
        t += step
    return None


def summarize(
    records: Sequence[RequestRecord],
    *,
    requested_t: float,
    in_force_t: float | None,
    back_t: float | None,
    run_id: str,
    arm: str,
    kind: str,
    goodput_baseline: float | None,
    window_s: float,
    events: Sequence[dict[str, Any]] = (),
    back_in_force_s: float | None = None,
) -> DrillRecord:
    """The drill's record from its phase's requests (pure).

    ``in_force_t``: when the switch was in force; for a runtime switch the client-side proof
    is the first request sent after the call that the server served with k = 0, so the record
    uses the later of the two. ``interrupted``: requests that failed in [requested, in force +
    window]; ``delayed``: ok requests in that span that missed their TTFT SLO or deadline.
    """
    first_plain = min(
        (
            r.sent_t
            for r in records
            if r.sent_t is not None and r.sent_t >= requested_t and r.served_k == 0
        ),
        default=None,
    )
    observed = in_force_t
    if kind == "runtime_switch" and first_plain is not None:
        observed = max(in_force_t or first_plain, first_plain)
    end = (observed or requested_t) + window_s
    span = [r for r in records if _overlaps(r, requested_t, end)]
    interrupted = sum(r.status in FAILED or r.status == "not_sent" for r in span)
    delayed = sum(r.status == "ok" and not on_time(r) for r in span)
    last = max((r.done_t for r in records if r.done_t is not None), default=requested_t)
    stop = back_t if back_t is not None else last
    recovery = None
    if goodput_baseline is not None and observed is not None:
        recovery = recovery_time(records, observed, goodput_baseline, window_s, stop)
        if recovery is not None:
            recovery += observed - requested_t
    status = "done" if observed is not None else "failed"
    return DrillRecord(
        run_id=run_id,
        arm=arm,
        phase=DRILL_PHASE,
        kind=kind,
        status=status,
        reason="" if observed is not None else "the switch was never observed in force",
        requested_t=requested_t,
        in_force_t=observed,
        switch_in_force_s=None if observed is None else observed - requested_t,
        recovery_s=recovery,
        goodput_baseline=goodput_baseline,
        interrupted=interrupted,
        delayed=delayed,
        switched_back_t=back_t,
        switch_back_s=back_in_force_s,
        events=list(events),
        detail={
            "window_s": window_s,
            "requests_in_window": len(span),
            "first_plain_request_t": first_plain,
            "on_time_definition": "ok, TTFT <= group SLO, E2E <= deadline (quality not yet known)",
        },
    )


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
        """-> (requested_t, in_force_t) on this host's monotonic clock."""
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
        saved = self._saved or {"default": 0}
        t0 = time.perf_counter()
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
        current: Any,
        make_plain: Callable[[], Any],
        make_spec: Callable[[], Any],
        start_timeout_s: float,
    ) -> None:
        self.current = current
        self.make_plain = make_plain
        self.make_spec = make_spec
        self.timeout = start_timeout_s

    def _swap(self, make: Callable[[], Any]) -> tuple[float, float]:
        t0 = time.perf_counter()
        self.current.stop()
        self.current = make()
        self.current.start(self.timeout)
        return t0, time.perf_counter()

    def off(self) -> tuple[float, float]:
        return self._swap(self.make_plain)

    def on(self) -> tuple[float, float]:
        return self._swap(self.make_spec)
