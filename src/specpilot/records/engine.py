"""Records: engine rounds and prefills, one generation's result (see ``specpilot.records``)."""

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
