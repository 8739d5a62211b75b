"""Records: what analysis reads: per-request round aggregates, verify costs, chunk gaps, PilotData (see ``specpilot.records``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specpilot.records.engine import PrefillRecord, RoundRecord
from specpilot.records.gates import (
    CompatRecord,
    ConsistencyRecord,
    DrillRecord,
    OutputRecord,
    QualityRecord,
)
from specpilot.records.load import MetricSnapshot, RequestRecord
from specpilot.records.pilot import ArmRecord, PhaseRecord, PilotRecord

# -- what analysis reads (filled by the store's typed reader, ``store.read_pilot``) ----------


@dataclass
class RequestRounds:
    """One request's rounds, aggregated (the store computes these in SQL; 10M rounds stay
    in DuckDB). Times are the request's batch share (each round's time / its batch size).

    pos_proposed[i-1]: rounds that proposed >= i drafts; pos_accepted[i-1]: rounds that
    accepted >= i (per-position acceptance = pos_accepted / pos_proposed).
    accepted_hist[j]: rounds with a proposal that accepted exactly j drafts.
    """

    run_id: str
    arm: str
    phase: str
    task_group: str
    request_id: str
    rounds: int
    spec_rounds: int  # rounds that proposed > 0
    proposed: int
    accepted: int
    committed: int
    draft_s: float
    verify_s: float
    overhead_s: float
    truncated_rounds: int = 0
    mean_batch_size: float = 1.0
    pos_proposed: list[int] = field(default_factory=list)
    pos_accepted: list[int] = field(default_factory=list)
    accepted_hist: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class VerifyCostPoint:
    """One point of the verify-cost curve: target forward time for ``tokens`` new tokens per
    row at ``batch_size`` (DESIGN.md: v(n) = median(n) / median(1), same batch size).

    source: ``rounds`` (verify_s of a run's rounds: tokens = proposed + 1) or ``calibration``
    (the engine's measurement at load, from its manifest); ``dtype`` the weight format.
    """

    arm: str
    source: str
    tokens: int
    batch_size: int
    samples: int
    median_s: float
    p10_s: float | None = None
    p90_s: float | None = None
    dtype: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ChunkGaps:
    """Inter-chunk gaps of the ok requests of one (run, arm, phase, task group), columnar.

    gap_s[i] is the time between a chunk and the previous one of the same request (first
    chunks excluded), tokens[i] the tokens that chunk carried (ITL per token = gap / tokens).
    The store returns numpy arrays; any sequence of floats / ints works.
    """

    run_id: str
    arm: str
    phase: str
    task_group: str
    gap_s: Sequence[float]
    tokens: Sequence[int]


@dataclass
class StepCadence:
    """The engine loop's step time as measured: from one decode step's start to the next's
    (``t_start`` of the rounds, the rows of a step share it), for steps of ``batch_size`` rows
    with no prefill between them. Unlike the rounds' own times it includes the loop's work
    outside the round (callbacks, streaming, the scheduler): what a simulator's step costs."""

    arm: str
    phase: str
    batch_size: int
    samples: int
    median_s: float
    p10_s: float
    p90_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PilotData:
    """Every record of one pilot, typed: what ``analysis`` and ``report`` take.

    Built by the store's reader (``specpilot.store.read_pilot(path)``),
    or by hand in tests. Raw rounds and chunks stay in the file at scale: ``request_rounds``,
    ``verify_costs``, ``chunk_gaps`` and ``step_cadence`` are their SQL aggregates; ``rounds`` is filled only
    when asked for (small pilots, per-round plots).
    """

    pilot: PilotRecord
    arms: list[ArmRecord] = field(default_factory=list)
    phases: list[PhaseRecord] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    request_rounds: list[RequestRounds] = field(default_factory=list)
    prefills: list[PrefillRecord] = field(default_factory=list)
    verify_costs: list[VerifyCostPoint] = field(default_factory=list)
    chunk_gaps: list[ChunkGaps] = field(default_factory=list)
    step_cadence: list[StepCadence] = field(default_factory=list)
    snapshots: list[MetricSnapshot] = field(default_factory=list)
    quality: list[QualityRecord] = field(default_factory=list)
    outputs: list[OutputRecord] = field(default_factory=list)
    consistency: list[ConsistencyRecord] = field(default_factory=list)
    compat: list[CompatRecord] = field(default_factory=list)
    drills: list[DrillRecord] = field(default_factory=list)
    rounds: list[RoundRecord] = field(default_factory=list)
    # Columnar copies a reader may hand over at scale instead of (or beside) the lists above:
    # numpy arrays keyed by the record's field names, one row per record, numbers as floats
    # with NaN for None. ``request_columns``: RequestRecord's fields (client stages as
    # "client_stage:<name>" columns); ``request_rounds_columns``: RequestRounds' fields with
    # pos_proposed / pos_accepted as 2-D (rows x positions) arrays. When set, analysis reads
    # them and does not iterate ``requests`` / ``request_rounds`` (1M requests in seconds).
    request_columns: dict[str, Any] | None = None
    request_rounds_columns: dict[str, Any] | None = None
