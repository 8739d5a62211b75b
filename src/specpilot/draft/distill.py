"""Distil a small draft from a target: soft cross-entropy on the target's top-k log-probs.

The recipe (``specpilot distill``) in four steps, all cached under ``--cache``:

1. prompts of the four task kinds from offline corpora (``corpora.build_prompts``; prompts of
   the task groups' evaluation split are excluded);
2. the target generates continuations (greedy and sampled) and keeps its top-k log-probs at
   every generated position (``teacher.generate_teacher_data``; shards are reused on rerun);
3. the draft head's vocabulary: the N token ids the target generated most often;
4. the draft (copies of a few target layers, embedding shared) is trained for the remaining
   time with a time-based cosine schedule, then saved as a draft directory (``model.py``).

Only the positions the target generated carry a loss (the prompt is context): those are the
positions where a draft proposes. Loss per position: ``-sum_j p_j log q(t_j)`` over the
teacher's top-k tokens t_j that lie in the head's vocabulary, p renormalised over them.

    >>> stats = train_draft(draft, samples, minutes=5.0)                 # doctest: +SKIP
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from specpilot.draft.teacher import TeacherSample
from specpilot.engine.draft_format import RestrictedHead
from specpilot.engine.model import Transformer
from specpilot.errors import ConfigError


def head_vocab(
    samples: Sequence[TeacherSample], n: int, always: Sequence[int] = ()
) -> torch.Tensor:
    """The ``n`` ids the target generated most often (``always`` first, e.g. EOS), sorted."""
    counts: Counter[int] = Counter()
    for s in samples:
        counts.update(s.tokens[s.prompt_len :])
        counts.update(int(t) for t in s.topk_ids[:, 0])  # the target's argmax, too
    ids = list(dict.fromkeys([*always, *(t for t, _ in counts.most_common())]))[:n]
    if len(ids) < n:  # fill with prompt tokens, then the lowest ids
        for s in samples:
            ids += [t for t in s.tokens[: s.prompt_len] if t not in set(ids)]
        ids = list(dict.fromkeys(ids))[:n]
    return torch.tensor(sorted(ids), dtype=torch.long)


def coverage(samples: Sequence[TeacherSample], ids: torch.Tensor) -> float:
    """Share of the target's generated tokens that the head can propose."""
    keep = set(ids.tolist())
    gen = [t for s in samples for t in s.tokens[s.prompt_len :]]
    return sum(t in keep for t in gen) / max(len(gen), 1)


@dataclass
class TrainStats:
    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    loss: list[float] = field(default_factory=list)  # one per log interval
    train_agreement: float | None = None
    heldout_agreement: float | None = None
    heldout_agreement_by_group: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _batches(
    samples: Sequence[TeacherSample], max_tokens: int, rng: random.Random
) -> list[list[int]]:
    """Indices grouped by similar length, each batch at most ``max_tokens`` padded tokens."""
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].tokens))
    batches: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i in order:
        w = max(width, len(samples[i].tokens))
        if cur and w * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, w = [], len(samples[i].tokens)
        cur.append(i)
        width = w
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def _collate(
    samples: Sequence[TeacherSample], idx: list[int], remap: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> tokens (B, T), loss rows (M,), loss cols (M,), subset ids (M, K), probs (M, K)."""
    width = max(len(samples[i].tokens) for i in idx)
    tokens = torch.zeros(len(idx), width, dtype=torch.long)
    rows, cols, tids, tlps = [], [], [], []
    for b, i in enumerate(idx):
        s = samples[i]
        tokens[b, : len(s.tokens)] = torch.tensor(s.tokens)
        g = s.topk_ids.shape[0]
        rows.append(torch.full((g,), b, dtype=torch.long))
        cols.append(torch.arange(s.prompt_len - 1, s.prompt_len - 1 + g))
        tids.append(s.topk_ids.long())
        tlps.append(s.topk_logprobs.float())
    sub = remap[torch.cat(tids)]  # (M, K): index in the head, -1 if not there
    p = torch.cat(tlps).exp() * (sub >= 0)
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-9)
    return (
        tokens.to(device),
        torch.cat(rows).to(device),
        torch.cat(cols).to(device),
        sub.clamp_min(0).to(device),
        p.to(device),
    )


def _head(draft: Transformer) -> RestrictedHead:
    if not isinstance(draft.lm_head, RestrictedHead):
        raise ValueError(
            "train_draft needs a draft with a RestrictedHead (make_draft(head_ids=...))"
        )
    return draft.lm_head


def _remap(head: RestrictedHead) -> torch.Tensor:
    remap = torch.full((head.vocab_size,), -1, dtype=torch.long)
    remap[head.ids.cpu()] = torch.arange(head.ids.numel())
    return remap


def agreement(
    draft: Transformer,
    samples: Sequence[TeacherSample],
    max_tokens: int = 4096,
    device: str | torch.device = "cpu",
) -> tuple[float, dict[str, float]]:
    """Teacher-forced top-1 agreement: P(draft argmax == target argmax) at generated positions.

    With greedy decoding this is the per-token acceptance alpha along the target's own path.
    """
    head = _head(draft)
    remap = _remap(head)
    dev = torch.device(device)
    hits: Counter[str] = Counter()
    total: Counter[str] = Counter()
    with torch.no_grad():
        for idx in _batches(samples, max_tokens, random.Random(0)):
            tokens, rows, cols, _, _ = _collate(samples, idx, remap, dev)
            h = draft.hidden_train(tokens)[rows, cols]  # (M, dim)
            pred = head.ids[head.forward_small(h).argmax(-1)].cpu()  # (M,)
            want = torch.cat([samples[i].topk_ids[:, 0].long() for i in idx])
            groups = [samples[i].group for i in idx for _ in range(samples[i].topk_ids.shape[0])]
            for g, ok in zip(groups, (pred == want).tolist(), strict=True):
                hits[g] += ok
                total[g] += 1
    by_group = {g: hits[g] / total[g] for g in sorted(total)}
    overall = sum(hits.values()) / max(sum(total.values()), 1)
    return overall, by_group


def train_draft(
    draft: Transformer,
    samples: Sequence[TeacherSample],
    *,
    minutes: float | None = None,
    max_steps: int | None = None,
    lr: float = 5e-4,
    warmup_steps: int = 20,
    max_tokens: int = 4096,
    seed: int = 0,
    device: str | torch.device = "cpu",
    amp: bool = False,
    log: Callable[[str], None] | None = None,
) -> TrainStats:
    """Train the draft's layers and final norm (embedding and head stay the target's).

    Stops after ``minutes`` or ``max_steps``, whichever first; the learning rate follows a
    cosine over that budget (by elapsed time when ``minutes`` is set), so a user with more time
    simply passes more minutes.
    """
    if minutes is None and max_steps is None:
        raise ConfigError("give minutes or max_steps")
    head = _head(draft)
    remap = _remap(head)
    dev = torch.device(device)
    params = _trainable(draft)
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    rng = random.Random(seed)
    stats = TrainStats()
    t0 = time.monotonic()
    budget_s = minutes * 60.0 if minutes is not None else None
    running, n_run = 0.0, 0
    epoch_batches: list[list[int]] = []
    while True:
        elapsed = time.monotonic() - t0
        if (budget_s is not None and elapsed >= budget_s) or (
            max_steps is not None and stats.steps >= max_steps
        ):
            break
        if not epoch_batches:
            epoch_batches = _batches(samples, max_tokens, rng)
        idx = epoch_batches.pop()
        frac = elapsed / budget_s if budget_s else stats.steps / max(max_steps or 1, 1)
        for g in opt.param_groups:
            g["lr"] = _lr(lr, stats.steps, warmup_steps, frac)
        tokens, rows, cols, sub, probs = _collate(samples, idx, remap, dev)
        loss = _distill_loss(draft, head, tokens, rows, cols, sub, probs, amp)
        running += _optimiser_step(opt, params, loss)
        stats.steps += 1
        stats.tokens += int(rows.numel())
        n_run += 1
        if stats.steps % 25 == 0:
            _interval(stats, running / n_run, t0, log)
            running, n_run = 0.0, 0
    if n_run:
        stats.loss.append(running / n_run)
    stats.seconds = time.monotonic() - t0
    _freeze(draft)
    return stats


def _trainable(draft: Transformer) -> list[torch.nn.Parameter]:
    """Put the draft in training mode with only its layers and final norm trainable (the
    embedding and head stay the target's); those parameters."""
    draft.train()
    params = [p for n, p in draft.named_parameters() if n.startswith(("layers.", "norm."))]
    for n, p in draft.named_parameters():
        p.requires_grad_(n.startswith(("layers.", "norm.")))
    return params


def _interval(stats: TrainStats, loss: float, t0: float, log: Callable[[str], None] | None) -> None:
    """A log interval's mean ``loss`` kept in ``stats`` and logged with the time since ``t0``."""
    stats.loss.append(loss)
    if log:
        log(
            f"step {stats.steps} loss {loss:.3f} tokens {stats.tokens} {time.monotonic() - t0:.0f}s"
        )


def _freeze(draft: Transformer) -> None:
    """Back to inference: eval mode, no parameter trainable."""
    draft.eval()
    for q_ in draft.parameters():
        q_.requires_grad_(False)


def _optimiser_step(
    opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], loss: torch.Tensor
) -> float:
    """One AdamW step on ``loss``, gradients clipped to norm 1; the loss as a float."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return float(loss.detach())


def _lr(lr: float, step: int, warmup_steps: int, frac: float) -> float:
    """Linear warm-up over ``warmup_steps``, then a cosine from ``lr`` down to a tenth of it as
    ``frac`` of the budget is spent."""
    warm = min(1.0, (step + 1) / warmup_steps)
    return lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def _distill_loss(
    draft: Transformer,
    head: RestrictedHead,
    tokens: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    sub: torch.Tensor,
    probs: torch.Tensor,
    amp: bool,
) -> torch.Tensor:
    """Cross-entropy of the draft against the target's top-k distribution (``probs`` over the
    head's ids ``sub``) at the labelled positions (``rows``, ``cols``), mean over them."""
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=amp):
        h = draft.hidden_train(tokens)[rows, cols]  # (M, dim)
        logits = head.forward_small(h).float()  # (M, N)
    logq = torch.log_softmax(logits, dim=-1)
    return -(probs * logq.gather(-1, sub)).sum(-1).mean()
