"""What a pilot measured, before any verdict: the sections ``analysis.decisions`` reads, each
built once by ``analysis.pilot.analyze`` and never changed after.

``Compared`` is the comparisons section (every cell, the A/A control, the planted arm's result
per level, the planner's prediction beside what was achieved); ``EndToEnd`` the stage shares,
the recommendations and the Amdahl checks; ``Measured`` every section a verdict reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.comparison import paired
from specpilot.analysis.comparison.aa import AAControl
from specpilot.analysis.mechanism.counters import CounterAcceptance
from specpilot.analysis.mechanism.leviathan import LeviathanGap
from specpilot.analysis.mechanism.round_summary import RoundsTable, RoundSummary
from specpilot.analysis.mechanism.verify_cost import VerifyCurve
from specpilot.analysis.service import capacity as cap
from specpilot.analysis.service import e2e, load
from specpilot.analysis.verdicts import planted as pl
from specpilot.analysis.verdicts import quality
from specpilot.analysis.verdicts.predicted import PredictionCheck


@dataclass(frozen=True)
class Compared:
    """The comparisons section."""

    comparisons: list[paired.PairedComparison]
    aa: AAControl | None  # the A/A control (None: no control arm and no planted arm)
    planted: list[pl.PlantedResult]  # per level: was the planted slowdown found
    predicted: list[PredictionCheck]


@dataclass(frozen=True)
class EndToEnd:
    """Where the task time goes (R3), and the projected speed-up beside the measured one."""

    stages: list[e2e.StageBreakdown]
    recommendations: list[e2e.TaskRecommendation]
    amdahl_checks: list[dict[str, Any]]


@dataclass(frozen=True)
class Rounds:
    """The per-round section, the decode speed-ups with their intervals."""

    table: RoundsTable | None
    rounds: list[RoundSummary]  # per arm, group, phase
    pooled: list[RoundSummary]  # per arm, group
    curves: list[VerifyCurve]
    gaps: list[LeviathanGap]


@dataclass(frozen=True)
class Measured:
    """Every measured section a verdict, a rollback rule or a cost reads."""

    table: RequestTable
    hardware: str
    load_cells: list[load.LoadCell]
    rounds: Rounds
    counters: dict[str, CounterAcceptance]
    quality_cells: list[quality.QualityCell]
    gates: list[quality.QualityGate]
    compared: Compared
    end_to_end: EndToEnd
    capacities: list[cap.Capacity]
    memory: list[cap.MemoryBudget]
    draft_concurrency: list[cap.DraftConcurrency]
