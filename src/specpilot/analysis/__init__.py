"""Analysis: pure functions over records (no I/O, no clock).

``analyze(PilotData, AnalysisConfig)`` (``pilot``) runs every section; ``config`` holds what
it may be told and ``plan`` which arm is compared with which. The rest lives in rooms, each
standing only on the rooms below it (``tests/test_layering.py``):

- ``base``: the request table, the records by load level, coverage, columns, statistics;
- ``episodes``: one cell's effect by processes and episodes (in place, one pool, two pools)
  and the sequential looks;
- ``comparison``: two arms cell by cell, the A/A control, machine contention;
- ``mechanism``: rounds, the verify-cost curve, Leviathan, the choice of k (R2);
- ``service``: load cells, capacity and memory, cost, end to end, traces (R4-R6);
- ``rollback``: the alerting rules, the drill, post-rollback parity (R8);
- ``verdicts``: the verdict and what it rests on, the quality gates (R7, R8).

    >>> from specpilot.analysis import analyze
    >>> from specpilot.records import PilotData, PilotRecord
    >>> analyze(PilotData(PilotRecord("p", "empty", {}, "", "0", 0.0))).verdicts
    []
"""

from typing import Any

from specpilot.analysis.mechanism.rounds import (
    WindowMetrics,
    cost_per_token,
    expected_committed,
    leviathan_alpha,
    leviathan_speedup,
    mean_acceptance_length,
    speedup_from_costs,
    window_metrics,
)

_LAZY = {  # numpy/pydantic-heavy: imported on first use so ``analysis.mechanism.rounds`` stays light
    "AnalysisConfig": "specpilot.analysis.config",
    "VerdictConfig": "specpilot.analysis.config",
    "amdahl": "specpilot.analysis.service.e2e",
    "PilotAnalysis": "specpilot.analysis.pilot",
    "analyze": "specpilot.analysis.pilot",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specpilot.analysis' has no attribute {name!r}")


__all__ = [
    "AnalysisConfig",
    "PilotAnalysis",
    "VerdictConfig",
    "WindowMetrics",
    "amdahl",
    "analyze",
    "cost_per_token",
    "expected_committed",
    "leviathan_alpha",
    "leviathan_speedup",
    "mean_acceptance_length",
    "speedup_from_costs",
    "window_metrics",
]
