"""Records: the load generator's schedule, requests, chunks, server extras and snapshots (see ``specpilot.records``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from specpilot.records.engine import PrefillRecord, RoundRecord


@dataclass
class ScheduledRequest:
    """One line of a deterministic schedule: what to send, when (seconds from phase start)."""

    index: int
    send_t: float
    phase: str
    group: str
    prompt_id: str
    messages: list[dict[str, Any]]  # OpenAI chat messages
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    deadline_s: float | None = None  # E2E deadline from the group's SLO
    ttft_slo_s: float | None = None
    # Seconds to wait before sending, per stage: planned for simulated stages; 0.0 for the
    # stages in measured_stages (e.g. {"retrieval": 0.0, "tool": 0.31}).
    client_stages: dict[str, float] = field(default_factory=dict)
    warmup: bool = False
    # Trace replay: ask the server to ignore EOS so the output length is the trace's (vLLM,
    # SGLang and llama.cpp accept ``ignore_eos``); and the input length the prompt was padded
    # towards (approximate, in tokens), for comparison with the measured prompt_tokens.
    ignore_eos: bool = False
    input_tokens_target: int | None = None
    # Client stages that do real work at send time (a BM25 search) and are timed then: their
    # client_stages entry is 0.0 because nothing is planned to wait, not because they take 0 s.
    measured_stages: list[str] = field(default_factory=list)
    # A request replayed from a request log (``workload.requestlog``): ``api`` is its route as
    # logged ("chat" | "completions"; None: the run's ``Endpoint.api``), ``prompt`` a
    # completions prompt sent as logged (text, texts or token ids; ``messages`` is then empty),
    # ``body_sha256`` the hash of the logged body (``logshapes.body_sha256``): it ties the
    # request to its log line without its text. Unset, they are left out of ``to_dict``, so a
    # schedule without a request log keeps its JSON and its hash (older pilot files resume).
    api: str | None = None
    prompt: str | list[Any] | None = None
    body_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name in _LOGGED_FIELDS:
            if d[name] is None:
                del d[name]
        return d


_LOGGED_FIELDS = ("api", "prompt", "body_sha256")  # ScheduledRequest's, set by a request log


@dataclass
class ChunkTiming:
    """One streamed chunk: monotonic timestamp and how many tokens it carried.

    ``index`` is the chunk's position in its request's stream (0-based): chunks are keyed by
    (run_id, arm, request_id, index), so a request written again never duplicates its chunks.
    """

    request_id: str
    t: float
    tokens_in_chunk: int
    run_id: str = ""
    index: int = 0


# RequestRecord.status, in this order everywhere it is counted
STATUSES = ("ok", "timeout", "rejected", "error", "cancelled", "not_sent")


@dataclass
class RequestRecord:
    """Every scheduled request ends as exactly one of these (status is never empty).

    status: ok | timeout | rejected (429/503) | error | cancelled | not_sent.
    Times are seconds on one monotonic clock (time.perf_counter) shared by the run; the
    run's ``PhaseRecord.t_run`` / ``wall_t_run`` map them to wall time.

    prompt_id: the workload prompt sent (pairs the same prompt across arms; joins quality).
    server_request_id: the id the server gave the response (``X-Request-Id`` or the body's
        ``id``), for server logs.
    served_k / served_scope / strategy_version: the speculative strategy the server says it
        applied (the builtin server's ``X-Specpilot-Strategy`` header; None when unknown).
    queue_s / prefill_s / decode_s: the server's own timings when it reports them.
    output_text: the streamed text (tool-call names and arguments appended as streamed),
        kept so quality checks can be recomputed from the file (``specpilot quality``).
    spec: the engine's per-request speculative summary (``ResponseExtras.spec``).
    """

    run_id: str
    arm: str
    phase: str
    task_group: str
    request_id: str
    scheduled_t: float
    status: str
    sent_t: float | None = None
    first_content_t: float | None = None
    done_t: float | None = None
    http_status: int | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    chunks: int = 0
    finish_reason: str | None = None
    deadline_s: float | None = None
    ttft_slo_s: float | None = None
    output_sha256: str | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    client_stages: dict[str, float] = field(default_factory=dict)
    warmup: bool = False
    cold_start: bool = False
    spec: dict[str, Any] | None = None  # per-request speculative stats when the server returns them
    prompt_id: str = ""
    server_request_id: str | None = None
    served_k: int | None = None
    served_scope: str | None = None
    strategy_version: int | None = None
    output_text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ResponseExtras:
    """What an engine's response says beyond the OpenAI format, parsed by its backend.

    A backend's ``response_extras(obj, headers)`` returns one of these from the last JSON
    object that carried ``usage``/``timings``/``metrics`` and the response headers; the load
    generator copies the fields onto the request (``apply_to``) and hands ``rounds`` and
    ``prefill`` to the store. Unknown keys in the engine's payload are a parser error in the
    tests, never a silent drop: every field here is named.

    spec: per-request speculative summary in DESIGN.md's definitions (keys: engine, source,
        rounds, proposed, accepted, committed, acceptance_rate, mean_acceptance_length,
        acceptance_histogram (list: rounds that accepted exactly j drafts), raw).
    rounds / prefill: per-round records when the engine reports them (the builtin server with
        ``detailed`` metrics), already relabelled with the client's request id.
    """

    spec: dict[str, Any] | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    server_request_id: str | None = None
    served_k: int | None = None
    served_scope: str | None = None
    strategy_version: int | None = None
    rounds: list[RoundRecord] = field(default_factory=list)
    prefill: PrefillRecord | None = None

    def apply_to(self, rec: RequestRecord) -> None:
        """Copy the per-request fields onto ``rec`` (None leaves a field as it was)."""
        for name in (
            "spec",
            "queue_s",
            "prefill_s",
            "decode_s",
            "server_request_id",
            "served_k",
            "served_scope",
            "strategy_version",
        ):
            value = getattr(self, name)
            if value is not None:
                setattr(rec, name, value)


@dataclass
class MetricSnapshot:
    """Counters and memory scraped from an engine at one moment.

    Taken at every phase edge (``label`` "before" / "after" with ``phase`` set: counter deltas
    are taken over these two only), every second or two inside a running phase (``label``
    ``DURING``, ``phase`` the phase it falls in: gauges such as KV use and the queue) and at the
    rollback drill's events (``label`` "drill:<event>"). Memory is typed (bytes; None when the
    engine does not tell): process RSS; weights of the target and the draft; KV cache
    allocated and in use; the draft's share of the KV cache; GPU memory. ``metrics`` holds the
    normalised counters (``backends.protocol`` names), ``raw`` the exposition text as scraped
    (empty for a ``DURING`` snapshot: only its normalised figures are kept), or why the scrape
    failed (``scrape_failed``).
    """

    run_id: str
    arm: str
    phase: str
    label: str  # "before" | "after" | DURING | "drill:<event>" | free text
    t: float
    engine: str
    metrics: dict[str, float] = field(default_factory=dict)  # normalised names -> values
    raw: str = ""  # the exposition text or JSON as scraped; "scrape failed: ..." when it failed
    rss_bytes: int | None = None
    target_weight_bytes: int | None = None
    draft_weight_bytes: int | None = None
    kv_allocated_bytes: int | None = None
    kv_used_bytes: int | None = None
    draft_kv_bytes: int | None = None
    gpu_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def failed(self) -> bool:
        """The scrape did not answer: its figures are unknown (never zero)."""
        return self.raw.startswith(SCRAPE_FAILED)


# the label of the snapshots taken inside a running phase (not an edge: no counter delta)
DURING = "during"
EDGE_LABELS = ("before", "after")
SCRAPE_FAILED = "scrape failed: "  # the ``raw`` of a snapshot whose scrape failed, then why


# The episode design (pilot.design) replays each measured phase (a load level) as episodes,
# recorded as phases named f"{level}{EPISODE_SEP}{k:02d}" (k from 1).
EPISODE_SEP = "~"
# the most episodes per level one pilot runs (``episodes.per_level``'s bound, and what the
# analysis may ask of a rerun): one home for the pilot file and the analysis below it
MOST_EPISODES = 99


def level_of(phase: str) -> str:
    """The load level (measured phase) an episode phase belongs to (itself if not one).

    >>> level_of("peak~02"), level_of("peak")
    ('peak', 'peak')
    """
    return phase.split(EPISODE_SEP, 1)[0]


def episode_of(phase: str) -> int:
    """The episode number of an episode phase (1, 2, ...); -1 for a phase that is not one.

    >>> episode_of("peak~02"), episode_of("peak")
    (2, -1)
    """
    _, sep, tail = phase.partition(EPISODE_SEP)
    return int(tail) if sep and tail.isdigit() else -1
