"""R3 draft screening: rank candidate drafts by measured cost per committed token, per group.

For every candidate draft and every k, each group's prompts are decoded greedily at batch 1 with
the builtin engine; the rounds give acceptance per position, mean acceptance length and decode
cost per committed token (R2 definitions, ``analysis.mechanism.rounds``). Plain decoding (k = 0) of the same
prompts is the baseline. Micro-benchmarks give the draft's step time, the target's one-token
step and its verify time for k + 1 tokens, from which the Leviathan prediction is printed next
to the measurement. Each candidate's perplexity on the target's own outputs is printed too, to
show that it is *not* the ranking (Yan et al.: language-modelling strength does not predict
speculative speed).

    >>> report = screen(target, {"d4": d4, "d2": d2}, {"code": [ids, ...]}, ks=[2, 4])  # doctest: +SKIP
    >>> print(format_table(report))                                                   # doctest: +SKIP
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from specpilot.analysis.mechanism.rounds import (
    expected_committed,
    leviathan_speedup,
    speedup_from_costs,
    window_metrics,
)
from specpilot.engine.generate import Engine
from specpilot.engine.model import Transformer
from specpilot.engine.sampling import SamplingParams
from specpilot.errors import ConfigError
from specpilot.records import RoundRecord


@dataclass
class KResult:
    """One candidate, one group, one k."""

    k: int
    rounds: int
    committed: int
    mean_acceptance_length: float
    acceptance_rate: float
    acceptance_per_position: list[float]
    cost_per_token_s: float
    speedup: float  # plain cost / this cost, same prompts
    alpha_pos1: float  # P(first draft accepted): the Leviathan alpha
    predicted_mean_acceptance_length: float  # Leviathan E[c] from alpha_pos1
    predicted_speedup: float  # from alpha and the measured step / verify times
    leviathan_bound: float  # E[c] / (k c + 1), verification assumed free


@dataclass
class CandidateResult:
    name: str
    draft_step_s: float
    draft_weight_bytes: int
    perplexity: dict[str, float]  # per group, on the target's greedy outputs
    groups: dict[str, dict[int, KResult]] = field(default_factory=dict)
    best_k: dict[str, int] = field(default_factory=dict)


@dataclass
class ScreenReport:
    target_step_s: float
    verify_s: dict[int, float]  # k -> target forward time for k + 1 tokens
    plain_cost_per_token_s: dict[str, float]
    candidates: list[CandidateResult]
    ranking: dict[str, list[str]]  # group -> candidate names, best first (by cost per token)
    settings: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up (allocations, kernel selection)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def step_time(model: Transformer, n_tokens: int, context: int = 128, repeats: int = 7) -> float:
    """Median time of one cached forward of ``n_tokens`` new tokens after ``context`` tokens."""
    seq = context + n_tokens + 1
    if model.max_seq_len < seq:
        model.setup_cache(seq, 1)
    slots = torch.tensor([0])
    model(torch.zeros(1, context, dtype=torch.long), torch.arange(context)[None], slots)
    toks = torch.ones(1, n_tokens, dtype=torch.long)
    pos = torch.arange(context, context + n_tokens)[None]
    return _median_time(lambda: model(toks, pos, slots), repeats)


def full_head_weight(draft: Transformer) -> torch.Tensor:
    """The draft's head over the whole vocabulary (a restricted head's rows come from the target's
    head, so that is its unrestricted version)."""
    from specpilot.engine.draft_format import RestrictedHead

    if isinstance(draft.lm_head, RestrictedHead):
        return draft.lm_head.full_weight
    if draft.cfg.tie_embeddings:  # also when the head is packed (engine.formats)
        return draft.embed.weight
    return draft.lm_head.weight


@torch.no_grad()
def perplexity(model: Transformer, sequences: Sequence[tuple[list[int], int]]) -> float:
    """exp(mean NLL) of ``tokens[start:]`` given the prefix, full vocabulary, no cache.

    NaN for a model in a quantised weight format (its cache-free training path is float only);
    perplexity is reported beside the ranking, never used for it.
    """
    if model.weight_format not in ("fp32", "bf16"):
        return float("nan")
    nll, n = 0.0, 0
    w = full_head_weight(model)
    for tokens, start in sequences:
        if len(tokens) - start < 1:
            continue
        t = torch.tensor([tokens])
        h = model.hidden_train(t)[0, start - 1 : len(tokens) - 1]  # predicts tokens[start:]
        lp = torch.log_softmax(F.linear(h, w).float(), dim=-1)
        tgt = t[0, start:]
        nll -= float(lp.gather(-1, tgt[:, None]).sum())
        n += int(tgt.numel())
    return math.exp(nll / n) if n else float("nan")


def _fit_k(rounds: Sequence[RoundRecord]) -> float:
    return sum(r.accepted >= 1 for r in rounds if r.proposed >= 1) / max(
        sum(r.proposed >= 1 for r in rounds), 1
    )


def screen(
    target: Transformer,
    candidates: Mapping[str, Transformer],
    prompts: Mapping[str, Sequence[Sequence[int]]],
    ks: Sequence[int] = (1, 2, 3, 4, 6),
    *,
    max_tokens: int = 96,
    tokenizer: Any = None,
    eos_ids: Sequence[int] | None = None,
    max_seq_len: int = 1024,
    repeats: int = 7,
    log: Callable[[str], None] | None = None,
) -> ScreenReport:
    """Measure every candidate on every group and k; rank by measured cost per committed token."""
    if not candidates:
        raise ConfigError("no candidate drafts to screen")
    if any(k < 1 for k in ks):
        raise ConfigError("k must be >= 1 (plain decoding is measured anyway)")
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    say = log or (lambda _m: None)

    def engine(draft: Transformer | None) -> Engine:
        return Engine(target, draft, tokenizer=tokenizer, max_seq_len=max_seq_len, eos_ids=eos_ids)

    # plain decoding: the baseline, and the target's outputs (for perplexity)
    plain_cost, outputs = _decode_plain(engine(None), prompts, params, say)
    bench = _Bench(
        prompts=prompts,
        ks=ks,
        params=params,
        repeats=repeats,
        say=say,
        plain_cost=plain_cost,
        outputs=outputs,
        t_step=step_time(target, 1, repeats=repeats),
        verify={k: step_time(target, k + 1, repeats=repeats) for k in sorted(set(ks))},
    )
    results = [_candidate(bench, engine(draft), name, draft) for name, draft in candidates.items()]
    ranking = {
        g: [
            c.name
            for c in sorted(results, key=lambda c, g=g: c.groups[g][c.best_k[g]].cost_per_token_s)  # type: ignore[misc]
        ]
        for g in prompts
    }
    return ScreenReport(
        target_step_s=bench.t_step,
        verify_s=bench.verify,
        plain_cost_per_token_s=plain_cost,
        candidates=results,
        ranking=ranking,
        settings={
            "ks": list(ks),
            "max_tokens": max_tokens,
            "greedy": True,
            "batch_size": 1,
            "prompts_per_group": {g: len(p) for g, p in prompts.items()},
            "threads": torch.get_num_threads(),
        },
    )


@dataclass(frozen=True)
class _Bench:
    """What every candidate is measured on and against: the prompts, ks and sampling; the
    target's plain cost per token and greedy outputs per group; its one-token step and its
    verify time per k (k + 1 tokens)."""

    prompts: Mapping[str, Sequence[Sequence[int]]]
    ks: Sequence[int]
    params: SamplingParams
    repeats: int
    say: Callable[[str], None]
    plain_cost: dict[str, float]
    outputs: dict[str, list[tuple[list[int], int]]]
    t_step: float
    verify: dict[int, float]


def _decode_plain(
    plain: Engine,
    prompts: Mapping[str, Sequence[Sequence[int]]],
    params: SamplingParams,
    say: Callable[[str], None],
) -> tuple[dict[str, float], dict[str, list[tuple[list[int], int]]]]:
    """Each group's cost per token without a draft, and the target's outputs as (prompt and
    output ids, where the output starts)."""
    plain_cost: dict[str, float] = {}
    outputs: dict[str, list[tuple[list[int], int]]] = {}
    for g, ps in prompts.items():
        rounds: list[RoundRecord] = []
        outputs[g] = []
        for p in ps:
            res = plain.generate(list(p), params, 0)
            rounds += res.rounds
            outputs[g].append(([*p, *res.output_ids], len(p)))
        plain_cost[g] = window_metrics(rounds).cost_per_token_s
        say(f"plain {g}: {plain_cost[g] * 1e3:.1f} ms/token")
    return plain_cost, outputs


def _candidate(b: _Bench, engine: Engine, name: str, draft: Transformer) -> CandidateResult:
    """One draft (``engine`` speculates with it) on every group and k; its best k per group."""
    d_step = step_time(draft, 1, repeats=b.repeats)
    engine.target.setup_cache(engine.max_seq_len, engine.max_slots)  # step_time may resize
    draft.setup_cache(engine.max_seq_len, engine.max_slots)
    cr = CandidateResult(
        name=name,
        draft_step_s=d_step,
        draft_weight_bytes=draft.weight_bytes(exclude=engine.target),
        perplexity={g: perplexity(draft, b.outputs[g]) for g in b.prompts},
    )
    for g, ps in b.prompts.items():
        cr.groups[g] = {}
        for k in b.ks:
            rounds = []
            for p in ps:
                rounds += engine.generate(list(p), b.params, k).rounds
            r = cr.groups[g][k] = _k_result(
                rounds, k, b.plain_cost[g], d_step, b.verify[k], b.t_step
            )
            b.say(
                f"{name} {g} k={k}: mean acceptance length {r.mean_acceptance_length:.2f}, "
                f"{r.cost_per_token_s * 1e3:.1f} ms/token, speed-up {r.speedup:.2f}x "
                f"(predicted {r.predicted_speedup:.2f}x)"
            )
        cr.best_k[g] = min(b.ks, key=lambda k, g=g: cr.groups[g][k].cost_per_token_s)  # type: ignore[misc]
    return cr


def _k_result(
    rounds: Sequence[RoundRecord],
    k: int,
    plain_cost: float,
    d_step: float,
    verify_s: float,
    t_step: float,
) -> KResult:
    """The measured figures of one group at ``k`` next to the Leviathan prediction from its
    first-position acceptance and the step times (draft step, verify, target step)."""
    m = window_metrics(rounds)
    alpha = _fit_k(rounds)
    return KResult(
        k=k,
        rounds=m.rounds,
        committed=m.committed,
        mean_acceptance_length=m.mean_acceptance_length,
        acceptance_rate=m.acceptance_rate or 0.0,
        acceptance_per_position=list(m.acceptance_per_position),
        cost_per_token_s=m.cost_per_token_s,
        speedup=plain_cost / m.cost_per_token_s,
        alpha_pos1=alpha,
        predicted_mean_acceptance_length=expected_committed(alpha, k),
        predicted_speedup=speedup_from_costs(alpha, k, d_step, verify_s, t_step),
        leviathan_bound=leviathan_speedup(alpha, k, d_step / t_step),
    )


def format_table(report: ScreenReport) -> str:
    """One line per group and candidate at its chosen k, best first; plain decoding on top."""
    lines = [
        f"target step {report.target_step_s * 1e3:.1f} ms; verify k+1: "
        + ", ".join(f"k={k} {v * 1e3:.1f} ms" for k, v in sorted(report.verify_s.items())),
        f"{'group':<12} {'rank':>4} {'draft':<16} {'k':>2} {'step ms':>7} {'MAL':>5} {'pred':>5} "
        f"{'acc/pos':<22} {'ms/tok':>7} {'speedup':>7} {'pred':>5} {'ppl':>7}",
    ]
    by_name = {c.name: c for c in report.candidates}
    for g, names in report.ranking.items():
        lines.append(
            f"{g:<12} {'-':>4} {'(plain)':<16} {0:>2} {'':>7} {1.0:>5.2f} {'':>5} {'':<22} "
            f"{report.plain_cost_per_token_s[g] * 1e3:>7.1f} {1.0:>7.2f}"
        )
        for rank, name in enumerate(names, 1):
            c = by_name[name]
            r = c.groups[g][c.best_k[g]]
            pos = ",".join(f"{a:.2f}" for a in r.acceptance_per_position[:5])
            lines.append(
                f"{g:<12} {rank:>4} {name[:16]:<16} {r.k:>2} {c.draft_step_s * 1e3:>7.2f} "
                f"{r.mean_acceptance_length:>5.2f} {r.predicted_mean_acceptance_length:>5.2f} "
                f"{pos:<22} {r.cost_per_token_s * 1e3:>7.1f} {r.speedup:>6.2f}x "
                f"{r.predicted_speedup:>5.2f} {c.perplexity.get(g, float('nan')):>7.1f}"
            )
    lines.append(
        "MAL = mean acceptance length (committed tokens per round, bonus included); pred = "
        "Leviathan from alpha = P(first draft accepted) and measured step/verify times; ranked by "
        "measured ms per committed token at each draft's best k; ppl (draft perplexity on the "
        "target's outputs) is shown, not ranked on."
    )
    return "\n".join(lines)


def group_prompts(
    split: str = "eval", per_group: int | None = None, tokenizer: Any = None
) -> dict[str, list[Any]]:
    """The task groups' prompts of ``split`` (token ids when a tokenizer is given, else texts)."""
    from specpilot.workload import builtin_group_names
    from specpilot.workload import group_prompts as wl_prompts

    out: dict[str, list[Any]] = {}
    for g in builtin_group_names():
        ps = wl_prompts(g, split)[:per_group]
        if tokenizer is None:
            out[g] = [p.text for p in ps]
            continue
        ids_list = []
        for p in ps:
            ids = tokenizer.apply_chat_template(
                [dict(m) for m in p.messages], add_generation_prompt=True
            )
            ids_list.append([int(t) for t in (ids if isinstance(ids, list) else ids["input_ids"])])
        out[g] = ids_list
    return out


@torch.no_grad()
def replay_greedy_rounds(
    draft: Transformer, tokens: Sequence[int], prompt_len: int, k: int
) -> list[tuple[int, int]]:
    """(accepted, committed) per round of greedy speculative decoding with ``k`` drafts,
    replayed along the target's own greedy output ``tokens[prompt_len:]``.

    With greedy decoding the accepted drafts *are* the target's tokens, so the draft's proposals
    in a round are its argmax along the target's path: one cache-free forward over the sequence
    gives every round. The first output token comes from the prefill, as in the engine; the last
    round is cut where the output ends. Equal to the engine's counts (tests/test_draft.py).
    """
    if k < 1:
        raise ConfigError("k must be >= 1")
    t = torch.tensor([list(tokens)])
    pred = draft.lm_head(draft.hidden_train(t))[0].argmax(-1)  # pred[i] proposes tokens[i + 1]
    out = list(tokens[prompt_len:])
    match = [bool(pred[prompt_len + j - 1] == out[j]) for j in range(len(out))]
    rounds, n = [], 1
    while n < len(out):
        a = 0
        while a < k and n + a < len(out) and match[n + a]:
            a += 1
        committed = min(a + 1, len(out) - n)
        rounds.append((min(a, committed), committed))
        n += a + 1
    return rounds


def replay_acceptance(
    draft: Transformer, outputs: Sequence[tuple[Sequence[int], int]], ks: Sequence[int]
) -> dict[int, dict[str, Any]]:
    """Mean acceptance length, acceptance rate and per-position acceptance for each k."""
    res: dict[int, dict[str, Any]] = {}
    for k in ks:
        rounds = [r for toks, plen in outputs for r in replay_greedy_rounds(draft, toks, plen, k)]
        if not rounds:
            continue
        per_pos = [sum(a >= i for a, _ in rounds) / len(rounds) for i in range(1, k + 1)]
        res[k] = {
            "rounds": len(rounds),
            "mean_acceptance_length": sum(c for _, c in rounds) / len(rounds),
            "acceptance_rate": sum(a for a, _ in rounds) / (k * len(rounds)),
            "acceptance_per_position": per_pos,
        }
    return res


def replay_report(
    target: Transformer,
    candidates: Mapping[str, Transformer],
    prompts: Mapping[str, Sequence[Sequence[int]]],
    ks: Sequence[int],
    *,
    max_tokens: int = 128,
    eos_ids: Sequence[int] = (),
    batch: int = 8,
) -> dict[str, Any]:
    """Acceptance of every candidate, group and k, replayed along the target's greedy outputs.

    The target decodes every prompt once (batched); no timing is involved, so this is the cheap
    way to measure acceptance on many prompts. Timings come from ``screen``.
    """
    from specpilot.draft.teacher import generate_teacher_data

    flat = [(g, list(p)) for g, ps in prompts.items() for p in ps]
    samples = generate_teacher_data(
        target, flat, batch=batch, max_new=max_tokens, topk=1, temperatures=(0.0,), eos_ids=eos_ids
    )
    outputs: dict[str, list[tuple[list[int], int]]] = {g: [] for g in prompts}
    for s in samples:
        outputs[s.group].append((s.tokens, s.prompt_len))
    report: dict[str, Any] = {"max_tokens": max_tokens, "ks": list(ks), "groups": {}}
    for g, outs in outputs.items():
        report["groups"][g] = {
            "prompts": len(outs),
            "output_tokens": sum(len(t) - p for t, p in outs),
            "candidates": {name: replay_acceptance(d, outs, ks) for name, d in candidates.items()},
        }
    return report


def format_replay(report: dict[str, Any]) -> str:
    ks = report["ks"]
    lines = [f"{'group':<12} {'draft':<16} " + " ".join(f"{'MAL k=' + str(k):>8}" for k in ks)]
    for g, gr in report["groups"].items():
        for name, res in gr["candidates"].items():
            vals = " ".join(
                f"{res[k]['mean_acceptance_length']:>8.2f}" if k in res else f"{'-':>8}" for k in ks
            )
            lines.append(f"{g:<12} {name[:16]:<16} {vals}")
    return "\n".join(lines)
