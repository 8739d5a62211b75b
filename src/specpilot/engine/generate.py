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

Device work per round: greedy rows are decided on the device (one argmax over the batch for each
draft step, one batched longest-prefix match after the verify) and the round's results cross to
the host once, at its end; sampling rows draw from their own generator (``RequestState``).
Decode and verify forwards go through a ``graphs.StepRunner`` (CUDA graphs on a GPU).

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
from dataclasses import dataclass
from typing import Any

import torch

from specpilot.engine.graphs import StepRunner
from specpilot.engine.loader import check_model_vocab, check_tokenizers_match
from specpilot.engine.model import Transformer
from specpilot.engine.requests import RequestState, TokenLogprob, commit
from specpilot.engine.rounds import Clock, Row, accept, propose, verify
from specpilot.engine.sampling import SamplingParams, sample, warp
from specpilot.errors import ConfigError
from specpilot.records import GenerationResult, PrefillRecord, RoundRecord

__all__ = ["Engine", "MemoryReport", "RequestState", "TokenLogprob"]

_ids = itertools.count()


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
    """Owns a target (and optionally a draft) with ``max_slots`` KV slots of ``max_seq_len``.

    ``step_mode``: how decode/verify forwards run (``graphs.StepRunner``): ``graphs`` on CUDA,
    ``dynamic`` on a CPU by default; ``static`` pads like the graphs without capturing.
    """

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
        step_mode: str | None = None,
    ) -> None:
        if draft is not None:
            check_model_vocab(target, draft)
            if tokenizer is not None and draft_tokenizer is not None:
                check_tokenizers_match(tokenizer, draft_tokenizer)
        self.target, self.draft, self.tokenizer = target, draft, tokenizer
        self.device = target.embed.weight.device
        seq = max_seq_len or min(target.cfg.context_length, 2048)
        if seq > target.cfg.context_length:
            raise ConfigError(
                f"max_seq_len={seq} exceeds the target's context length {target.cfg.context_length}"
            )
        self.max_seq_len, self.max_slots = seq, max_slots
        mode = step_mode or ("graphs" if self.device.type == "cuda" else "dynamic")
        target.setup_cache(seq, max_slots)
        self.runners = {id(target): StepRunner(target, max_slots, mode)}
        if draft is not None:
            draft.setup_cache(seq, max_slots)
            self.runners[id(draft)] = StepRunner(draft, max_slots, mode)
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
            raise ConfigError("prompt must contain at least one token")
        if not isinstance(k, int) or k < 0:
            raise ConfigError(
                f"k must be an integer >= 1 for speculative decoding (0 = plain), got {k!r}"
            )
        if k > 0 and self.draft is None:
            raise ConfigError("k > 0 needs a draft model: load one (--draft PATH) or set k = 0")
        vocab = self.target.cfg.vocab_size
        if any(not 0 <= int(t) < vocab for t in prompt_ids):
            raise ConfigError(f"prompt contains token ids outside the vocabulary [0, {vocab})")
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
        gen = torch.Generator(device=self.device).manual_seed(seed)
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
    def device_tensor(self, values: list[Any]) -> torch.Tensor:
        """Host values -> a long tensor on the engine's device (pinned, asynchronous on CUDA)."""
        if self.device.type == "cuda":
            t = torch.tensor(values, dtype=torch.long, pin_memory=True)
            return t.to(self.device, non_blocking=True)
        return torch.tensor(values, dtype=torch.long)

    def pack_rows(
        self, rows: Sequence[Row]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """rows -> tokens, pos (B, W) right-padded (pads at the scratch position ``max_seq_len``),
        slots (B,), and the longest real position (known here, so no device read later)."""
        width = max(len(t) for _, t, _ in rows)
        pad = self.max_seq_len
        tokens = [t + [0] * (width - len(t)) for _, t, _ in rows]
        pos = [list(range(s, s + len(t))) + [pad] * (width - len(t)) for _, t, s in rows]
        max_pos = max(s + len(t) - 1 for _, t, s in rows)
        return (
            self.device_tensor(tokens),
            self.device_tensor(pos),
            self.device_tensor([r[0] for r in rows]),
            max_pos,
        )

    def forward_rows(
        self, model: Transformer, rows: Sequence[Row], last_only: bool = False
    ) -> torch.Tensor:
        """rows: (slot, new tokens, start position) -> logits (B, W, V), right-padded.

        ``last_only``: logits of each row's last real token only, (B, 1, V).
        """
        tokens, pos, slots, max_pos = self.pack_rows(rows)
        last = self.device_tensor([len(t) - 1 for _, t, _ in rows]) if last_only else None
        return self.runners[id(model)](tokens, pos, slots, last, max_pos)

    def prefill(self, reqs: Sequence[RequestState]) -> None:
        """Run the prompts through target (and draft, for speculative rows); sample token 1."""
        t0 = time.perf_counter()
        logits = self.forward_rows(self.target, [(r.slot, r.tokens, 0) for r in reqs], True)[:, 0]
        firsts = logits.argmax(-1).tolist()  # (B,) greedy first tokens, one host read
        t1 = time.perf_counter()
        spec = [r for r in reqs if r.k > 0]
        if spec:
            assert self.draft is not None
            self.forward_rows(self.draft, [(r.slot, r.tokens, 0) for r in spec], last_only=True)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the draft's prefill time, not the next step's
        t2 = time.perf_counter()
        for i, r in enumerate(reqs):
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
            tok = (
                firsts[i]
                if r.params.greedy
                else int(sample(warp(logits[i], r.params), r.generator))
            )
            n, _ = self._commit(r, [tok])
            self._note_logprobs(r, logits[i][None], n)

    # ------------------------------------------------------------------ one round
    def step(self, reqs: Sequence[RequestState]) -> list[RoundRecord]:
        """One decode round for every running request in ``reqs`` (plain and speculative mixed)."""
        live = [r for r in reqs if not r.done]
        if not live:
            return []
        clock = Clock(self.device)
        # k this round, shrunk near the context limit (k+1 positions must fit).
        ks = [max(0, min(r.k, self.max_seq_len - r.target_len - 1)) for r in live]
        props, qs = propose(self, live, ks)
        clock.mark()
        logits = verify(self, live, ks, props)
        clock.mark()
        outcome, drafted = accept(self, live, ks, props, qs, logits)
        draft_s, verify_s = clock.spans()
        t2 = time.perf_counter()
        records = []
        for j, r in enumerate(live):
            k = ks[j]
            accepted, nxt = outcome[j]
            n = r.target_len
            r.target_len = n + 1 + accepted  # x and the accepted drafts are now cached
            if k > 0:
                r.draft_len = n + 1 + min(accepted, k - 1)
            committed, truncated = self._commit(r, [*drafted[j][:accepted], nxt])
            self._note_logprobs(r, logits[j, : k + 1], committed)
            records.append(
                RoundRecord(
                    request_id=r.request_id,
                    round_index=r._round_index,
                    proposed=k,
                    accepted=accepted,
                    committed=committed,
                    draft_s=draft_s,
                    verify_s=verify_s,
                    overhead_s=0.0,
                    batch_size=len(live),
                    t_start=clock.t0,
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
        ids = r.output_ids[-n:]
        chosen = lp.gather(-1, torch.tensor(ids, device=lp.device)[:, None])[:, 0].tolist()
        tops = (top.indices.tolist(), top.values.tolist()) if top is not None else None
        for i, t in enumerate(ids):
            alts = list(zip(tops[0][i], tops[1][i], strict=True)) if tops is not None else []
            r.token_logprobs.append(TokenLogprob(t, chosen[i], alts))

    # ------------------------------------------------------------------ stopping
    def _commit(self, r: RequestState, new: list[int]) -> tuple[int, str | None]:
        """Append tokens, applying max_tokens, EOS and stop strings. -> (appended, truncation)."""
        decode = self._decode if self.tokenizer is not None else None
        return commit(r, new, eos_ids=self.eos_ids, max_seq_len=self.max_seq_len, decode=decode)

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
