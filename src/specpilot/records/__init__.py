"""Records exchanged between modules (field names are a contract; see docs/DESIGN.md).

Plain dataclasses, no behaviour beyond conversion to dicts. Every module that measures
something yields these; the store writes them; analysis reads them.

Identity in a pilot file (one DuckDB file = one pilot):

- ``pilot_id`` names the pilot (``PilotRecord``); one file holds one pilot.
- ``run_id`` names one execution of one arm: arm ``speculative``, repetition 1 of a pilot is
  one run (``ArmRecord`` rows are keyed by ``run_id``). Every measured record carries
  ``run_id`` and ``arm``; ``repetition`` lives on the ``ArmRecord`` of its run.
- ``request_id`` is the load generator's id (``f"{phase}-{index:06d}"``): the same prompt at
  the same schedule slot has the same id in every arm, which is what paired comparisons join
  on; ``prompt_id`` names the prompt itself (joins quality). Rounds and prefills persisted
  from a load run carry the load generator's ``request_id``; the server's own id is kept on
  the request as ``server_request_id``.
- No field is named after an SQL keyword: ``task_group``, ``check_name``.
"""

from __future__ import annotations

from specpilot.records.analysis import (
    ChunkGaps,
    PilotData,
    RequestRounds,
    StepCadence,
    VerifyCostPoint,
)
from specpilot.records.engine import GenerationResult, PrefillRecord, RoundRecord
from specpilot.records.gates import (
    COMPAT_STATUSES,
    DRILL_PHASE,
    DRILL_STATUSES,
    SEVERITIES,
    CompatRecord,
    ConsistencyRecord,
    DrillRecord,
    OutputRecord,
    QualityRecord,
)
from specpilot.records.load import (
    DURING,
    EDGE_LABELS,
    EPISODE_SEP,
    MOST_EPISODES,
    SCRAPE_FAILED,
    STATUSES,
    ChunkTiming,
    MetricSnapshot,
    RequestRecord,
    ResponseExtras,
    ScheduledRequest,
    episode_of,
    level_of,
)
from specpilot.records.pilot import (
    ARM_ROLES,
    DERIVED_TIMES_ENGINES,
    ENGINES,
    TOTALS_ENGINES,
    ArmRecord,
    HardwareFacts,
    PhaseRecord,
    PilotRecord,
    ResourceBudget,
    StrategySpec,
)

__all__ = [
    "ARM_ROLES",
    "COMPAT_STATUSES",
    "DERIVED_TIMES_ENGINES",
    "DRILL_PHASE",
    "DRILL_STATUSES",
    "DURING",
    "EDGE_LABELS",
    "ENGINES",
    "EPISODE_SEP",
    "MOST_EPISODES",
    "SCRAPE_FAILED",
    "SEVERITIES",
    "STATUSES",
    "TOTALS_ENGINES",
    "ArmRecord",
    "ChunkGaps",
    "ChunkTiming",
    "CompatRecord",
    "ConsistencyRecord",
    "DrillRecord",
    "GenerationResult",
    "HardwareFacts",
    "MetricSnapshot",
    "OutputRecord",
    "PhaseRecord",
    "PilotData",
    "PilotRecord",
    "PrefillRecord",
    "QualityRecord",
    "RequestRecord",
    "RequestRounds",
    "ResourceBudget",
    "ResponseExtras",
    "RoundRecord",
    "ScheduledRequest",
    "StepCadence",
    "StrategySpec",
    "VerifyCostPoint",
    "episode_of",
    "level_of",
]
