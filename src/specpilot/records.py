"""Records exchanged between modules (field names are a contract; see docs/DESIGN.md).

Plain dataclasses, no behaviour beyond conversion to dicts. Every module that measures
something yields these; the store writes them; analysis reads them.
"""

from __future__ import annotations

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
    client_stages: dict[str, float] = field(default_factory=dict)  # e.g. {"retrieval": 0.12}
    warmup: bool = False
    # Trace replay: ask the server to ignore EOS so the output length is the trace's (vLLM,
    # SGLang and llama.cpp accept ``ignore_eos``); and the input length the prompt was padded
    # towards (approximate, in tokens), for comparison with the measured prompt_tokens.
    ignore_eos: bool = False
    input_tokens_target: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ChunkTiming:
    """One streamed chunk: monotonic timestamp and how many tokens it carried."""

    request_id: str
    t: float
    tokens_in_chunk: int
    run_id: str = ""


@dataclass
class RequestRecord:
    """Every scheduled request ends as exactly one of these (status is never empty).

    status: ok | timeout | rejected (429/503) | error | cancelled | not_sent.
    Times are seconds on one monotonic clock (time.perf_counter) shared by the run.
    """

    run_id: str
    arm: str
    phase: str
    group: str
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MetricSnapshot:
    """Counters and memory scraped from an engine at one moment (before/after a phase)."""

    run_id: str
    arm: str
    phase: str
    label: str  # "before" | "after" | free text
    t: float
    engine: str
    metrics: dict[str, float] = field(default_factory=dict)  # normalised names -> values
    raw: str = ""  # the exposition text or JSON as scraped

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
