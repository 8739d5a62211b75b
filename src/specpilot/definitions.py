"""DESIGN.md's round metrics, each defined once, as pure functions over ``RoundRecord``s.

A base module (like ``records``): the server's per-request summary and ``analysis`` both call
these, so the number a response carries and the number the report prints cannot drift apart.

    >>> from specpilot.records import RequestRecord, RoundRecord
    >>> rounds = [RoundRecord("r", 0, 4, 4, 5, 0, 0.1, 0), RoundRecord("r", 1, 4, 0, 1, 0, 0.1, 0)]
    >>> mean_acceptance_length(rounds), acceptance_rate(rounds)
    (3.0, 0.5)
"""

from __future__ import annotations

from collections.abc import Sequence

from specpilot.records import RequestRecord, RoundRecord


def mean_acceptance_length_from(committed: float, rounds: float) -> float | None:
    """Tokens committed per round from totals (None for no rounds): every path that has sums
    (the store's aggregates, an engine's counters, a response's summary) calls this one."""
    return committed / rounds if rounds else None


def acceptance_rate_from(accepted: float, proposed: float) -> float | None:
    """Accepted draft tokens / proposed ones from totals (None when nothing was proposed)."""
    return accepted / proposed if proposed else None


def mean_acceptance_length(rounds: Sequence[RoundRecord]) -> float | None:
    """Tokens committed per round, the correction/bonus token included: sum(committed) / rounds.

    vLLM's ``1 + accepted / drafts`` when no round was cut by EOS, a stop string or max_tokens;
    a cut round counts what it actually committed. None for no rounds.
    """
    return mean_acceptance_length_from(sum(r.committed for r in rounds), len(rounds))


def acceptance_rate(rounds: Sequence[RoundRecord]) -> float | None:
    """Accepted draft tokens / proposed draft tokens (None when nothing was proposed)."""
    return acceptance_rate_from(sum(r.accepted for r in rounds), sum(r.proposed for r in rounds))


def on_time(r: RequestRecord, key_failed: bool = False) -> bool:
    """DESIGN.md: status ok, its key quality checks pass (``key_failed`` False), TTFT (sent ->
    first content) <= the group's TTFT SLO and E2E (sent -> last byte) <= its deadline.
    ``analysis.base.requests.RequestTable.on_time`` is this over columns (latency part; goodput
    there removes the key failures)."""
    if key_failed or r.status != "ok" or r.sent_t is None or r.done_t is None:
        return False
    if r.ttft_slo_s is not None and (
        r.first_content_t is None or r.first_content_t - r.sent_t > r.ttft_slo_s
    ):
        return False
    return r.deadline_s is None or r.done_t - r.sent_t <= r.deadline_s


def goodput(records: Sequence[RequestRecord], duration_s: float) -> float:
    """On-time completions per second over a phase (every scheduled request counted)."""
    return sum(on_time(r) for r in records) / duration_s if duration_s > 0 else 0.0
