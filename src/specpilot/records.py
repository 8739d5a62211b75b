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

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RoundRecord:
    """One decode round of one request.

    proposed: draft tokens proposed (k; 0 for plain decoding).
    accepted: draft tokens the target accepted (0..k).
    committed: tokens appended to the output this round, the correction or bonus token
        included (= accepted + 1 unless EOS, a stop string or max_tokens cut the round).
    draft_s / verify_s / overhead_s: the round's wall time split into draft forwards (and
        draft sampling), the target's forward, and everything else (accept rule, bookkeeping,
        stop checks). In a batched round every row carries the whole round's times and
        ``batch_size``; window metrics charge each row 1/batch_size of them.
    truncated: None, or why the round was cut: "eos" | "stop" | "length".
    """

    request_id: str
    round_index: int
    proposed: int
    accepted: int
    committed: int
    draft_s: float
    verify_s: float
    overhead_s: float
    batch_size: int = 1
    t_start: float = 0.0
    truncated: str | None = None
    run_id: str = ""
    arm: str = ""
    phase: str = ""

    @property
    def round_s(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PrefillRecord:
    """The prompt's prefill, counted apart from decode. It commits the first output token."""

    request_id: str
    prompt_tokens: int
    target_s: float
    draft_s: float
    batch_size: int = 1
    t_start: float = 0.0
    run_id: str = ""
    arm: str = ""
    phase: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GenerationResult:
    """What one request produced, with its instrumentation."""

    request_id: str
    prompt_tokens: int
    output_ids: list[int]
    text: str
    finish_reason: str  # "stop" (EOS or stop string) | "length"
    prefill: PrefillRecord | None = None
    rounds: list[RoundRecord] = field(default_factory=list)
    seed: int | None = None
    token_logprobs: list[Any] = field(default_factory=list)  # engine.generate.TokenLogprob

    @property
    def output_tokens(self) -> int:
        return len(self.output_ids)


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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

    Taken at every phase edge (``label`` "before" / "after" with ``phase`` set) and at the
    rollback drill's events (``label`` "drill:<event>"). Memory is typed (bytes; None when the
    engine does not tell): process RSS; weights of the target and the draft; KV cache
    allocated and in use; the draft's share of the KV cache; GPU memory. ``metrics`` holds the
    normalised counters (``backends.protocol`` names), ``raw`` the exposition text as scraped.
    """

    run_id: str
    arm: str
    phase: str
    label: str  # "before" | "after" | "drill:<event>" | free text
    t: float
    engine: str
    metrics: dict[str, float] = field(default_factory=dict)  # normalised names -> values
    raw: str = ""  # the exposition text or JSON as scraped
    rss_bytes: int | None = None
    target_weight_bytes: int | None = None
    draft_weight_bytes: int | None = None
    kv_allocated_bytes: int | None = None
    kv_used_bytes: int | None = None
    draft_kv_bytes: int | None = None
    gpu_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the pilot: what was run -------------------------------------------------------------


@dataclass
class HardwareFacts:
    """The machine a pilot ran on (the verdict depends on it: DESIGN.md, "Hardware")."""

    cpu_model: str = ""
    cpu_flags: list[str] = field(default_factory=list)  # e.g. avx2, avx512_bf16, amx_tile
    cpu_logical_cores: int | None = None
    cpu_affinity: int | None = None  # cores this process may use
    memory_bytes: int | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)  # name, memory_bytes, driver
    os: str = ""
    python: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PilotRecord:
    """One pilot: the config as given (and its sha256), the version and the machine."""

    pilot_id: str
    name: str
    config: dict[str, Any]
    config_sha256: str
    specpilot_version: str
    created_unix: float
    finished_unix: float | None = None
    status: str = "running"  # running | complete | interrupted | failed
    hardware: HardwareFacts = field(default_factory=HardwareFacts)
    schedule: dict[str, Any] | None = None  # the schedule every arm replays (Schedule.to_dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StrategySpec:
    """The one speculative switch an arm turns on (R6), or none.

    kind: ``none`` | ``draft`` (an independent draft model: draft_id, draft_sha256, k) |
    ``ngram`` (an engine's n-gram / prompt-lookup mode: ngram_type, params; a different
    resource structure, never costed with the draft-model estimate) | ``hybrid`` |
    ``other`` (EAGLE, MTP...: named in ``params``).
    """

    kind: str = "none"
    k: int | None = None
    draft_id: str | None = None
    draft_sha256: str | None = None
    ngram_type: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ResourceBudget:
    """What an arm may use, and what that was matched against (R6: equal total budget).

    matched_against: the arm whose budget this one equals (e.g. the alternative matches the
    speculative arm: the draft's memory and cores given to target capacity), with the
    accounting in ``notes``.
    """

    memory_bytes: int | None = None
    cores: int | None = None
    devices: list[str] = field(default_factory=list)
    matched_against: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


ARM_ROLES = ("baseline", "speculative", "alternative", "extra")


@dataclass
class ArmRecord:
    """One execution of one arm (``run_id``): role, engine, frozen manifest, strategy, budget.

    manifest: the backend's ``describe()`` (model files with sha256, tokenizer hash, engine
    version, launch flags, hardware) plus the frozen settings the pilot checks across arms:
    sampling defaults, context limit, parallelism, threads, dtype. ``manifest_sha256`` hashes
    the frozen part, so quality results compare like with like after a model upgrade.
    cold_start_s: start to healthy (model load), timed apart from the steady state.
    load_summary: the load generator's own account of the run (``LoadSummary.to_dict()``:
    dispatch lag, trustworthy and why not, stop reason, cut phases).
    """

    pilot_id: str
    run_id: str
    arm: str
    role: str  # one of ARM_ROLES
    engine: str
    manifest: dict[str, Any] = field(default_factory=dict)
    manifest_sha256: str = ""
    strategy: StrategySpec = field(default_factory=StrategySpec)
    budget: ResourceBudget = field(default_factory=ResourceBudget)
    run_order: int = 0
    repetition: int = 0
    status: str = "planned"  # planned | running | complete | failed | interrupted
    cold_start_s: float | None = None
    started_unix: float | None = None
    finished_unix: float | None = None
    error: str | None = None
    load_summary: dict[str, Any] = field(default_factory=dict)
    completed_steps: list[str] = field(default_factory=list)  # load, drill, compat, quality

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PhaseRecord:
    """One phase of one run: planned edges on the schedule clock, actual edges, anchor.

    planned_start_s / planned_end_s: seconds from the run's timeline start (``t_run``).
    actual_start_t / actual_end_t: monotonic (``time.perf_counter``) like every request time;
    ``actual_end_t`` is when the phase's last request ended (None: cut by an interruption,
    ``status`` says so, and ``cut_t`` is when the cut came). ``t_run`` is the monotonic instant
    of schedule time 0 and ``wall_t_run`` the same instant in Unix time:
    wall = wall_t_run + (t - t_run).
    """

    run_id: str
    arm: str
    phase: str
    planned_start_s: float
    planned_end_s: float
    offered_rate: float  # scheduled requests / planned duration (req/s)
    scheduled: int  # requests scheduled in the phase
    t_run: float | None = None
    wall_t_run: float | None = None
    actual_start_t: float | None = None
    actual_end_t: float | None = None
    status: str = "planned"  # planned | running | complete | interrupted
    warmup: bool = False
    cut_t: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- quality, compatibility and the rollback drill (R7, R8) --------------------------------

SEVERITIES = ("key", "minor")


@dataclass
class QualityRecord:
    """One business check on one output (R7). Acceptance rate is never a quality metric.

    kind: json_schema | code_tests | regex | required | forbidden | numeric | length | lines |
    consistency_only (no check declared for the group). ``reasons`` name the key errors
    ("amount field missing", "schema violation: /age not an integer", "tests fail:
    test_empty"); empty when the check passed. ``sample_index``/``seed``: which of the N
    seeded runs of a sampled prompt this output is. ``isolation``: what contained the code
    sandbox (bwrap | unshare | rlimits), None for other kinds.
    """

    run_id: str
    arm: str
    task_group: str
    prompt_id: str
    check_name: str
    kind: str
    severity: str  # key | minor
    passed: bool
    reasons: list[str] = field(default_factory=list)
    request_id: str | None = None
    sample_index: int = 0
    seed: int | None = None
    score: float | None = None
    manifest_sha256: str = ""
    isolation: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class OutputRecord:
    """One generation made for the quality pass (not under load): text, tokens, log-probs.

    tokens: the output as the server's token strings (OpenAI ``logprobs.content[].token``);
    token_logprobs: their log-probs; top_logprobs: per position, [[token, logprob], ...] best
    first (the margin at a divergence comes from here).
    """

    run_id: str
    arm: str
    task_group: str
    prompt_id: str
    sample_index: int
    seed: int | None
    temperature: float
    text: str
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[list[Any]]] = field(default_factory=list)
    finish_reason: str | None = None
    manifest_sha256: str = ""
    error: str | None = None
    max_tokens: int | None = None  # the request's cap (a capped sample is not business-checked)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ConsistencyRecord:
    """A greedy prompt's output in a candidate arm against the baseline arm (R1, R7).

    identical: token for token. At the first divergence: the position, both tokens, the
    target's (baseline's) log-probs of both tokens there and its top-1 minus top-2 margin; a
    divergence whose margin exceeds ``margin_threshold`` is a ``defect`` to investigate, one
    below it a near-tie flip (float non-associativity), recorded not failed.
    """

    pilot_id: str
    task_group: str
    prompt_id: str
    baseline_arm: str
    candidate_arm: str
    identical: bool
    divergence_index: int | None = None
    baseline_token: str | None = None
    candidate_token: str | None = None
    baseline_logprob: float | None = None  # of the baseline's token, at the divergence
    candidate_logprob: float | None = None  # of the candidate's token, under the baseline
    margin: float | None = None
    margin_threshold: float | None = None
    defect: bool = False
    baseline_manifest_sha256: str = ""
    candidate_manifest_sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


COMPAT_STATUSES = ("pass", "fail", "unsupported")


@dataclass
class CompatRecord:
    """One feature of the functional-compatibility suite against one arm (R7)."""

    run_id: str
    arm: str
    feature: str  # streaming | include_usage | stop_in_round | length | eos | tool_call | ...
    status: str  # pass | fail | unsupported
    evidence: str = ""
    duration_s: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DRILL_STATUSES = ("done", "failed", "not_possible", "not_drilled")
DRILL_PHASE = "drill"  # the drill replays a phase under this name: never in load comparisons


@dataclass
class DrillRecord:
    """The rollback drill of one arm (R8): speculation off under load, then back on.

    kind: runtime_switch (the builtin server's admin switch) | restart (engines that need
    one, e.g. llama.cpp) | none (``status`` not_possible: e.g. an arm given only by URL, with
    ``reason``). Times are monotonic like request times. ``interrupted`` counts requests that
    failed during the switch, ``delayed`` requests whose E2E exceeded their deadline in the
    drill window; ``switch_in_force_s`` = in force - requested; ``recovery_s`` = until goodput
    is back at ``goodput_baseline`` (None: it never recovered within the window).
    """

    run_id: str
    arm: str
    phase: str
    kind: str
    status: str  # done | failed | not_possible | not_drilled (not asked for: ``reason``)
    reason: str = ""
    requested_t: float | None = None
    in_force_t: float | None = None
    switch_in_force_s: float | None = None
    recovery_s: float | None = None
    goodput_baseline: float | None = None
    interrupted: int = 0
    delayed: int = 0
    switched_back_t: float | None = None
    switch_back_s: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)  # {"t": ..., "event": ...}
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- what analysis reads (filled by the store's typed reader, ``PilotData.open``) ------------


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
class PilotData:
    """Every record of one pilot, typed: what ``analysis`` and ``report`` take.

    Built by the store's reader (``specpilot.store.PilotData.open(path)`` / ``read_pilot``),
    or by hand in tests. Raw rounds and chunks stay in the file at scale: ``request_rounds``,
    ``verify_costs`` and ``chunk_gaps`` are their SQL aggregates; ``rounds`` is filled only
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
