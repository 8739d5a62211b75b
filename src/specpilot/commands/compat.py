"""``specpilot compat URL [URL ...] [--arm NAME ...]``: the functional-compatibility suite
(feature x arm: pass / fail / unsupported, with evidence) against OpenAI-compatible endpoints.

    specpilot compat http://127.0.0.1:8000 --arm speculative
    specpilot compat http://127.0.0.1:8000 http://127.0.0.1:8001 --arm baseline --arm speculative --json
    specpilot compat https://api.example.com --api-key-env OPENAI_API_KEY --model gpt-4o-mini
"""

from __future__ import annotations

import argparse
import json
import sys

from specpilot.commands._header_args import add_header_args, header_options
from specpilot.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compat", help="run the functional-compatibility suite against endpoints")
    p.add_argument("urls", nargs="+", metavar="URL", help="endpoint base URL(s), one per arm")
    p.add_argument(
        "--arm",
        action="append",
        default=None,
        help="arm name per URL (repeat; default arm1, arm2, ...)",
    )
    p.add_argument(
        "--model", default=None, help="model name to send (default: the first of /v1/models)"
    )
    p.add_argument("--features", default=None, help="comma-separated subset of the features")
    p.add_argument(
        "--max-tokens", type=int, default=8, help="tokens per short generation (default 8)"
    )
    p.add_argument(
        "--no-seed-claim",
        action="store_true",
        help="the engine does not promise seed reproducibility",
    )
    add_header_args(p)
    p.add_argument("--json", action="store_true", help="print the CompatRecords as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specpilot.pilot.config.credentials import resolve
    from specpilot.quality.compat import FEATURES, CompatOptions, run_compat

    arms = args.arm or [f"arm{i + 1}" for i in range(len(args.urls))]
    if len(arms) != len(args.urls):
        raise ConfigError(
            f"{len(args.urls)} URL(s) but {len(arms)} --arm name(s): give one --arm per URL"
        )
    features = (
        tuple(f.strip() for f in args.features.split(",") if f.strip())
        if args.features
        else FEATURES
    )
    opts = CompatOptions(max_tokens=args.max_tokens, claims_seed=not args.no_seed_claim)
    written = header_options(args.header, args.api_key_env)
    records = []
    for url, arm in zip(args.urls, arms, strict=True):
        headers = resolve(arm, written, args.api_key_env)
        records += run_compat(
            url, arm=arm, model=args.model, features=features, options=opts, headers=headers
        )
    if args.json:
        json.dump([r.to_dict() for r in records], sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        print(matrix(records, arms, features))
    return 1 if any(r.status == "fail" for r in records) else 0


def matrix(records: list, arms: list[str], features: tuple[str, ...]) -> str:
    """A text table feature x arm, then the evidence of everything that did not pass."""
    by = {(r.arm, r.feature): r for r in records}
    w = max(len(f) for f in features) + 2
    lines = ["feature".ljust(w) + "".join(a.ljust(14) for a in arms)]
    for f in features:
        lines.append(
            f.ljust(w)
            + "".join((by[(a, f)].status if (a, f) in by else "-").ljust(14) for a in arms)
        )
    notes = [r for r in records if r.status != "pass"]
    if notes:
        lines.append("")
        lines += [f"{r.arm} {r.feature} [{r.status}]: {r.evidence}" for r in notes]
    return "\n".join(lines)
