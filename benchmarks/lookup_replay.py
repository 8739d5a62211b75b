"""Acceptance of a draft, of prompt lookup, and of both combined, replayed along the target's
greedy outputs (run by hand; no timing).

Prompt lookup proposes the k tokens that followed the most recent earlier occurrence of the last
n context tokens (n = 3, then 2, then 1: vLLM's n-gram proposer with prompt_lookup_max=3,
prompt_lookup_min=1). The hybrid uses lookup when the context has a match and the draft
otherwise. With greedy decoding the accepted tokens are the target's own, so every round can be
replayed from the target's output without running the engine (as ``screen-drafts --replay``).

    .venv/bin/python benchmarks/lookup_replay.py --draft shipped:smollm2-135m-instruct-d4
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import torch

from specpilot.draft.screening import group_prompts
from specpilot.draft.teacher import generate_teacher_data
from specpilot.engine.loader import default_target_path, load_model
from specpilot.engine.runtime import load_draft


def lookup(ctx: Sequence[int], k: int, n_max: int = 3, n_min: int = 1) -> list[int] | None:
    """Up to k tokens that followed the latest earlier match of the context's last n tokens."""
    for n in range(n_max, n_min - 1, -1):
        if len(ctx) <= n:
            continue
        pattern = list(ctx[-n:])
        for s in range(len(ctx) - n - 1, -1, -1):
            if list(ctx[s : s + n]) == pattern:
                return list(ctx[s + n : s + n + k])
    return None


def replay(tokens: list[int], prompt_len: int, pred: list[int], k: int, mode: str) -> list[int]:
    """Committed tokens per round; ``pred[i]`` is the draft's argmax for ``tokens[i + 1]``."""
    out, n, rounds = tokens[prompt_len:], 1, []  # the first token comes from the prefill
    while n < len(out):
        prop = lookup(tokens[: prompt_len + n], k) if mode in ("lookup", "hybrid") else None
        a = 0
        if prop is not None:
            while a < len(prop) and n + a < len(out) and prop[a] == out[n + a]:
                a += 1
        elif mode in ("draft", "hybrid"):
            while a < k and n + a < len(out) and pred[prompt_len + n + a - 1] == out[n + a]:
                a += 1
        rounds.append(min(a + 1, len(out) - n))
        n += a + 1
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", default="shipped:smollm2-135m-instruct-d4")
    ap.add_argument("--ks", default="2,3,4,6,8")
    ap.add_argument("--per-group", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",")]
    target = load_model(default_target_path(), dtype=torch.bfloat16)
    draft = load_draft(args.draft, target, torch.bfloat16)
    assert draft is not None
    prompts = group_prompts("eval", args.per_group, target.tokenizer)
    flat = [(g, p) for g, ps in prompts.items() for p in ps]
    eos = [int(target.tokenizer.eos_token_id)]
    samples = list(
        generate_teacher_data(
            target.model, flat, batch=8, max_new=args.max_tokens, topk=1,
            temperatures=(0.0,), eos_ids=eos,
        )
    )  # fmt: skip
    report: dict[str, dict[str, dict[int, float]]] = {}
    for g in prompts:
        rows = []
        for s in (s for s in samples if s.group == g):
            with torch.no_grad():
                pred = draft.lm_head(draft.hidden_train(torch.tensor([s.tokens])))[0].argmax(-1)
            rows.append((s.tokens, s.prompt_len, pred.tolist()))
        report[g] = {}
        for mode in ("draft", "lookup", "hybrid"):
            report[g][mode] = {}
            for k in ks:
                r = [c for t, p, pred in rows for c in replay(t, p, pred, k, mode)]
                report[g][mode][k] = sum(r) / len(r)
            vals = " ".join(f"{report[g][mode][k]:5.2f}" for k in ks)
            print(f"{g:12} {mode:7} mean acceptance length k={args.ks}: {vals}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"draft": args.draft, "ks": ks, "groups": report}, f, indent=2)


if __name__ == "__main__":
    main()
