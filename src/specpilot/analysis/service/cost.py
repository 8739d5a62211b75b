"""Cost at equal quality and deadline (R8), never a latency change dressed up as a saving.

Per arm: device-seconds per 1,000 on-time tasks = devices x measured seconds / on-time tasks x
1000 (all measured phases), and the devices it would need at the target peak rate from its
capacity. A candidate's line is:

- ``not_comparable`` when it failed a quality gate (cost is compared at equal quality only);
- ``saving`` when resources go down: it needs fewer devices than the baseline at the target
  peak rate; ``cost_increase`` when it needs more;
- ``business_value`` when a value per on-time task is configured and it completes more on time;
- otherwise ``latency_change_no_cost_change``: the same devices serve the same load.

    >>> line = cost_line(ArmCost("base", 1, 100, 100, 90, 1000, None, 2.0, 2),
    ...                  ArmCost("spec", 1, 100, 100, 95, 1052.6, None, 2.0, 2), None, False)
    >>> line.kind
    'latency_change_no_cost_change'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specpilot.analysis.config import CostConfig
from specpilot.analysis.service.capacity import Capacity
from specpilot.analysis.service.load import LoadCell
from specpilot.records import ArmRecord


@dataclass(frozen=True)
class ArmCost:
    arm: str
    devices: float
    measured_s: float
    device_seconds: float
    on_time: int
    device_s_per_1000_on_time: float | None
    price_per_1000_on_time: float | None
    capacity_rps: float | None
    devices_at_peak: int | None  # devices needed at the target peak rate

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CostLine:
    baseline_arm: str
    candidate_arm: str
    kind: str  # saving | cost_increase | business_value | latency_change_no_cost_change | not_comparable
    text: str
    numbers: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def arm_costs(
    cells: Sequence[LoadCell],
    caps: Sequence[Capacity],
    arms: Sequence[ArmRecord],
    cfg: CostConfig,
) -> list[ArmCost]:
    """One ``ArmCost`` per arm from its pooled (``*``) load cells."""
    peak = cfg.target_peak_rate or max((c.offered_rate or 0.0 for c in cells), default=0.0)
    cap = {c.arm: c.capacity_rps for c in caps if c.task_group == "*"}
    out = []
    for name in sorted({c.arm for c in cells}):
        pooled = [c for c in cells if c.arm == name and c.task_group == "*"]
        rec = next((a for a in arms if a.arm == name), None)
        devices = cfg.devices_per_arm.get(name) or float(
            len(rec.budget.devices) if rec and rec.budget.devices else 1
        )
        measured = sum(c.duration_s for c in pooled)
        on_time = sum(c.on_time for c in pooled)
        dev_s = devices * measured
        per1000 = dev_s / on_time * 1000 if on_time else None
        price = (
            per1000 / 3600 * cfg.device_hour_price
            if per1000 is not None and cfg.device_hour_price is not None
            else None
        )
        c_rps = cap.get(name)
        need = math.ceil(peak / c_rps * devices - 1e-9) if c_rps and peak else None
        out.append(ArmCost(name, devices, measured, dev_s, on_time, per1000, price, c_rps, need))
    return out


def cost_line(
    base: ArmCost,
    cand: ArmCost,
    business_value: float | None,
    quality_failed: bool,
    currency: str = "USD",
) -> CostLine:
    """The one sentence the report may say about the candidate's cost (module docstring)."""
    nums: dict[str, Any] = {
        "baseline_devices_at_peak": base.devices_at_peak,
        "candidate_devices_at_peak": cand.devices_at_peak,
        "baseline_device_s_per_1000_on_time": base.device_s_per_1000_on_time,
        "candidate_device_s_per_1000_on_time": cand.device_s_per_1000_on_time,
    }

    def line(kind: str, text: str) -> CostLine:
        return CostLine(base.arm, cand.arm, kind, text, nums)

    if quality_failed:
        return line(
            "not_comparable",
            "not compared: the candidate failed a quality gate (cost is compared at equal quality)",
        )
    b, c = base.devices_at_peak, cand.devices_at_peak
    if b is not None and c is not None and c < b:
        return line(
            "saving",
            f"saving: {c} device(s) instead of {b} at the target peak rate (resources go down)",
        )
    if b is not None and c is not None and c > b:
        return line(
            "cost_increase", f"cost increase: {c} device(s) instead of {b} at the target peak rate"
        )
    extra = (
        cand.on_time / cand.measured_s - base.on_time / base.measured_s
        if cand.measured_s and base.measured_s
        else 0.0
    )
    if business_value is not None and extra > 0:
        per_hour = extra * 3600 * business_value
        nums["extra_on_time_per_hour"] = extra * 3600
        return line(
            "business_value",
            f"saving in business value: {extra * 3600:.0f} more on-time tasks per hour x {business_value:g} {currency} = {per_hour:.2f} {currency}/h (configured value)",
        )
    return line(
        "latency_change_no_cost_change",
        "latency change, no cost change: the same devices serve the same load",
    )
