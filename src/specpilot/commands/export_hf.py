"""``specpilot export-hf --target GGUF --draft SPEC --out DIR``: models as Hugging Face
directories for engines that load no GGUF (vLLM).

The target (default: the default target) and the draft (``shipped:NAME`` or a draft directory)
are converted once into the cache (``~/.cache/specpilot/hf``, keyed by their hashes) and linked
as ``DIR/target`` and ``DIR/draft``; ``DIR/manifest.json`` names the sources and their hashes.
Pilots with vLLM arms do the same conversion by themselves.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-hf", help="convert target and draft to Hugging Face directories")
    p.add_argument("--target", default=None, help="target GGUF file (default: the default target)")
    p.add_argument("--draft", default=None, help="draft: shipped:NAME or a draft directory")
    p.add_argument("--out", type=Path, required=True, help="output directory (created)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specpilot.backends.facts import model_file
    from specpilot.pilot.plan.assets import hf_draft_dir, hf_target_dir

    args.out.mkdir(parents=True, exist_ok=True)
    made = {"target": hf_target_dir(args.target)}
    if args.draft:
        made["draft"] = hf_draft_dir(args.draft, args.target)
    manifest: dict[str, object] = {
        "target_source": args.target or "default",
        "draft_source": args.draft,
    }
    for role, path in made.items():
        link = args.out / role
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path, target_is_directory=True)
        mf = model_file(role, path)
        manifest[role] = {"dir": str(path), "sha256": mf.sha256 if mf else None}
        print(f"{role}: {link} -> {path}")
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0
