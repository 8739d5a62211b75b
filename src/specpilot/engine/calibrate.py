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
import math
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
    choose_draft,
    choose_format,
)
from specpilot.engine.formats import FORMATS, apply_format, parse_format, unavailable_reason
from specpilot.engine.graphs import StepRunner
from specpilot.engine.model import Transformer

FIXED = "set explicitly (--dtype)"

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


@dataclass(frozen=True)
class QualitySet:
    """Token ids of the fixed conversations and where each one's answer starts."""

    seqs: list[list[int]]
    answers: list[int]  # index of the first answer token of each sequence


def _chat_ids(tokenizer: Any, msgs: list[dict[str, str]], **kw: Any) -> list[int]:
    ids = tokenizer.apply_chat_template(msgs, **kw)
    if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def quality_set(tokenizer: Any, vocab_size: int, seed: int = 0) -> QualitySet:
    """The fixed conversations in the chat template; seeded random ids without a tokenizer."""
    if tokenizer is None:
        g = torch.Generator().manual_seed(seed)
        seqs = [torch.randint(0, vocab_size, (48,), generator=g).tolist() for _ in range(4)]
        return QualitySet(seqs, [24] * len(seqs))
    seqs, answers = [], []
    for user, assistant in CONVERSATIONS:
        ask = [{"role": "user", "content": user}]
        seqs.append(
            _chat_ids(tokenizer, [*ask, {"role": "assistant", "content": assistant}])[
                :MAX_QUALITY_TOKENS
            ]
        )
        answers.append(len(_chat_ids(tokenizer, ask, add_generation_prompt=True)))
    return QualitySet(seqs, answers)


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


def compare(
    ref: Sequence[torch.Tensor], other: Sequence[torch.Tensor], starts: Sequence[int] | None = None
) -> tuple[float, float, int]:
    """(top-1 agreement, mean KL(ref || other) in nats, positions) over aligned log-probs;
    ``starts``: compare only the positions predicting each sequence's answer tokens.

    Tokens the reference gives probability 0 add nothing; KL is infinite where ``other`` gives 0
    to a token ``ref`` does not (a draft's restricted head).
    """
    agree = kl = 0.0
    n = 0
    for i, (r, o) in enumerate(zip(ref, other, strict=True)):
        if starts is not None:
            r, o = r[starts[i] - 1 :], o[starts[i] - 1 :]
        agree += float((r.argmax(-1) == o.argmax(-1)).sum())
        terms = torch.where(r.isfinite(), r.exp() * (r - o), torch.zeros_like(r))
        kl += float(terms.sum(-1).clamp_min(0).sum())
        n += r.shape[0]
    return agree / n, kl / n, n


class StepTimer:
    """Times the engine's cached forward of (batch, tokens) new tokens after ``ctx`` cached ones,
    through the engine's own step runner (CUDA graphs on a GPU: what a decode step costs there).

    The cache is not filled: attention over zeros costs what it costs over real keys.
    """

    def __init__(self, model: Transformer, max_batch: int, max_tokens: int, ctx: int) -> None:
        self.model, self.ctx, self.dev = model, ctx, _device(model)
        model.setup_cache(ctx + max(max_tokens, PREFILL_TOKENS) + 1, max_batch)
        mode = "graphs" if self.dev.type == "cuda" else "dynamic"
        self.runner = StepRunner(model, max_batch, mode)

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
            self.runner(ids.reshape(batch, tokens), pos, slots, last, first + tokens - 1)
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
        times = [timer.once(b, n) for _ in range(plan.reps)]
        r.curve[(b, n)] = statistics.median(times)
        # the spread of the repetitions: formats closer than this are not told apart by timing
        r.noise = max(r.noise or 0.0, (max(times) - min(times)) / r.curve[(b, n)])
        spent += r.curve[(b, n)]
        if spent > limit:
            r.status = PRUNED
            r.note = f"over {plan.prune_factor}x the best objective after {len(r.curve)} points"
            return
    r.prefill_s = timer.prefill(plan.reps)


def measure_formats(
    role: str,
    reference: Transformer,
    candidates: Sequence[str],
    qs: QualitySet,
    ref: Sequence[torch.Tensor] | None,
    plan: CalibrationPlan,
    points: Sequence[Point],
    counts: Callable[[FormatResult], bool],
    log: Callable[[str], None] | None = None,
) -> list[FormatResult]:
    """Time and compare each candidate as a converted copy of the fp32 ``reference``.

    ``ref``: the fp32 target's log-probs on ``qs`` (None: time only); a draft is compared on the
    answer positions only (its agreement there is the acceptance proxy); ``counts(result)``: whether a measured
    format may set the best objective that later candidates are pruned against.
    """
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
        if r.status != PRUNED and ref is not None:
            starts = qs.answers if role == "draft" else None
            r.top1, kl, r.positions = compare(ref, logprobs(model, qs.seqs), starts)
            r.kl = kl if math.isfinite(kl) else None  # a restricted draft head: infinite
            if r.kl is None:
                r.note = "KL infinite: the head scores a subset of the vocabulary"
            obj = r.objective(points)
            if obj is not None and counts(r):
                best = obj if best is None else min(best, obj)
        if log:
            ms = {f"b{b}n{n}": round(s * 1e3, 1) for (b, n), s in r.curve.items()}
            q = "" if r.top1 is None else f"top-1 {r.top1:.3f} KL {r.kl} "
            log(f"{role} {name}: {q}ms {ms} {r.note}")
        del model
    return results


def complete_curve(role: RoleCalibration, model: Transformer, plan: CalibrationPlan) -> None:
    """Measure the chosen format's full verify-cost curve on ``model`` (already converted)."""
    r = role.result(role.chosen)
    if r is None:
        return
    curve = [(b, n) for b in plan.batches for n in plan.curve_tokens]
    timer = StepTimer(model, max(plan.batches), max(plan.curve_tokens), plan.ctx)
    r.curve.update(timer.curve(curve, plan.reps))  # the objective points again, interleaved


def _calibrate_draft(
    draft: Transformer,
    tgt: RoleCalibration,
    qs: QualitySet,
    ref: Sequence[torch.Tensor] | None,
    plan: CalibrationPlan,
    log: Callable[[str], None] | None,
) -> RoleCalibration:
    """The draft's format: among those with the target's activation dtype (they share the
    embedding), the best expected speed-up from its agreement with the target and its cost;
    also when the target's format was set explicitly (all formats available are tried then)."""
    act = parse_format(tgt.chosen).act_dtype
    pool = FORMATS if plan.fixed else {n: FORMATS[n] for n in plan.candidates}
    cands = [n for n, f in pool.items() if f.act_dtype == act]
    points = plan.draft_points()
    results = measure_formats("draft", draft, cands, qs, ref, plan, points, lambda r: True, log)
    chosen = tgt.result(tgt.chosen)
    t1 = chosen.curve.get((1, 1)) if chosen is not None else None
    tk = chosen.curve.get((1, plan.k + 1)) if chosen is not None else None
    floor = "bf16" if act == torch.bfloat16 else "fp32"
    if not t1 or not tk:
        return RoleCalibration("draft", results, floor, "the target's step was not timed", points)
    name, why = choose_draft(results, t1, tk / t1, max(plan.k, 1), floor)
    return RoleCalibration("draft", results, name, why, points)


def calibrate(
    target: Transformer,
    draft: Transformer | None,
    plan: CalibrationPlan,
    *,
    key: str,
    hardware: dict[str, Any],
    quality: QualitySet | None = None,
    log: Callable[[str], None] | None = None,
) -> Calibration:
    """Measure ``plan.candidates`` for the target (and its draft); both must be fp32 here.

    Neither model is converted: the caller applies the chosen formats (``apply_format``) and
    then measures the chosen target format's full curve (``complete_curve``).
    """
    t0 = time.perf_counter()
    qs = quality or quality_set(None, target.cfg.vocab_size)
    # an explicit target format is timed, not compared (its quality is the user's choice); the
    # fp32 target's log-probs are still the draft's reference
    ref = logprobs(target, qs.seqs) if not plan.fixed or draft is not None else None
    tpoints = plan.target_points()
    results = measure_formats(
        "target",
        target,
        plan.candidates,
        qs,
        None if plan.fixed else ref,
        plan,
        tpoints,
        lambda r: plan.fixed or plan.tolerance.admits(r.top1, r.kl),
        log,
    )
    if plan.fixed:
        results[0].status = CHOSEN
        tgt = RoleCalibration("target", results, results[0].format, FIXED, tpoints)
    else:
        name, why = choose_format(results, plan.tolerance, tpoints)
        tgt = RoleCalibration("target", results, name, why, tpoints)
    drf = None
    if draft is not None:
        drf = _calibrate_draft(draft, tgt, qs, ref, plan, log)
    mode = "fixed" if plan.fixed else "measured"
    cal = Calibration(mode, key, hardware, plan.tolerance, tgt, drf)
    cal.seconds = time.perf_counter() - t0
    return cal
