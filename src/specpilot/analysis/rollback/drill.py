"""The rollback drill's metrics (R8), pure functions of the drill phase's records and events.

The drill itself (the switches, its schedule) is ``pilot.run.drill``; on time and goodput are
DESIGN.md's, from ``definitions`` (the drill's are latency only: the quality of its answers is
not known while it runs, so the record says so).

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

from collections.abc import Sequence
from typing import Any

from specpilot.definitions import on_time
from specpilot.records import DRILL_PHASE, DrillRecord, RequestRecord

FAILED = ("error", "timeout", "rejected", "cancelled")


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


def _observed(
    records: Sequence[RequestRecord], requested_t: float, in_force_t: float | None, kind: str
) -> tuple[float | None, float | None]:
    """When the switch was in force as the clients saw it, and the first request sent after
    the call that the server served with k = 0 (a runtime switch: the later of the two)."""
    first_plain = min(
        (
            r.sent_t
            for r in records
            if r.sent_t is not None and r.sent_t >= requested_t and r.served_k == 0
        ),
        default=None,
    )
    if kind == "runtime_switch" and first_plain is not None:
        return max(in_force_t or first_plain, first_plain), first_plain
    return in_force_t, first_plain


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
    observed, first_plain = _observed(records, requested_t, in_force_t, kind)
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
