"""Measure the candidate weight formats on this machine and choose one (``--dtype auto``).

For each candidate the fp32 model is copied and converted (``engine.formats``), compared with
fp32 on fixed conversations (top-1 agreement, KL), and timed with the engine's own forward at
the objective points and a prefill (see ``engine.calibration``); timing stops early once a
format is ``prune_factor`` x slower than the best so far, so a slow reference kernel costs
little. The chosen format's full verify-cost curve (tokens 1..8 at batch 1 and the server's
batch) is measured after conversion (``complete_curve``). The draft is measured the same way at
one token per step, over the formats with the target's activation dtype.

    >>> plan = CalibrationPlan(candidates=("fp32", "bf16"), batches=(1,), k=3, reps=1)
    >>> cal = calibrate(target_fp32, None, plan, key="k", hardware={})   # doctest: +SKIP
    >>> cal.target.chosen, cal.verify_ratio()[1][4]                      # doctest: +SKIP
    ('bf16', 1.04)
"""

from __future__ import annotations

import copy
import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specpilot.engine.calibration import (
    CHOSEN,
    PRUNED,
    UNAVAILABLE,
    Calibration,
    FormatResult,
    Point,
    RoleCalibration,
    Tolerance,
    choose_format,
)
from specpilot.engine.formats import FORMATS, apply_format, parse_format, unavailable_reason
from specpilot.engine.model import Transformer

# Fixed conversations for the quality check: the four task kinds, English and Chinese.
CONVERSATIONS = (
    (
        "Write a Python function that checks whether a string is a palindrome.",
        "def is_palindrome(s: str) -> bool:\n    cleaned = ''.join(c.lower() for c in s if "
        "c.isalnum())\n    return cleaned == cleaned[::-1]",
    ),
    (
        'Return a JSON object with keys "name", "age" and "city" for: Bob, 42, Berlin.',
        '{"name": "Bob", "age": 42, "city": "Berlin"}',
    ),
    (
        "Write a short story about a robot learning to paint.",
        "The robot had painted the same grey square every morning for a year. Then one day a "
        "child left a jar of yellow on the windowsill, and the square began to glow.",
    ),
    (
        "请写一份关于下周一部门例会的通知，包括时间、地点和议程。",
        "各位同事：下周一上午九点在三楼会议室召开部门例会，议程包括上周工作总结、本周计划和项目进展汇报。",
    ),
    (
        "Explain what this code does: print(sum(x * x for x in range(10)))",
        "It adds up the squares of the numbers 0 to 9 and prints the result, 285.",
    ),
    (
        "List three tips for a job interview.",
        "1. Research the company beforehand.\n2. Prepare examples of your past work.\n"
        "3. Ask thoughtful questions at the end.",
    ),
)
MAX_QUALITY_TOKENS = 96
QUALITY_PREFILL, QUALITY_CHUNK = 32, 16
PREFILL_TOKENS = 64


@dataclass(frozen=True)
class CalibrationPlan:
    candidates: tuple[str, ...] = tuple(FORMATS)
    batches: tuple[int, ...] = (1,)  # batch 1 and the server's batch
    k: int = 3  # objective tokens: 1 and k + 1 (k = 0: plain decoding only)
    curve_tokens: tuple[int, ...] = tuple(range(1, 9))
    ctx: int = 128  # tokens already in the cache when a step is timed
    reps: int = 3
    tolerance: Tolerance = field(default_factory=Tolerance)
    prune_factor: float = 1.5
    fixed: bool = False  # an explicit --dtype: measure it, do not choose

    def target_points(self) -> list[Point]:
        ns = sorted({1, self.k + 1})
        return [(b, n) for b in self.batches for n in ns]

    def draft_points(self) -> list[Point]:
        return [(b, 1) for b in self.batches]


def quality_sequences(tokenizer: Any, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Token ids of the fixed conversations (chat template); seeded random ids without a tokenizer."""
    if tokenizer is None:
        g = torch.Generator().manual_seed(seed)
        return [torch.randint(0, vocab_size, (48,), generator=g).tolist() for _ in range(4)]
    out = []
    for user, assistant in CONVERSATIONS:
        msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        ids = tokenizer.apply_chat_template(msgs)
        if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        out.append([int(i) for i in ids][:MAX_QUALITY_TOKENS])
    return out


def _device(model: Transformer) -> torch.device:
    return model.embed.weight.device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def logprobs(model: Transformer, seqs: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Per sequence: log-softmax of every position's logits, (T, V) float32 on the CPU.

    The first ``QUALITY_PREFILL`` tokens go in as one prefill, the rest teacher-forced in chunks
    of ``QUALITY_CHUNK`` (fewer rows than a format's prefill path takes): both the prefill path
    and the few-row decode kernels of a format are compared with fp32.
    """
    dev = _device(model)
    model.setup_cache(max(len(s) for s in seqs), 1)
    slot = torch.zeros(1, dtype=torch.long, device=dev)
    out = []
    for s in seqs:
        parts = []
        edges = [0, *range(QUALITY_PREFILL, len(s), QUALITY_CHUNK), len(s)]
        for a, b in itertools.pairwise(edges):
            if b <= a:
                continue
            tokens = torch.tensor([list(s[a:b])], device=dev)
            pos = torch.arange(a, b, device=dev)[None]
            parts.append(model(tokens, pos, slot)[0].float())
        out.append(torch.log_softmax(torch.cat(parts), -1).cpu())
    return out


def compare(ref: Sequence[torch.Tensor], other: Sequence[torch.Tensor]) -> tuple[float, float, int]:
    """(top-1 agreement, mean KL(ref || other) in nats, positions) over aligned log-probs.

    Tokens the reference gives probability 0 (a restricted draft head's -inf) add nothing.
    """
    agree = kl = 0.0
    n = 0
    for r, o in zip(ref, other, strict=True):
        agree += float((r.argmax(-1) == o.argmax(-1)).sum())
        terms = torch.where(r.isfinite(), r.exp() * (r - o), torch.zeros_like(r))
        kl += float(terms.sum(-1).clamp_min(0).sum())
        n += r.shape[0]
    return agree / n, kl / n, n


class StepTimer:
    """Times the engine's cached forward of (batch, tokens) new tokens after ``ctx`` cached ones.

    The cache is not filled: attention over zeros costs what it costs over real keys.
    """

    def __init__(self, model: Transformer, max_batch: int, max_tokens: int, ctx: int) -> None:
        self.model, self.ctx, self.dev = model, ctx, _device(model)
        model.setup_cache(ctx + max(max_tokens, PREFILL_TOKENS) + 1, max_batch)

    def once(self, batch: int, tokens: int, start: int | None = None) -> float:
        """Seconds of one forward; ``start=0`` is a prefill (last position's logits only)."""
        dev, vocab = self.dev, self.model.cfg.vocab_size
        ids = torch.arange(500, 500 + batch * tokens, device=dev).remainder(vocab)
        first = self.ctx if start is None else start
        pos = torch.arange(first, first + tokens, device=dev).expand(batch, tokens)
        slots = torch.arange(batch, device=dev)
        last = torch.full((batch,), tokens - 1, device=dev) if start == 0 else None
        with torch.inference_mode():
            _sync(dev)
            t = time.perf_counter()
            self.model(ids.reshape(batch, tokens), pos, slots, last)
            _sync(dev)
        return time.perf_counter() - t

    def median(self, batch: int, tokens: int, reps: int, start: int | None = None) -> float:
        self.once(batch, tokens, start)  # warm-up: the first call at a new shape
        return statistics.median(self.once(batch, tokens, start) for _ in range(reps))

    def curve(self, points: Sequence[Point], reps: int) -> dict[Point, float]:
        """Median per point, the points interleaved so a burst of load spreads over all of them."""
        times: dict[Point, list[float]] = {p: [] for p in points}
        for b, n in points:
            self.once(b, n)
        for _ in range(reps):
            for b, n in points:
                times[(b, n)].append(self.once(b, n))
        return {p: statistics.median(t) for p, t in times.items()}

    def prefill(self, reps: int) -> float:
        """A batch-1 prefill of PREFILL_TOKENS from position 0, logits of the last one only."""
        return self.median(1, PREFILL_TOKENS, reps, start=0)


def _measure(
    r: FormatResult,
    timer: StepTimer,
    points: Sequence[Point],
    plan: CalibrationPlan,
    best: float | None,
) -> None:
    """Objective points (stop once clearly slower than ``best``), then the prefill.

    The warm-up call of a point already prunes when it alone is over twice the limit, so a
    slow reference kernel costs one call.
    """
    spent = 0.0
    limit = plan.prune_factor * best if best is not None else float("inf")
    for b, n in points:
        warm = timer.once(b, n)
        if spent + warm > 2 * limit:
            r.status = PRUNED
            r.note = f"first call at b={b},n={n} over {2 * plan.prune_factor}x the best objective"
            return
        r.curve[(b, n)] = statistics.median(timer.once(b, n) for _ in range(plan.reps))
        spent += r.curve[(b, n)]
        if spent > limit:
            r.status = PRUNED
            r.note = f"over {plan.prune_factor}x the best objective after {len(r.curve)} points"
            return
    r.prefill_s = timer.prefill(plan.reps)


def calibrate_role(
    role: str,
    reference: Transformer,
    candidates: Sequence[str],
    seqs: Sequence[Sequence[int]],
    plan: CalibrationPlan,
    points: Sequence[Point],
    fallback: str = "fp32",
    log: Callable[[str], None] | None = None,
) -> RoleCalibration:
    """Measure each candidate as a converted copy of the fp32 ``reference`` and choose one."""
    ref = logprobs(reference, seqs)
    results: list[FormatResult] = []
    best: float | None = None
    max_batch = max(b for b, _ in points)
    for name in candidates:
        fmt = parse_format(name)
        r = FormatResult(fmt.name)
        results.append(r)
        why = unavailable_reason(fmt, _device(reference))
        if why is not None:
            r.status, r.note = UNAVAILABLE, why
            continue
        model = reference if fmt.name == "fp32" else apply_format(copy.deepcopy(reference), fmt)
        # time first: a format clearly slower than one already within tolerance is not compared
        timer = StepTimer(model, max_batch, max(plan.curve_tokens), plan.ctx)
        _measure(r, timer, points, plan, best)
        if r.status != PRUNED:
            r.top1, r.kl, r.positions = compare(ref, logprobs(model, seqs))
            obj = r.objective(points)
            if obj is not None and (plan.fixed or plan.tolerance.admits(r.top1, r.kl)):
                best = obj if best is None else min(best, obj)
        if log:
            ms = {f"b{b}n{n}": round(s * 1e3, 1) for (b, n), s in r.curve.items()}
            q = "" if r.top1 is None else f"top-1 {r.top1:.3f} KL {r.kl:.4f} "
            log(f"{role} {name}: {q}ms {ms} {r.note}")
        del model
    if plan.fixed:
        only = results[0]
        only.status = CHOSEN
        return RoleCalibration(role, results, only.format, "set explicitly (--dtype)", list(points))
    chosen, reason = choose_format(results, plan.tolerance, points, fallback=fallback)
    return RoleCalibration(role, results, chosen, reason, list(points))


def complete_curve(role: RoleCalibration, model: Transformer, plan: CalibrationPlan) -> None:
    """Measure the chosen format's full verify-cost curve on ``model`` (already converted)."""
    r = role.result(role.chosen)
    if r is None:
        return
    curve = [(b, n) for b in plan.batches for n in plan.curve_tokens]
    timer = StepTimer(model, max(plan.batches), max(plan.curve_tokens), plan.ctx)
    r.curve.update(timer.curve(curve, plan.reps))  # the objective points again, interleaved


def calibrate(
    target: Transformer,
    draft: Transformer | None,
    plan: CalibrationPlan,
    *,
    key: str,
    hardware: dict[str, Any],
    seqs: Sequence[Sequence[int]] | None = None,
    log: Callable[[str], None] | None = None,
) -> Calibration:
    """Measure ``plan.candidates`` for the target (and its draft); both must be fp32 here.

    Neither model is converted: the caller applies the chosen formats (``apply_format``) and
    then measures the chosen target format's full curve (``complete_curve``).
    """
    t0 = time.perf_counter()
    seqs = seqs or quality_sequences(None, target.cfg.vocab_size)
    tgt = calibrate_role(
        "target", target, plan.candidates, seqs, plan, plan.target_points(), log=log
    )
    drf = None
    if draft is not None:
        act = parse_format(tgt.chosen).act_dtype  # the draft shares the target's embedding
        same = [c for c in plan.candidates if parse_format(c).act_dtype == act]
        floor = "bf16" if act == torch.bfloat16 else "fp32"
        if plan.fixed:
            same = [tgt.chosen]
        drf = calibrate_role("draft", draft, same, seqs, plan, plan.draft_points(), floor, log)
    mode = "fixed" if plan.fixed else "measured"
    cal = Calibration(mode, key, hardware, plan.tolerance, tgt, drf)
    cal.seconds = time.perf_counter() - t0
    return cal
