"""specpilot command line: one console script, one module per subcommand.

Each module in ``specpilot.commands`` defines ``register(subparsers)`` that adds its
subcommand(s) with ``set_defaults(func=...)``; ``func(args) -> int`` runs it. Heavy imports
(torch, fastapi) happen inside ``func`` so ``specpilot --help`` stays fast.

Errors: a :class:`specpilot.errors.SpecpilotError` (bad config, bad input file, engine that
would not start) is printed as ``specpilot CMD: error: MESSAGE`` (and ``fix: ...``) with exit
code 2; anything else is a bug and shows its traceback (exit 1). ``SPECPILOT_TRACEBACK=1``
shows the traceback of user errors too.

    >>> from specpilot.cli import main
    >>> main(["schedule", "/nonexistent/workload.yaml"])        # doctest: +SKIP
    specpilot schedule: error: ...
    2
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

import specpilot.commands as commands_pkg
from specpilot import __version__
from specpilot.errors import SpecpilotError

# A path the user named that is not there (or not a file): no traceback helps.
_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


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


def user_error_text(exc: BaseException) -> str | None:
    """What to print for a user error (message, and fix when known); None for a bug."""
    if isinstance(exc, SpecpilotError):
        return exc.describe()
    if isinstance(exc, _PATH_ERRORS):
        return str(exc)
    return None


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real file descriptor: cannot tell
        return True


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
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # a pipe of our own broke (a subprocess, a socket): a bug, with its traceback
        # the reader left (`| head`): stop quietly, as a shell tool does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout
        return 141
    except Exception as exc:
        text = user_error_text(exc)
        if text is None or os.environ.get("SPECPILOT_TRACEBACK"):
            raise  # a bug (or asked for): the traceback is the useful output
        print(f"specpilot {args.command}: error: {text}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
