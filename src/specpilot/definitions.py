"""DESIGN.md's round metrics, each defined once, as pure functions over ``RoundRecord``s, and
the SLO's two kinds of condition (per request: ``on_time``; per cell: ``SLOCondition``).

A base module (like ``records``): the server's per-request summary and ``analysis`` both call
these, so the number a response carries and the number the report prints cannot drift apart.

    >>> from specpilot.records import RequestRecord, RoundRecord
    >>> rounds = [RoundRecord("r", 0, 4, 4, 5, 0, 0.1, 0), RoundRecord("r", 1, 4, 0, 1, 0, 0.1, 0)]
    >>> mean_acceptance_length(rounds), acceptance_rate(rounds)
    (3.0, 0.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


# -- SLOs as users write them ---------------------------------------------------------------
# A group's SLO has two kinds of condition (DESIGN.md, "Metric definitions"):
# - per request, deciding on time (``on_time`` above): TTFT <= slo.ttft_s and E2E <= the
#   deadline (slo.deadline_s, or slo.unloaded_x made seconds by the pilot's capacity probe);
# - per cell, a percentile condition (``SLOCondition``): p<P>(metric) <= max over one cell
#   (arm, task group, load level); it passes or fails the cell, never a single request.

# quantity -> what it is over; the percentile is numpy's linear method over these values
SLO_QUANTITIES = {
    "ttft": "TTFT of every scheduled request (no content: never reached)",
    "tpot": "TPOT of every scheduled request (not ok: never reached; ok with < 2 tokens: left out)",
    "itl": "ITL per token over the chunks of ok requests (one value per token)",
    "e2e": "E2E (sent -> last byte, as the deadline) of every scheduled request (not ok: never reached)",
}
SLO_UNITS = {"s": 1.0, "ms": 1e-3}  # the metric's suffix names the unit of its threshold
SLO_METRICS = tuple(f"{q}_{u}" for q in SLO_QUANTITIES for u in SLO_UNITS)
SLO_PERCENTILES = (50, 90, 99)  # the percentiles every load cell carries


@dataclass(frozen=True)
class SLOCondition:
    """``p<percentile>(metric) <= max`` over one cell; ``max`` in the metric's unit.

    >>> c = SLOCondition("tpot_ms", 99, 80.0)
    >>> c.quantity, c.max_s, c.met(0.075), c.met(0.081), c.met(None)
    ('tpot', 0.08, True, False, False)
    """

    metric: str  # one of SLO_METRICS: ttft_ms, tpot_ms, itl_ms, e2e_s, ...
    percentile: int  # one of SLO_PERCENTILES
    max: float

    def __post_init__(self) -> None:
        if self.metric not in SLO_METRICS:
            raise ValueError(f"SLO metric {self.metric!r}: one of {', '.join(SLO_METRICS)}")
        if self.percentile not in SLO_PERCENTILES:
            raise ValueError(f"SLO percentile {self.percentile}: one of {SLO_PERCENTILES}")

    @property
    def quantity(self) -> str:
        return self.metric.rsplit("_", 1)[0]

    @property
    def scale(self) -> float:
        """Seconds per unit of ``max``."""
        return SLO_UNITS[self.metric.rsplit("_", 1)[1]]

    @property
    def max_s(self) -> float:
        return self.max * self.scale

    def met(self, observed_s: float | None) -> bool:
        """Whether the cell's percentile (seconds; None: not reached, i.e. it falls among
        requests that never finished) is within the threshold."""
        return observed_s is not None and observed_s <= self.max_s

    def text(self) -> str:
        return f"p{self.percentile} {self.metric} <= {self.max:g}"
