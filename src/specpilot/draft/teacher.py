"""Target-generated distillation data: continuations plus the target's top-k log-probs.

The target decodes many prompts at once through its fixed KV cache (one slot per row; a finished
row's slot is refilled with the next prompt, so the batch stays full). At every generated
position we keep the target's top-``topk`` log-probabilities over the full vocabulary: the soft
labels the draft learns from. Rows alternate between greedy and sampled decoding (explicit
``torch.Generator``), so the draft sees the target's argmax paths and some of its variety.

    >>> samples = generate_teacher_data(target, prompts, batch=16, max_new=160)   # doctest: +SKIP
    >>> save_shard(samples, Path("build/distill/teacher-000.pt"))                # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specpilot.engine.model import Transformer


@dataclass
class TeacherSample:
    """One prompt's continuation. ``topk_*[i]`` is the target's distribution for token
    ``tokens[prompt_len + i]`` (computed at position ``prompt_len + i - 1``)."""

    group: str
    tokens: list[int]
    prompt_len: int
    temperature: float
    topk_ids: torch.Tensor  # (G, K) int32
    topk_logprobs: torch.Tensor  # (G, K) float16


@dataclass
class _Row:
    slot: int
    group: str
    tokens: list[int]
    prompt_len: int
    temperature: float
    ids: list[torch.Tensor] = field(default_factory=list)
    lps: list[torch.Tensor] = field(default_factory=list)

    def sample(self) -> TeacherSample:
        return TeacherSample(
            group=self.group,
            tokens=self.tokens,
            prompt_len=self.prompt_len,
            temperature=self.temperature,
            topk_ids=torch.stack(self.ids),
            topk_logprobs=torch.stack(self.lps),
        )


def _pick_batch(
    logits: torch.Tensor, temps: torch.Tensor, gen: torch.Generator | None
) -> torch.Tensor:
    """logits (B, V), temps (B,) (0 = greedy) -> next tokens (B,); nucleus 0.95 when sampling
    (the tail of a 49k vocabulary is noise the draft need not learn)."""
    out = logits.argmax(-1)
    hot = temps > 0
    if bool(hot.any()):
        lg = logits[hot].float() / temps[hot, None]
        probs = torch.softmax(lg, dim=-1)
        sp, idx = torch.sort(probs, dim=-1, descending=True)
        sp = sp.masked_fill(sp.cumsum(-1) - sp >= 0.95, 0.0)
        choice = torch.multinomial(sp, 1, generator=gen)  # (b, 1)
        out[hot] = idx.gather(-1, choice).squeeze(-1)
    return out


def _has_last(model: Transformer) -> bool:
    return "last" in inspect.signature(model.forward).parameters


@torch.inference_mode()
def generate_teacher_data(
    target: Transformer,
    prompts: Sequence[tuple[str, list[int]]],
    *,
    batch: int = 16,
    max_new: int = 160,
    topk: int = 16,
    temperatures: Sequence[float] = (0.0, 0.0, 0.7),
    eos_ids: Sequence[int] = (),
    seed: int = 0,
    deadline: float | None = None,
    max_seq_len: int | None = None,
) -> Iterator[TeacherSample]:
    """Yield a TeacherSample per prompt (group, token ids), until done or ``deadline``.

    Row i decodes at ``temperatures[i % len(temperatures)]`` (0 = greedy).
    """
    longest = max((len(p) for _, p in prompts), default=1)
    seq = max_seq_len or min(target.cfg.context_length, longest + max_new + 1)
    target.setup_cache(seq, batch)
    device = target.embed.weight.device
    gen = torch.Generator(device=device).manual_seed(seed)
    eos = frozenset(int(e) for e in eos_ids)
    queue = list(enumerate(prompts))[::-1]
    rows: dict[int, _Row] = {}

    def finished(row: _Row) -> bool:
        n = len(row.tokens) - row.prompt_len
        return n >= max_new or row.tokens[-1] in eos or len(row.tokens) >= seq

    while queue or rows:
        if deadline is not None and time.monotonic() > deadline:
            return
        free = [s for s in range(batch) if s not in rows]
        new = _take_prompts(queue, free, seq, temperatures)
        if new:
            _record(new, _prefill(target, new, seq), topk, gen)
            for r in new:
                rows[r.slot] = r
        for s in [s for s, r in rows.items() if finished(r)]:
            yield rows.pop(s).sample()
        if not rows:
            continue
        live = sorted(rows)
        _record([rows[s] for s in live], _decode_step(target, rows, batch, seq), topk, gen)
        for s in live:
            if finished(rows[s]):
                yield rows.pop(s).sample()


def _take_prompts(
    queue: list[tuple[int, tuple[str, list[int]]]],
    free: list[int],
    seq: int,
    temperatures: Sequence[float],
) -> list[_Row]:
    """Rows for the next queued prompts (popped from the end), one per ``free`` slot; a prompt
    too long for the cache is skipped. Prompt ``i`` decodes at ``temperatures[i % len]``."""
    new: list[_Row] = []
    while free and queue:
        idx, (group, ids) = queue.pop()
        if len(ids) + 2 > seq:
            continue
        t = float(temperatures[idx % len(temperatures)])
        new.append(_Row(free.pop(0), group, list(ids), len(ids), t))
    return new


def _prefill(target: Transformer, new: list[_Row], seq: int) -> torch.Tensor:
    """Prefill the new rows together, right-padded (pads at the scratch position ``seq``):
    the logits (b, V) at each row's last prompt position."""
    device = target.embed.weight.device
    width = max(r.prompt_len for r in new)
    tokens = torch.zeros(len(new), width, dtype=torch.long)
    pos = torch.full((len(new), width), seq, dtype=torch.long)
    for j, r in enumerate(new):
        tokens[j, : r.prompt_len] = torch.tensor(r.tokens)
        pos[j, : r.prompt_len] = torch.arange(r.prompt_len)
    slots = torch.tensor([r.slot for r in new])
    last = torch.tensor([r.prompt_len - 1 for r in new])
    if _has_last(target) and device.type == "cpu":
        # the engine can return only the last position's logits
        logits = target(tokens.to(device), pos.to(device), slots.to(device), last=last.to(device))
        return logits[:, 0]
    logits = target(tokens.to(device), pos.to(device), slots.to(device))
    return logits[torch.arange(len(new), device=device), last.to(device)]


def _decode_step(target: Transformer, rows: dict[int, _Row], batch: int, seq: int) -> torch.Tensor:
    """One decode step over all ``batch`` slots (a contiguous cache view; idle slots feed a pad
    at ``seq``): the logits (b, V) of the running rows, in slot order."""
    device = target.embed.weight.device
    tokens = torch.zeros(batch, 1, dtype=torch.long)
    pos = torch.full((batch, 1), seq, dtype=torch.long)
    for s, r in rows.items():
        tokens[s, 0] = r.tokens[-1]
        pos[s, 0] = len(r.tokens) - 1
    logits = target(tokens.to(device), pos.to(device), torch.arange(batch, device=device))
    return logits[torch.tensor(sorted(rows), device=device), 0]


def _record(
    batch_rows: list[_Row], logits: torch.Tensor, topk: int, gen: torch.Generator | None
) -> None:
    """logits (b, V) for ``batch_rows``: keep top-k log-probs, append the next token."""
    v, i = torch.log_softmax(logits.float(), dim=-1).topk(topk)  # (b, K)
    temps = torch.tensor([r.temperature for r in batch_rows], device=logits.device)
    nxt = _pick_batch(logits, temps, gen).tolist()
    v, i = v.to(torch.float16).cpu(), i.to(torch.int32).cpu()  # one host copy per step
    for j, r in enumerate(batch_rows):
        r.ids.append(i[j])
        r.lps.append(v[j])
        r.tokens.append(int(nxt[j]))


def save_shard(samples: Sequence[TeacherSample], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save([s.__dict__ for s in samples], tmp)
    tmp.replace(path)


def load_shards(directory: Path) -> list[TeacherSample]:
    out: list[TeacherSample] = []
    for f in sorted(directory.glob("teacher-*.pt")):
        out += [TeacherSample(**d) for d in torch.load(f, weights_only=True)]
    return out
