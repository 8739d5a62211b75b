"""Analysis: pure functions over records (no I/O)."""

from specpilot.analysis.rounds import (
    WindowMetrics,
    cost_per_token,
    expected_committed,
    leviathan_speedup,
    speedup_from_costs,
    window_metrics,
)

__all__ = [
    "WindowMetrics",
    "cost_per_token",
    "expected_committed",
    "leviathan_speedup",
    "speedup_from_costs",
    "window_metrics",
]
