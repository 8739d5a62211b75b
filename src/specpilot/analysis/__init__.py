"""Analysis: pure functions over records (no I/O, no clock).

``analyze(PilotData, AnalysisConfig)`` runs every section; the modules hold one concern each:
``rounds`` / ``round_summary`` / ``verify_cost`` / ``leviathan`` / ``tune_k`` (R2), ``e2e`` /
``traces`` (R4), ``requests`` / ``load`` / ``paired`` / ``capacity`` (R5, R6), ``quality``
(R7), ``cost`` / ``decision`` / ``verdict`` / ``rollback`` (R8).

    >>> from specpilot.analysis import analyze
    >>> from specpilot.records import PilotData, PilotRecord
    >>> analyze(PilotData(PilotRecord("p", "empty", {}, "", "0", 0.0))).verdicts
    []
"""

from typing import Any

from specpilot.analysis.rounds import (
    WindowMetrics,
    cost_per_token,
    expected_committed,
    leviathan_alpha,
    leviathan_speedup,
    mean_acceptance_length,
    speedup_from_costs,
    window_metrics,
)

_LAZY = {  # numpy/pydantic-heavy: imported on first use so ``analysis.rounds`` stays light
    "AnalysisConfig": "specpilot.analysis.config",
    "VerdictConfig": "specpilot.analysis.config",
    "amdahl": "specpilot.analysis.e2e",
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
