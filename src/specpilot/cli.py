"""specpilot command line: one console script, one module per subcommand.

Each module in ``specpilot.commands`` defines ``register(subparsers)`` that adds its
subcommand(s) with ``set_defaults(func=...)``; ``func(args) -> int`` runs it. Heavy imports
(torch, fastapi) happen inside ``func`` so ``specpilot --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import specpilot.commands as commands_pkg
from specpilot import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specpilot",
        description="Decide, with measurements, whether speculative decoding is worth switching on.",
    )
    parser.add_argument("--version", action="version", version=f"specpilot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in sorted(pkgutil.iter_modules(commands_pkg.__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            importlib.import_module(f"specpilot.commands.{mod.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as exc:  # bad input: a clear message, no traceback
        print(f"specpilot {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
