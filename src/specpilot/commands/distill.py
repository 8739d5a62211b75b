"""``specpilot distill``: make a draft for a target by distillation (see specpilot.draft.recipe).

specpilot distill --layers 4 --minutes 30 --out build/drafts/d4
specpilot distill --target my.gguf --layers 2 --minutes 120 --out d2 --device cuda
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specpilot.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "distill",
        help="distil a small draft model from the target on offline corpora",
        description=(
            "Generate target continuations for prompts of four task kinds (Chinese business "
            "text, code, structured JSON, English long-form) from offline corpora, then train a "
            "few-layer draft (initialised from target layers, sharing the target's embedding) on "
            "the target's top-k log-probs. Writes a draft directory usable as --draft DIR."
        ),
    )
    p.add_argument(
        "--target", default=None, help="GGUF file or HF dir (default: SmolLM2-135M-Instruct)"
    )
    p.add_argument("--layers", type=int, default=4, help="draft depth (its latency)")
    p.add_argument("--init-layers", default=None, help="target layers to copy, e.g. 0,1,28,29")
    p.add_argument(
        "--init-draft",
        default=None,
        help="continue training this draft (dir or shipped:NAME) instead of copying layers",
    )
    p.add_argument("--minutes", type=float, default=30.0, help="total wall-time budget")
    p.add_argument("--out", required=True, type=Path, help="output draft directory")
    p.add_argument(
        "--head-vocab", type=int, default=8192, help="ids the draft head scores (0 = all)"
    )
    p.add_argument("--gen-fraction", type=float, default=0.45, help="share of time generating data")
    p.add_argument("--batch", type=int, default=16, help="rows decoded together by the target")
    p.add_argument("--max-new", type=int, default=160, help="tokens generated per prompt")
    p.add_argument("--per-group", type=int, default=400, help="prompts built per task kind")
    p.add_argument(
        "--weights",
        default=None,
        help="prompts per group relative to --per-group, e.g. code=2,longform=0.5",
    )
    p.add_argument(
        "--code-write-share",
        type=float,
        default=0.6,
        help="share of code prompts that are write-this-function tasks (rest: review tasks)",
    )
    p.add_argument(
        "--prompts", type=Path, default=None, help="JSON [{group, ids}] instead of corpora"
    )
    p.add_argument("--cache", type=Path, default=Path("build/distill"), help="teacher data cache")
    p.add_argument("--corpora", type=Path, default=Path("build/corpora"), help="corpus directory")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per training step")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from specpilot.draft.recipe import RecipeConfig, run_recipe
    from specpilot.engine.loader import default_target_path

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.head_vocab < 0 or args.minutes <= 0 or not 0 < args.gen_fraction < 1:
        raise ConfigError("--head-vocab >= 0, --minutes > 0 and 0 < --gen-fraction < 1")
    cfg = RecipeConfig(
        target=Path(args.target) if args.target else default_target_path(),
        layers=args.layers,
        minutes=args.minutes,
        out=args.out,
        cache=args.cache,
        corpora=args.corpora,
        prompts_file=args.prompts,
        init_layers=[int(x) for x in args.init_layers.split(",")] if args.init_layers else None,
        init_draft=args.init_draft,
        weights=_weights(args.weights),
        code_write_share=args.code_write_share,
        head_vocab=args.head_vocab or 10**9,
        gen_fraction=args.gen_fraction,
        batch=args.batch,
        max_new=args.max_new,
        per_group=args.per_group,
        lr=args.lr,
        max_tokens=args.batch_tokens,
        device=args.device,
        amp=args.device != "cpu",
        seed=args.seed,
    )
    run_recipe(cfg, log=lambda m: print(m, flush=True))
    return 0


def _weights(text: str | None) -> dict[str, float] | None:
    """``code=2,longform=0.5`` -> {"code": 2.0, "longform": 0.5}."""
    if not text:
        return None
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise ConfigError(
                f"--weights: {part!r} is not GROUP=NUMBER; write e.g. --weights code=2,longform=0.5"
            )
    return out
