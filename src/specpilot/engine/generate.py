"""Plain and speculative decoding, batched, yielding a RoundRecord per request per round.

One round for a batch of running requests (each with its own k; k = 0 is plain decoding):

1. draft phase (rows with k > 0): the draft takes the committed tokens it has not seen (one,
   or two after a fully accepted round), then proposes k tokens autoregressively, one forward
   per token, over the rows that still need proposals;
2. verify phase (all rows): the target scores ``[last committed token, d1..dk]`` in one
   forward (positions n..n+k), giving k+1 distributions;
3. accept: greedy rows take the longest prefix matching the target's argmax; sampling rows use
   the Leviathan rule (``sampling.speculative_accept``); the correction or bonus token is
   appended; EOS, stop strings and max_tokens may cut the round.

KV caches are fixed buffers indexed by position (``model.KVCache``): after a rejection the
request's length moves back and the rejected entries are overwritten by the next write. The
draft cache keeps entries for x, d1..d(k-1); when all k are accepted, dk is not in the draft's
cache yet, so the next round feeds it to the draft together with the bonus token.

Padding/masking for unequal rows: a batch is right-padded to its longest row; pad tokens are
written at position ``max_seq_len`` (a scratch column no real query can see) and their outputs
are discarded. Each row attends only to its own slot, positions <= its query's position.

    >>> engine = Engine(target, draft, max_slots=4, max_seq_len=1024)          # doctest: +SKIP
    >>> res = engine.generate(ids, SamplingParams(max_tokens=64), k=4)          # doctest: +SKIP
    >>> window_metrics(res.rounds).mean_acceptance_length                       # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import os
import resource
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specpilot.engine.loader import check_model_vocab, check_tokenizers_match
from specpilot.engine.model import Transformer
from specpilot.engine.sampling import (
    SamplingParams,
    greedy_accept,
    sample,
    speculative_accept,
    warp,
)
from specpilot.records import GenerationResult, PrefillRecord, RoundRecord

_ids = itertools.count()


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


@dataclass(frozen=True)
class MemoryReport:
    target_weight_bytes: int
    draft_weight_bytes: int
    target_kv_bytes_per_token: int
    draft_kv_bytes_per_token: int
    target_kv_bytes_allocated: int
    draft_kv_bytes_allocated: int
    peak_rss_bytes: int
    rss_bytes: int


class Engine:
    """Owns a target (and optionally a draft) with ``max_slots`` KV slots of ``max_seq_len``."""

    def __init__(
        self,
        target: Transformer,
        draft: Transformer | None = None,
        *,
        tokenizer: Any = None,
        draft_tokenizer: Any = None,
        max_slots: int = 1,
        max_seq_len: int | None = None,
        eos_ids: Sequence[int] | None = None,
    ) -> None:
        if draft is not None:
            check_model_vocab(target, draft)
            if tokenizer is not None and draft_tokenizer is not None:
                check_tokenizers_match(tokenizer, draft_tokenizer)
        self.target, self.draft, self.tokenizer = target, draft, tokenizer
        seq = max_seq_len or min(target.cfg.context_length, 2048)
        if seq > target.cfg.context_length:
            raise ValueError(
                f"max_seq_len={seq} exceeds the target's context length {target.cfg.context_length}"
            )
        self.max_seq_len, self.max_slots = seq, max_slots
        target.setup_cache(seq, max_slots)
        if draft is not None:
            draft.setup_cache(seq, max_slots)
        if eos_ids is None:
            eos = getattr(tokenizer, "eos_token_id", None)
            eos_ids = [eos] if eos is not None else []
        self.eos_ids = frozenset(int(e) for e in eos_ids)
        self.free_slots = list(range(max_slots))
        # set by runtime.build_engine: formats measured, chosen and why (engine.calibration)
        self.calibration: dict[str, Any] | None = None

    # ------------------------------------------------------------------ requests
    def validate(self, prompt_ids: Sequence[int], params: SamplingParams, k: int) -> None:
        """Raise ValueError naming the bad field (prompt, k, sampling parameters)."""
        if not prompt_ids:
            raise ValueError("prompt must contain at least one token")
        if not isinstance(k, int) or k < 0:
            raise ValueError(
                f"k must be an integer >= 1 for speculative decoding (0 = plain), got {k!r}"
            )
        if k > 0 and self.draft is None:
            raise ValueError("k > 0 needs a draft model: load one (--draft PATH) or set k = 0")
        vocab = self.target.cfg.vocab_size
        if any(not 0 <= int(t) < vocab for t in prompt_ids):
            raise ValueError(f"prompt contains token ids outside the vocabulary [0, {vocab})")
        params.validate(self.max_seq_len, len(prompt_ids))

    def new_request(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        k: int = 0,
        request_id: str | None = None,
    ) -> RequestState:
        """Validate and allocate a slot (no compute). Raises RuntimeError when all slots are busy."""
        self.validate(prompt_ids, params, k)
        if not self.free_slots:
            raise RuntimeError(f"all {self.max_slots} KV slots are busy")
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little")
        gen = torch.Generator().manual_seed(seed)
        return RequestState(
            request_id=request_id or f"req-{next(_ids)}",
            slot=self.free_slots.pop(0),
            prompt_len=len(prompt_ids),
            tokens=[int(t) for t in prompt_ids],
            params=params,
            k=k,
            generator=gen,
            seed=seed,
        )

    def release(self, req: RequestState) -> None:
        """Free the request's KV slot (its cache entries are simply overwritten later)."""
        if req.slot >= 0 and req.slot not in self.free_slots:
            self.free_slots.append(req.slot)
            self.free_slots.sort()
        req.slot = -1
        if req.finish_reason is None:
            req.finish_reason = "cancelled"

    # ------------------------------------------------------------------ forwards
    def _forward(
        self, model: Transformer, rows: list[tuple[int, list[int], int]], last_only: bool = False
    ) -> torch.Tensor:
        """rows: (slot, new tokens, start position) -> logits (B, T, V), right-padded.

        ``last_only``: logits of each row's last real token only, (B, 1, V).
        """
        width = max(len(toks) for _, toks, _ in rows)
        tokens = torch.zeros(len(rows), width, dtype=torch.long)
        pos = torch.full((len(rows), width), self.max_seq_len, dtype=torch.long)
        for i, (_, toks, start) in enumerate(rows):
            tokens[i, : len(toks)] = torch.tensor(toks)
            pos[i, : len(toks)] = torch.arange(start, start + len(toks))
        slots = torch.tensor([s for s, _, _ in rows], dtype=torch.long)
        last = torch.tensor([len(t) - 1 for _, t, _ in rows]) if last_only else None
        return model(tokens, pos, slots, last)

    def prefill(self, reqs: Sequence[RequestState]) -> None:
        """Run the prompts through target (and draft, for speculative rows); sample token 1."""
        t0 = time.perf_counter()
        rows = [(r.slot, r.tokens, 0) for r in reqs]
        logits = self._forward(self.target, rows, last_only=True)
        t1 = time.perf_counter()
        spec = [r for r in reqs if r.k > 0]
        if spec:
            assert self.draft is not None
            self._forward(self.draft, [(r.slot, r.tokens, 0) for r in spec], last_only=True)
        t2 = time.perf_counter()
        for i, r in enumerate(reqs):
            last = logits[i, 0]
            r.target_len = r.prompt_len
            r.draft_len = r.prompt_len if r.k > 0 else 0
            r.prefill = PrefillRecord(
                request_id=r.request_id,
                prompt_tokens=r.prompt_len,
                target_s=t1 - t0,
                draft_s=t2 - t1,
                batch_size=len(reqs),
                t_start=t0,
            )
            n, _ = self._commit(r, [self._pick(last, r)])
            self._note_logprobs(r, last[None], n)

    def _pick(self, logits: torch.Tensor, r: RequestState) -> int:
        if r.params.greedy:
            return int(logits.argmax())
        return int(sample(warp(logits, r.params), r.generator))

    # ------------------------------------------------------------------ one round
    def step(self, reqs: Sequence[RequestState]) -> list[RoundRecord]:
        """One decode round for every running request in ``reqs`` (plain and speculative mixed)."""
        live = [r for r in reqs if not r.done]
        if not live:
            return []
        t0 = time.perf_counter()
        # k this round, shrunk near the context limit (k+1 positions must fit).
        ks = {r.request_id: max(0, min(r.k, self.max_seq_len - r.target_len - 1)) for r in live}
        proposals: dict[str, list[int]] = {r.request_id: [] for r in live}
        qs: dict[str, list[torch.Tensor]] = {r.request_id: [] for r in live}
        spec = [r for r in live if ks[r.request_id] > 0]
        for i in range(max((ks[r.request_id] for r in spec), default=0)):
            active = [r for r in spec if ks[r.request_id] > i]
            rows = []
            for r in active:
                if i == 0:  # committed tokens the draft has not seen (1, or 2 after all-accept)
                    rows.append((r.slot, r.tokens[r.draft_len :], r.draft_len))
                else:
                    rows.append((r.slot, [proposals[r.request_id][-1]], r.target_len + i))
            assert self.draft is not None
            logits = self._forward(self.draft, rows, last_only=True)
            for j, r in enumerate(active):
                last = logits[j, 0]
                if r.params.greedy:
                    tok = int(last.argmax())
                else:
                    q = warp(last, r.params)
                    qs[r.request_id].append(q)
                    tok = int(sample(q, r.generator))
                proposals[r.request_id].append(tok)
        t1 = time.perf_counter()
        rows = [(r.slot, [r.tokens[-1], *proposals[r.request_id]], r.target_len) for r in live]
        logits = self._forward(self.target, rows)
        t2 = time.perf_counter()
        records = []
        for j, r in enumerate(live):
            k = ks[r.request_id]
            d = proposals[r.request_id]
            lg = logits[j, : k + 1]
            if k == 0:
                accepted, nxt = 0, self._pick(lg[0], r)
            elif r.params.greedy:
                accepted, nxt = greedy_accept(torch.tensor(d), lg.argmax(-1))
            else:
                p = warp(lg, r.params)
                q = torch.stack(qs[r.request_id])
                accepted, nxt = speculative_accept(torch.tensor(d), q, p, r.generator)
            n = r.target_len
            r.target_len = n + 1 + accepted  # x and the accepted drafts are now cached
            if k > 0:
                r.draft_len = n + 1 + min(accepted, k - 1)
            committed, truncated = self._commit(r, [*d[:accepted], nxt])
            self._note_logprobs(r, lg, committed)
            records.append(
                RoundRecord(
                    request_id=r.request_id,
                    round_index=r._round_index,
                    proposed=k,
                    accepted=accepted,
                    committed=committed,
                    draft_s=t1 - t0,
                    verify_s=t2 - t1,
                    overhead_s=0.0,
                    batch_size=len(live),
                    t_start=t0,
                    truncated=truncated,
                )
            )
            r._round_index += 1
        overhead = time.perf_counter() - t2
        for rec, r in zip(records, live, strict=True):
            rec.overhead_s = overhead
            r.rounds.append(rec)
        return records

    def _note_logprobs(self, r: RequestState, logits: torch.Tensor, n: int) -> None:
        """Log-probs of the n tokens just committed; logits[i] is the target's row for token i."""
        if r.logprobs is None or n == 0:
            return
        lp = torch.log_softmax(logits[:n].float(), dim=-1)  # (n, V)
        top = torch.topk(lp, min(r.logprobs, lp.shape[-1]), dim=-1) if r.logprobs > 0 else None
        for i, t in enumerate(r.output_ids[-n:]):
            alts = (
                list(zip(top.indices[i].tolist(), top.values[i].tolist(), strict=True))
                if top is not None
                else []
            )
            r.token_logprobs.append(TokenLogprob(t, float(lp[i, t]), alts))

    # ------------------------------------------------------------------ stopping
    def _commit(self, r: RequestState, new: list[int]) -> tuple[int, str | None]:
        """Append tokens, applying max_tokens, EOS and stop strings. -> (appended, truncation)."""
        p = r.params
        budget = p.max_tokens - len(r.output_ids)
        truncated: str | None = None
        if len(new) >= budget:
            new, truncated = new[:budget], "length"
        if not p.ignore_eos:
            for i, t in enumerate(new):
                if t in self.eos_ids:
                    new, truncated = new[: i + 1], "eos"
                    break
        if p.stop and self.tokenizer is not None:
            for i in range(len(new)):
                text = self._decode(r.output_ids + new[: i + 1])
                hit = _find_stop(text, p.stop)
                if hit is not None:
                    new, truncated = new[: i + 1], "stop"
                    r.tokens.extend(new)
                    r.text = text[:hit]
                    r.finish_reason = "stop"
                    return len(new), truncated
        r.tokens.extend(new)
        if self.tokenizer is not None:
            ids = r.output_ids
            if ids and ids[-1] in self.eos_ids and not p.ignore_eos:
                ids = ids[:-1]
            r.text = self._decode(ids)
        if truncated == "eos":
            r.finish_reason = "stop"
        elif truncated == "length" or len(r.output_ids) >= p.max_tokens:
            r.finish_reason = "length"
            truncated = truncated or "length"
        elif r.target_len >= self.max_seq_len:
            r.finish_reason, truncated = "length", "length"
        return len(new), truncated

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    # ------------------------------------------------------------------ drivers
    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        params: Sequence[SamplingParams],
        ks: Sequence[int],
        logprobs: int | None = None,
    ) -> list[GenerationResult]:
        """Run requests to completion together (static batch; slots freed at the end).

        ``logprobs``: record each output token's target log-prob and this many alternatives.
        """
        reqs = [self.new_request(p, sp, k) for p, sp, k in zip(prompts, params, ks, strict=True)]
        for r in reqs:
            r.logprobs = logprobs
        try:
            self.prefill(reqs)
            while not all(r.done for r in reqs):
                self.step(reqs)
        finally:
            for r in reqs:
                done = r.finish_reason
                self.release(r)
                r.finish_reason = done or "cancelled"
        return [r.result() for r in reqs]

    def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        k: int = 0,
        logprobs: int | None = None,
    ) -> GenerationResult:
        return self.generate_batch([prompt_ids], [params], [k], logprobs)[0]

    def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams, k: int = 0
    ) -> Iterator[RoundRecord]:
        """Yield each RoundRecord as it happens (batch of one)."""
        req = self.new_request(prompt_ids, params, k)
        try:
            self.prefill([req])
            while not req.done:
                yield from self.step([req])
        finally:
            done = req.finish_reason
            self.release(req)
            req.finish_reason = done or "cancelled"

    def memory(self) -> MemoryReport:
        """Bytes by part, as data for the capacity analysis."""
        import psutil

        d = self.draft
        rss = psutil.Process().memory_info().rss
        return MemoryReport(
            target_weight_bytes=self.target.weight_bytes(),
            draft_weight_bytes=d.weight_bytes(exclude=self.target) if d else 0,
            target_kv_bytes_per_token=self.target.kv_bytes_per_token(),
            draft_kv_bytes_per_token=d.kv_bytes_per_token() if d else 0,
            target_kv_bytes_allocated=self.target.kv_bytes_allocated(),
            draft_kv_bytes_allocated=d.kv_bytes_allocated() if d else 0,
            # ru_maxrss is sampled by the kernel and can trail the current RSS by a few pages
            peak_rss_bytes=max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, rss),
            rss_bytes=rss,
        )


def _find_stop(text: str, stops: Sequence[str]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None
