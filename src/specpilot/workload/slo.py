"""A group's ``slo:`` in the workload YAML (pydantic, the edge): per request, ``ttft_s`` and one
deadline (they decide on time); per cell, ``conditions`` (each passes or fails an arm's group
at one load level: ``definitions.SLOCondition``, ``analysis.service.slo``).

    >>> slo = SLOModel.model_validate({"ttft_s": 1, "deadline_s": 20,
    ...     "conditions": [{"metric": "tpot_ms", "percentile": 99, "max": 80}]})
    >>> slo.conditions[0].metric, SLOModel(ttft_s=1, deadline_s=20).model_dump()
    ('tpot_ms', {'ttft_s': 1.0, 'deadline_s': 20.0, 'unloaded_x': None})
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_serializer, model_validator

from specpilot.definitions import SLO_METRICS, SLO_PERCENTILES
from specpilot.validation import StrictModel

__all__: Sequence[str] = ["SLOConditionModel", "SLOModel"]


class SLOConditionModel(StrictModel):
    """A percentile condition: ``p<percentile>(metric) <= max`` over one cell (arm, group,
    load level), e.g. ``{metric: tpot_ms, percentile: 99, max: 80}`` (``definitions.SLOCondition``)."""

    # Literal over the tuples of definitions (one list of names); mypy wants them spelled out
    metric: Literal[SLO_METRICS] = Field(  # type: ignore[valid-type]
        description="ttft, tpot, itl or e2e (sent -> last byte, as the deadline), suffixed with the "
        "unit of max: _s or _ms"
    )
    percentile: Literal[SLO_PERCENTILES] = Field(  # type: ignore[valid-type]
        description="50, 90 or 99: the percentiles every load cell carries"
    )
    max: float = Field(gt=0, description="the threshold, in the metric's unit")


class SLOModel(StrictModel):
    """Per request (decides on time): ``ttft_s`` and one deadline (``deadline_s`` or
    ``unloaded_x``). Per cell (passes or fails it): ``conditions``, percentiles as users and
    vLLM's / SGLang's benchmarks state them, e.g.
    ``slo: {ttft_s: 1, deadline_s: 20, conditions: [{metric: tpot_ms, percentile: 99, max: 80}]}``.
    """

    ttft_s: float = Field(gt=0)
    deadline_s: float | None = Field(None, gt=0)
    unloaded_x: float | None = Field(
        None,
        gt=1.0,
        le=100.0,
        description="the deadline as this multiple of the baseline's unloaded task time, "
        "measured by a pilot's capacity probe (2: as good as the current service unloaded, "
        "with room for a queue that doubles it)",
    )
    conditions: list[SLOConditionModel] = Field(
        default_factory=list,
        description="percentile conditions, each a pass/fail of an (arm, group, load level) cell",
    )

    @model_validator(mode="after")
    def _one_deadline(self) -> SLOModel:
        if (self.deadline_s is None) == (self.unloaded_x is None):
            raise ValueError(
                "give one deadline: deadline_s (seconds), or unloaded_x (a multiple of the "
                "baseline's unloaded task time, measured by a pilot's capacity probe)"
            )
        seen = [(c.metric.rsplit("_", 1)[0], c.percentile) for c in self.conditions]
        twice = sorted({f"p{p} {q}" for q, p in seen if seen.count((q, p)) > 1})
        if twice:
            raise ValueError(
                f"conditions: {', '.join(twice)} given twice -> keep one threshold per "
                "metric and percentile"
            )
        return self

    @model_serializer(mode="wrap")
    def _without_empty_conditions(self, handler: Any) -> Any:
        # no conditions: the config dumps (and hashes) as before they existed, so a pilot
        # started then resumes
        out = handler(self)
        if isinstance(out, dict) and not self.conditions:
            out.pop("conditions", None)
        return out
