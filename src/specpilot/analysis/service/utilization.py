"""What each load level means on the machine the pilot ran on: its offered rate as a fraction
of the baseline's sustainable rate, measured by the pilot's capacity probe (``pilot.run.capacity``)
before the episodes and stored with the schedule (``PilotRecord.schedule["capacity"]``).

A level given as ``target_utilization`` got ``utilization x capacity`` requests/s; a level given
as an absolute rate is stated the same way where the probe ran (``load.capacity_probe: true``),
so "1.0 req/s" reads as "0.3 of what this baseline sustains here" on one machine and "2.4x, an
overload" on another. Without a probe the utilization is ``None``: not measured, never guessed.

    >>> sched = {"capacity": {"sustainable_rps": 2.0}, "phases": [
    ...     {"name": "warmup", "duration_s": 1.0, "requests": 1, "warmup": True, "arrival": {}},
    ...     {"name": "off~01", "duration_s": 10.0, "requests": 6, "warmup": False,
    ...      "arrival": {"target_utilization": 0.3}},
    ...     {"name": "off~02", "duration_s": 10.0, "requests": 6, "warmup": False,
    ...      "arrival": {"target_utilization": 0.3}}]}
    >>> levels(sched)
    [{'level': 'off', 'offered_rps': 0.6, 'requests': 12, 'duration_s': 20.0, 'target_utilization': 0.3, 'utilization': 0.3}]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specpilot.records import level_of

__all__ = ["capacity_rps", "levels", "utilization"]


def capacity_rps(schedule: Mapping[str, Any] | None) -> float | None:
    """The sustainable rate the probe measured (requests/s), or None where none ran."""
    cap = (schedule or {}).get("capacity") or {}
    rps = cap.get("sustainable_rps")
    return float(rps) if isinstance(rps, int | float) and rps > 0 else None


def utilization(offered_rps: float | None, capacity: float | None) -> float | None:
    """``offered_rps`` as a fraction of ``capacity`` (None where either is unknown).

    >>> utilization(0.6, 2.0), utilization(0.6, None)
    (0.3, None)
    """
    if offered_rps is None or not capacity:
        return None
    return round(offered_rps / capacity, 3)


def levels(schedule: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Each measured load level of a stored schedule (its episode phases folded back into
    their level): offered rate, requests, seconds, the utilization it was given (or None) and
    the one it meant on this machine (or None without a probe)."""
    cap = capacity_rps(schedule)
    out: dict[str, dict[str, Any]] = {}
    for p in (schedule or {}).get("phases") or []:
        if p.get("warmup"):
            continue
        lv = out.setdefault(
            level_of(p["name"]),
            {
                "level": level_of(p["name"]),
                "requests": 0,
                "duration_s": 0.0,
                "target_utilization": (p.get("arrival") or {}).get("target_utilization"),
            },
        )
        lv["requests"] += int(p.get("requests") or 0)
        lv["duration_s"] += float(p.get("duration_s") or 0.0)
    rows = []
    for lv in out.values():
        rate = lv["requests"] / lv["duration_s"] if lv["duration_s"] > 0 else None
        rows.append(
            {
                "level": lv["level"],
                "offered_rps": round(rate, 4) if rate is not None else None,
                "requests": lv["requests"],
                "duration_s": round(lv["duration_s"], 3),
                "target_utilization": lv["target_utilization"],
                "utilization": utilization(rate, cap),
            }
        )
    return rows
