"""Workloads: task groups, arrival processes, traces, client stages, deterministic schedules.

The API the load generator, the pilot and the distillation code rely on (kept stable)::

    from specpilot.workload import build_schedule, Schedule

    schedule = build_schedule("examples/workload.yaml")          # or a dict / WorkloadConfig
    schedule.requests            # list[ScheduledRequest], by phase then send_t; index unique
    schedule.phase("peak")       # one phase's requests (send_t from that phase's start)
    schedule.phases              # [PhaseInfo(name, start_s, duration_s, requests, arrival, ...)]
    schedule.stages              # client stages by name; run them with StageRunner
    schedule.to_json()           # canonical: same config + seed -> same bytes
    Schedule.load("schedule.json")

    from specpilot.workload import group_prompts, training_prompts
    group_prompts("code", "eval")      # held-out prompts: never train a draft on these
    training_prompts("code")           # train + dev: what a draft may be distilled on

    from specpilot.workload import load_trace, find_windows
    windows = find_windows(load_trace("AzureLLMInferenceTrace_conv.csv"), window_s=300)
    windows["peak"].start_s, windows["burst"].rate

See each module's docstring: ``groups`` (prompt sets, splits, importers), ``arrivals``,
``trace`` (replay, scaling, window finder), ``requestlog`` (replaying a production request log:
``kind: request_log`` phases), ``stages`` (simulated and BM25 retrieval), ``config`` (the YAML,
validated by pydantic) and ``schedule``.
"""

from specpilot.workload.arrivals import ArrivalProcess, Constant, Gamma, Poisson, Steps, TraceReplay
from specpilot.workload.config import WorkloadConfig, WorkloadError, load_workload, parse_workload
from specpilot.workload.groups import (
    BUILTIN_GROUPS,
    SLO,
    LengthSpec,
    Prompt,
    Sampling,
    TaskGroup,
    builtin_group_names,
    group_prompts,
    import_prompts,
    load_group,
    training_prompts,
)
from specpilot.workload.schedule import PhaseInfo, Schedule, build_schedule
from specpilot.workload.stages import BM25Index, StageRunner
from specpilot.workload.trace import Trace, Window, find_windows, load_trace

__all__ = [
    "BUILTIN_GROUPS",
    "SLO",
    "ArrivalProcess",
    "BM25Index",
    "Constant",
    "Gamma",
    "LengthSpec",
    "PhaseInfo",
    "Poisson",
    "Prompt",
    "Sampling",
    "Schedule",
    "StageRunner",
    "Steps",
    "TaskGroup",
    "Trace",
    "TraceReplay",
    "Window",
    "WorkloadConfig",
    "WorkloadError",
    "build_schedule",
    "builtin_group_names",
    "find_windows",
    "group_prompts",
    "import_prompts",
    "load_group",
    "load_trace",
    "load_workload",
    "parse_workload",
    "training_prompts",
]
