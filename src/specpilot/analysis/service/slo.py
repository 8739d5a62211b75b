"""The groups' percentile conditions checked on each load cell (``definitions.SLOCondition``).

A percentile condition is a property of a cell (arm, task group, load level), not of a
request: ``p<P>(metric) <= max``, where p<P> is the cell's own figure in the load table
(``service.load``: numpy's linear method over every scheduled steady-state request, one that
never finished counted as +inf, so a percentile among them is not reached and fails). Per
request, on time stays TTFT <= ``slo.ttft_s`` and E2E <= the deadline. A check over no rows
(ITL without chunk records) is not evaluated: ``passed`` None.

The conditions come from the schedule every arm replayed (``PilotRecord.schedule``: its
``groups`` section holds each group's SLO as resolved, deadlines from the probe included).

    >>> from specpilot.definitions import SLOCondition
    >>> p50, p99 = SLOCondition("tpot_ms", 50, 20), SLOCondition("tpot_ms", 99, 20)
    >>> check(p50, 60, 0.009).passed, check(p99, 60, 0.031).to_dict()["observed"]
    (True, 31.0)
    >>> check(p99, 60, None).passed, check(p99, 0, None).passed  # not reached; no rows
    (False, None)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.definitions import SLOCondition


@dataclass(frozen=True)
class SLOCheck:
    """One condition on one cell: the threshold and the observed percentile, both in the
    metric's unit (``observed`` None: not reached, or no rows), and whether it held."""

    metric: str
    percentile: int
    threshold: float
    observed: float | None
    passed: bool | None  # None: not evaluated (no rows to take the percentile over)
    n: int  # requests (tokens, for ITL) the percentile is over

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "percentile": self.percentile,
            "threshold": self.threshold,
            "observed": self.observed,
            "pass": self.passed,
            "n": self.n,
        }

    def text(self) -> str:
        seen = "not reached" if self.observed is None else f"{self.observed:.4g}"
        return f"p{self.percentile} {self.metric} {seen} > {self.threshold:g}"


def check(cond: SLOCondition, n: int, observed_s: float | None) -> SLOCheck:
    """``cond`` on a cell whose p<P> of the quantity is ``observed_s`` (seconds; None: not
    reached, or no rows) over ``n`` rows."""
    observed = None if observed_s is None else observed_s / cond.scale
    passed = cond.met(observed_s) if n else None
    return SLOCheck(cond.metric, cond.percentile, cond.max, observed, passed, n)


def conditions_of(schedule: Mapping[str, Any] | None) -> dict[str, tuple[SLOCondition, ...]]:
    """group -> its percentile conditions, from a stored schedule (none: no conditions)."""
    out = {}
    for name, g in ((schedule or {}).get("groups") or {}).items():
        raw = ((g or {}).get("slo") or {}).get("conditions") or []
        if raw:
            out[name] = tuple(
                SLOCondition(c["metric"], int(c["percentile"]), float(c["max"])) for c in raw
            )
    return out


def failed(checks: Sequence[SLOCheck]) -> list[SLOCheck]:
    return [c for c in checks if c.passed is False]


__all__: Sequence[str] = ["SLOCheck", "check", "conditions_of", "failed"]
