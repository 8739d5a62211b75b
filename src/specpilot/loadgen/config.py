"""How a load run talks to its endpoint and what it enforces, split by concern.

- ``Endpoint``: where and how to send (URL, API, model, timeouts, usage options, headers).
- ``RunLabels``: what the records are labelled with (run id, arm).
- ``Design``: the experiment's rules (deadlines, cancellations, concurrency cap, cold start,
  abort rule, lag threshold, phase timing).
- ``StageConfig``: client-side stages (retrieval, tool calls) run before each request.
- ``Hooks``: engine-specific parsing and debugging callbacks.

``LoadConfig.build`` takes every option by its plain name, so a config stays one call:

    >>> cfg = LoadConfig.build("http://127.0.0.1:8000", arm="spec", max_concurrency=4)
    >>> cfg.endpoint.path, cfg.labels.arm, cfg.design.max_concurrency
    ('/v1/chat/completions', 'spec', 4)
    >>> cfg.with_options(arm="base").labels.arm
    'base'
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specpilot.errors import ConfigError
from specpilot.records import ResponseExtras, ScheduledRequest

PHASE_TIMINGS = ("schedule", "back_to_back")
EventHook = Callable[[str, float, dict[str, Any]], None]  # (request_id, t, parsed event)
Extras = Callable[[Mapping[str, Any], Mapping[str, str] | None], ResponseExtras]


@dataclass
class Endpoint:
    """timeout_s bounds a whole request (send to last byte) and is always enforced."""

    url: str
    api: str = "chat"  # chat | completions
    model: str = "default"
    timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    include_usage: bool = True  # stream_options.include_usage
    continuous_usage: bool = False  # vLLM's stream_options.continuous_usage_stats
    # sent with every request (an arm's credentials); repr=False: no repr shows a value, and a
    # record's error text never does (``client.redact``)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/completions"


@dataclass
class RunLabels:
    run_id: str = ""
    arm: str = ""


@dataclass
class Design:
    """The experiment's rules. Times in seconds.

    deadline_s of a scheduled request is recorded and, with ``enforce_deadlines``, also ends the
    request (status ``timeout``, error ``deadline``). Phase timing "schedule": one open-loop
    timeline across phases, phase P starting ``phase_starts[P]`` seconds after the run's start
    (``phase_starts_for`` computes them); "back_to_back": each phase starts when the previous
    phase's requests have all finished.
    """

    enforce_deadlines: bool = False
    cancel_fraction: float = 0.0  # of requests closed mid-stream on purpose (R7 cancellation)
    cancel_after_chunks: int = 2
    max_concurrency: int | None = None  # an explicit cap, reported as such; None: open loop
    seed: int = 0  # picks the cancelled requests
    cold_start_requests: int = 0  # the first N non-warm-up requests are marked cold_start
    abort_after_connect_errors: int | None = 20  # consecutive; then the rest is not_sent
    lag_threshold_s: float = 0.010  # p99 dispatch lag above this: run flagged untrustworthy
    phase_timing: str = "schedule"
    phase_starts: dict[str, float] | None = None
    # a time on ``time.perf_counter()``'s clock: the first phase's timeline starts then, not
    # sooner (runners in threads given the same one send each slot at the same instant: the
    # pilot's mirrored replay); None: as soon as the client is ready
    start_at: float | None = None

    def __post_init__(self) -> None:
        if self.phase_timing not in PHASE_TIMINGS:
            raise ConfigError(
                f"phase_timing {self.phase_timing!r}: one of {', '.join(PHASE_TIMINGS)}"
            )


@dataclass
class StageConfig:
    """Client-side stages run inside each request's task, before its HTTP call: ``specs`` is
    ``Schedule.stages`` (name -> spec), relative document paths resolve against ``base_dir``.
    ``run`` False: not run; records keep the planned seconds."""

    run: bool = True
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    base_dir: str | None = None

    def runner(self, names: set[str], notes: list[str]) -> Any:
        """A ``StageRunner`` for the stages ``names`` (None when none run); indexes load here,
        off the clock. Stages without a spec run as waits of their planned seconds (noted)."""
        if not (names and self.run):
            return None
        from specpilot.workload.stages import StageRunner

        unknown = sorted(names - set(self.specs))
        if unknown:
            notes.append(
                f"client stages {', '.join(unknown)} have no spec in the stages option: "
                "run as waits of their planned seconds"
            )
        runner = StageRunner(self.specs, self.base_dir)
        # one search per index now, off the clock: a first search costs tens of ms (lazy
        # setup), which on the event loop would delay the requests due meanwhile
        bm25 = {n: 0.0 for n in names & set(self.specs) if self.specs[n].get("kind") == "bm25"}
        if bm25:
            msg = [{"role": "user", "content": "warm up"}]
            runner.run_sync(ScheduledRequest(0, 0.0, "", "", "", msg, 1, client_stages=bm25))
        return runner


@dataclass
class Hooks:
    """response_extras: the engine's per-response parser (``backends.response_extras_for``);
    count_tokens: tokenizer fallback when the stream has no usage deltas; on_event: every
    parsed SSE event with its arrival time (debugging, timing-error measurement)."""

    response_extras: Extras | None = None
    count_tokens: Callable[[str], int] | None = None
    on_event: EventHook | None = None


# Plain option name -> (part, field) for LoadConfig.build / with_options.
_ROUTES: dict[str, tuple[str, str]] = {
    **{f.name: ("endpoint", f.name) for f in dataclasses.fields(Endpoint)},
    **{f.name: ("labels", f.name) for f in dataclasses.fields(RunLabels)},
    **{f.name: ("design", f.name) for f in dataclasses.fields(Design)},
    **{f.name: ("hooks", f.name) for f in dataclasses.fields(Hooks)},
    "run_stages": ("stages", "run"),
    "stages": ("stages", "specs"),
    "stages_base_dir": ("stages", "base_dir"),
}


@dataclass
class LoadConfig:
    endpoint: Endpoint
    labels: RunLabels = field(default_factory=RunLabels)
    design: Design = field(default_factory=Design)
    stages: StageConfig = field(default_factory=StageConfig)
    hooks: Hooks = field(default_factory=Hooks)
    progress: bool | None = None  # None: on when stderr is a TTY and $CI is unset

    @classmethod
    def build(cls, url: str, **options: Any) -> LoadConfig:
        """A config from plain option names (``timeout_s=..., arm=..., stages=...``)."""
        return cls(Endpoint(url)).with_options(**options)

    def with_options(self, **options: Any) -> LoadConfig:
        """A copy with the given plain-named options changed."""
        parts: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for name, value in options.items():
            if name == "progress":
                top[name] = value
            elif name in _ROUTES:
                part, fname = _ROUTES[name]
                parts.setdefault(part, {})[fname] = value
            else:
                raise TypeError(
                    f"LoadConfig option {name!r} unknown; known: "
                    f"{', '.join(sorted([*_ROUTES, 'progress']))}"
                )
        for part, changes in parts.items():
            top[part] = dataclasses.replace(getattr(self, part), **changes)
        return dataclasses.replace(self, **top)


def request_api(cfg: LoadConfig, req: ScheduledRequest) -> str:
    """The API a request is sent to: its own where it has one (a request-log entry replays on
    the route it was logged on, whatever the run's ``api``), else the run's."""
    return req.api or cfg.endpoint.api


def request_path(cfg: LoadConfig, req: ScheduledRequest) -> str:
    return "/v1/chat/completions" if request_api(cfg, req) == "chat" else "/v1/completions"


def request_body(cfg: LoadConfig, req: ScheduledRequest) -> bytes:
    """The JSON body for one scheduled request (built before the run, off the timed path)."""
    ep = cfg.endpoint
    body: dict[str, Any] = {"model": ep.model, "max_tokens": req.max_tokens, "stream": True}
    if request_api(cfg, req) == "chat":
        body["messages"] = req.messages
    elif req.prompt is not None:  # a logged completions prompt, sent as logged
        body["prompt"] = req.prompt
    else:
        body["prompt"] = "\n".join(str(m.get("content", "")) for m in req.messages)
    body["temperature"] = req.temperature
    if req.top_p != 1.0:
        body["top_p"] = req.top_p
    if req.seed is not None:
        body["seed"] = req.seed
    if req.stop:
        body["stop"] = req.stop
    if req.ignore_eos:  # a trace's output length, or output.ignore_eos (vLLM, SGLang, llama.cpp)
        body["ignore_eos"] = True
    so: dict[str, Any] = {}
    if ep.include_usage:
        so["include_usage"] = True
    if ep.continuous_usage:
        so["continuous_usage_stats"] = True
    if so:
        body["stream_options"] = so
    body.update(ep.extra_body)
    return json.dumps(body, ensure_ascii=False).encode()
