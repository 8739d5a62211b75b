"""``specpilot screen-drafts``: rank draft candidates by measured speed x acceptance (R3).

    specpilot screen-drafts                                   # shipped draft vs truncated copy
    specpilot screen-drafts --draft d4=shipped:smollm2-135m-instruct-d4 --draft d2=build/drafts/d2 \\
        --ks 2,3,4 --per-group 4 --json build/screen.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specpilot.errors import ConfigError

DEFAULT_CANDIDATES = [
    "distilled-d4=shipped:smollm2-135m-instruct-d4",
    "truncated-4=truncate:0,1,28,29",
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "screen-drafts",
        help="rank draft models by measured cost per committed token per task group",
        description=(
            "Decode each task group's prompts greedily at batch 1 with every candidate draft and "
            "k; measure draft step, verify and plain decoding times, acceptance per position, "
            "cost per committed token and speed-up; print the Leviathan prediction next to the "
            "measurement and the draft's perplexity (not used for ranking); choose k per group."
        ),
    )
    p.add_argument("--target", default=None, help="GGUF file or HF dir (default: SmolLM2-135M)")
    p.add_argument(
        "--draft",
        action="append",
        default=None,
        metavar="NAME=SPEC",
        help="candidate (repeatable): SPEC is a draft dir, shipped:NAME, truncate:I,J,.. or a model path",
    )
    p.add_argument("--ks", default="1,2,3,4,6", help="comma-separated k values")
    p.add_argument("--groups", default=None, help="comma-separated task groups (default: all)")
    p.add_argument("--split", default="eval", help="workload split to measure on")
    p.add_argument("--per-group", type=int, default=4, help="prompts per group")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument(
        "--dtype",
        default="bf16",
        help="weight format of target and drafts: fp32 | bf16 | int8-bf16 | int8-fp32 | q4-bf16 "
        "(use the format the service runs: `specpilot serve` prints the one it chose)",
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", type=Path, default=None, help="write the full report here")
    p.add_argument(
        "--replay",
        action="store_true",
        help="acceptance only: replay greedy rounds along the target's outputs (no timing; cheap)",
    )
    p.set_defaults(func=run)


def _prompts(args: argparse.Namespace, prompts: dict[str, Any]) -> dict[str, Any]:
    """The groups ``--groups`` asks for (all without it)."""
    if not args.groups:
        return prompts
    wanted = args.groups.split(",")
    unknown = set(wanted) - set(prompts)
    if unknown:
        raise ConfigError(f"unknown groups {sorted(unknown)}; have {sorted(prompts)}")
    return {g: prompts[g] for g in wanted}


def run(args: argparse.Namespace) -> int:
    import torch

    from specpilot.draft.screening import format_table, group_prompts, screen
    from specpilot.engine.formats import apply_format, parse_format
    from specpilot.engine.loader import default_target_path, load_model
    from specpilot.engine.runtime import load_draft

    if args.threads:
        torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",") if k]
    fmt = parse_format(args.dtype)
    tpath = Path(args.target) if args.target else default_target_path()
    target = load_model(tpath, dtype=torch.float32)  # converted below, drafts too
    candidates = {}
    for item in args.draft or DEFAULT_CANDIDATES:
        name, sep, spec = item.partition("=")
        if not sep:
            name, spec = Path(item).name or item, item
        draft = load_draft(spec, target, torch.float32)
        if draft is None:
            raise ConfigError(f"--draft {item}: 'none' is measured anyway as the plain baseline")
        candidates[name] = draft
    memo: dict = {}
    apply_format(target.model, fmt, memo)
    for draft in candidates.values():
        apply_format(draft, fmt, memo)
    prompts = _prompts(args, group_prompts(args.split, args.per_group, target.tokenizer))
    if args.replay:
        from specpilot.draft.screening import format_replay, replay_report

        rep = replay_report(
            target.model,
            candidates,
            prompts,
            ks,
            max_tokens=args.max_tokens,
            eos_ids=[target.tokenizer.eos_token_id],
        )
        print(format_replay(rep))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(rep, indent=2, ensure_ascii=False) + "\n")
        return 0
    report = screen(
        target.model,
        candidates,
        prompts,
        ks,
        max_tokens=args.max_tokens,
        tokenizer=target.tokenizer,
        log=lambda m: print(m, flush=True),
    )
    print(format_table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {args.json}")
    return 0
