"""Open-loop load generator: replays a schedule against an OpenAI-compatible endpoint.

It knows endpoints, not engines. Each scheduled request is sent at its time whether or not
earlier ones finished, streamed, timestamped per chunk on one monotonic clock, and ends as
exactly one ``RequestRecord`` (ok | timeout | rejected | error | cancelled | not_sent). Modules:
``config`` (what to send and enforce), ``sse`` (the stream parser), ``client`` (one request),
``runner`` (the timeline, phase edges), ``summary`` (trustworthiness), ``progress`` (the
progress line), ``testserver`` (an instant SSE server for tests and benchmarks).

    >>> from specpilot.loadgen import LoadConfig, run_schedule
    >>> from specpilot.loadgen.testserver import TestServer
    >>> from specpilot.records import ScheduledRequest
    >>> sched = [ScheduledRequest(i, i * 0.01, "peak", "chat", f"p{i}",
    ...          [{"role": "user", "content": "hi"}], max_tokens=4) for i in range(5)]
    >>> with TestServer() as srv:
    ...     result = run_schedule(sched, LoadConfig.build(srv.url, progress=False))
    >>> result.summary.status_counts["ok"], len(result.records)
    (5, 5)
"""

from specpilot.loadgen.config import (
    Design,
    Endpoint,
    Hooks,
    LoadConfig,
    RunLabels,
    StageConfig,
    request_body,
)
from specpilot.loadgen.runner import (
    LoadRunner,
    PhaseHook,
    Sink,
    phase_starts_for,
    request_id,
    run_schedule,
)
from specpilot.loadgen.summary import LoadResult, LoadSummary, quantile

__all__ = [
    "Design",
    "Endpoint",
    "Hooks",
    "LoadConfig",
    "LoadResult",
    "LoadRunner",
    "LoadSummary",
    "PhaseHook",
    "RunLabels",
    "Sink",
    "StageConfig",
    "phase_starts_for",
    "quantile",
    "request_body",
    "request_id",
    "run_schedule",
]
