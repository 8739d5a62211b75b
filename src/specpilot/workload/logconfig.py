"""The ``request_log`` arrival of a workload YAML (pydantic, the edge): a phase that replays a
production request log, read by :mod:`.requestlog`. ``WorkloadConfig`` checks that its routes
lead to groups of the workload; :mod:`.phases` reads the log.

    >>> a = RequestLogArrival(kind="request_log", path="requests.jsonl", route_field="model",
    ...                       routes={"llama-8b": "code", "default": "structured"}, window="peak")
    >>> a.window, a.time_scale, a.rate_cap
    ('peak', 1.0, None)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specpilot.validation import FieldProblem, StrictModel

__all__ = ["RequestLogArrival"]


class RequestLogArrival(StrictModel):
    """Times and request bodies from a production request log (:mod:`.requestlog` reads it):
    groups from ``route_field`` with ``routes``, from the log's ``group_field``, or drawn by
    the phase's weights; a window as ``trace-windows`` finds it; ``time_scale`` stretches,
    ``rate_cap`` thins."""

    kind: Literal["request_log"]
    path: str
    shape: Literal["auto", "openai_batch", "litellm_spend", "vllm_log", "jsonl"] = "auto"
    time_field: str | None = None
    route_field: str | None = None
    routes: dict[str, str] | None = Field(
        None, min_length=1, description="route value -> group; the key default takes the rest"
    )
    group_field: str | None = None
    window: Literal["off_peak", "peak", "burst", "all"] | tuple[float, float] = "all"
    window_s: float = Field(300.0, gt=0, description="length of off_peak/peak windows (log s)")
    burst_s: float = Field(10.0, gt=0)
    context_s: float = Field(120.0, gt=0)
    time_scale: float = Field(1.0, gt=0, description="2: half speed; 0.5: twice as fast")
    rate_cap: float | None = Field(
        None, gt=0, description="requests/s after scaling: thins evenly, never stretches"
    )

    @model_validator(mode="after")
    def _groups_and_window(self) -> RequestLogArrival:
        if self.group_field is not None and (self.route_field or self.routes is not None):
            raise FieldProblem(
                "group_field and route_field/routes both given",
                fix="keep one: group_field (the log names each line's group) or route_field "
                "with routes (a value of the log -> a group)",
                path=("group_field",),
            )
        if (self.route_field is None) != (self.routes is None):
            missing = "routes" if self.routes is None else "route_field"
            raise FieldProblem(
                f"{missing} missing: route_field and routes go together",
                fix="route_field: the log's field (e.g. model_group) and routes: {value: group, "
                "default: group}",
                path=(missing,),
            )
        if isinstance(self.window, tuple) and not 0 <= self.window[0] < self.window[1]:
            raise FieldProblem(
                f"window {list(self.window)}: need 0 <= start < end",
                fix="seconds from the log's first request, e.g. [600, 900]",
                path=("window",),
            )
        return self
