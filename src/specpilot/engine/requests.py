"""A running request's state, and how new tokens are committed to it (max_tokens, EOS, stop).

Host-side bookkeeping only: no model, no device. ``commit`` is the one place that decides how
many of a round's tokens a request keeps and why it stops.

    >>> import torch
    >>> from specpilot.engine.sampling import SamplingParams
    >>> r = RequestState("r", 0, 2, [5, 6], SamplingParams(max_tokens=3), 0,
    ...                  torch.Generator(), 0)
    >>> commit(r, [7, 2, 9], eos_ids=frozenset({2}), max_seq_len=64)
    (2, 'eos')
    >>> r.output_ids, r.finish_reason
    ([7, 2], 'stop')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from specpilot.engine.sampling import SamplingParams
from specpilot.records import GenerationResult, PrefillRecord, RoundRecord


@dataclass
class TokenLogprob:
    """One output token's raw target log-probability (before temperature/top-k/top-p)."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)  # (token id, logprob), best first


@dataclass
class RequestState:
    """A running request: its tokens, cache lengths, RNG and records."""

    request_id: str
    slot: int
    prompt_len: int
    tokens: list[int]  # prompt + generated; the last one is not in the target cache yet
    params: SamplingParams
    k: int
    generator: torch.Generator
    seed: int
    target_len: int = 0  # tokens whose keys/values are in the target cache
    draft_len: int = 0
    finish_reason: str | None = None
    text: str = ""
    rounds: list[RoundRecord] = field(default_factory=list)
    prefill: PrefillRecord | None = None
    logprobs: int | None = None  # record log-probs with this many alternatives (None = off)
    token_logprobs: list[TokenLogprob] = field(default_factory=list)
    _round_index: int = 0

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def result(self) -> GenerationResult:
        return GenerationResult(
            request_id=self.request_id,
            prompt_tokens=self.prompt_len,
            output_ids=list(self.output_ids),
            text=self.text,
            finish_reason=self.finish_reason or "length",
            prefill=self.prefill,
            rounds=list(self.rounds),
            seed=self.seed,
            token_logprobs=list(self.token_logprobs),
        )


def find_stop(text: str, stops: Sequence[str]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def commit(
    r: RequestState,
    new: list[int],
    *,
    eos_ids: frozenset[int],
    max_seq_len: int,
    decode: Callable[[list[int]], str] | None = None,
) -> tuple[int, str | None]:
    """Append tokens, applying max_tokens, EOS and stop strings. -> (appended, truncation).

    ``decode`` (token ids -> text) keeps ``r.text`` current and finds stop strings; without it
    only token-level stops apply.
    """
    p = r.params
    budget = p.max_tokens - len(r.output_ids)
    truncated: str | None = None
    if len(new) >= budget:
        new, truncated = new[:budget], "length"
    if not p.ignore_eos:
        for i, t in enumerate(new):
            if t in eos_ids:
                new, truncated = new[: i + 1], "eos"
                break
    if p.stop and decode is not None:
        for i in range(len(new)):
            text = decode(r.output_ids + new[: i + 1])
            hit = find_stop(text, p.stop)
            if hit is not None:
                new, truncated = new[: i + 1], "stop"
                r.tokens.extend(new)
                r.text = text[:hit]
                r.finish_reason = "stop"
                return len(new), truncated
    r.tokens.extend(new)
    if decode is not None:
        ids = r.output_ids
        if ids and ids[-1] in eos_ids and not p.ignore_eos:
            ids = ids[:-1]
        r.text = decode(ids)
    if truncated == "eos":
        r.finish_reason = "stop"
    elif truncated == "length" or len(r.output_ids) >= p.max_tokens:
        r.finish_reason = "length"
        truncated = truncated or "length"
    elif r.target_len >= max_seq_len:
        r.finish_reason, truncated = "length", "length"
    return len(new), truncated
