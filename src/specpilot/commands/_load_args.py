"""``specpilot load``'s options by group: what is replayed and where it is recorded, what
serves the requests, and how the load generator sends them (``commands.load`` registers
them in this order, so ``--help`` lists them so)."""

from __future__ import annotations

import argparse

from specpilot.commands._header_args import add_header_args
from specpilot.records import ARM_ROLES, ENGINES

START_TIMEOUT_S = 600.0  # specpilot.backends.START_TIMEOUT_S (not imported: keeps --help fast)
URL_WAIT_S = 30.0  # an endpoint someone else runs: how long to wait for it to answer


def add_run_args(p: argparse.ArgumentParser) -> None:
    """What is replayed, against which URL, into which file and arm."""
    p.add_argument(
        "url",
        nargs="?",
        default=None,
        help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000 (not with --start)",
    )
    p.add_argument("--workload", required=True, help="workload YAML, or a schedule JSON")
    p.add_argument(
        "--out", required=True, help="pilot file (DuckDB; created, or a new arm appended)"
    )
    p.add_argument(
        "--phase", action="append", default=None, help="only this phase (repeatable; warm-up kept)"
    )
    p.add_argument("--seed", type=int, default=None, help="override the workload's seed")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up requests")
    p.add_argument(
        "--arm",
        default=None,
        help="arm label stored with every record (default: baseline; with --start and a "
        "speculative option: speculative)",
    )
    p.add_argument(
        "--role",
        default=None,
        choices=list(ARM_ROLES),
        help="the arm's role in the pilot (default: the arm's name if it is a role, else extra)",
    )
    p.add_argument(
        "--run-id",
        default=None,
        help="run id (default: a new one); a run of this file left incomplete is resumed",
    )


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """What serves the requests: the engine (started by specpilot or not), the model name sent
    and the headers a URL needs."""
    p.add_argument(
        "--engine",
        default="openai",
        choices=ENGINES,
        help="what serves the endpoint: picks the /metrics and per-response parsers (openai: none)",
    )
    p.add_argument(
        "--start",
        action="store_true",
        help="start the engine through its backend (full manifest), stop it at the end",
    )
    p.add_argument(
        "--engine-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an engine option for --start, as in a pilot file's arms[].options (repeatable; YAML values)",
    )
    p.add_argument(
        "--start-timeout",
        type=float,
        default=None,
        help=f"seconds to wait for --start's engine (default {START_TIMEOUT_S:g}) or for the "
        f"endpoint to answer (default {URL_WAIT_S:g})",
    )
    p.add_argument(
        "--model",
        default=None,
        help="model name sent in each request (default: the first of /v1/models, else 'default')",
    )
    add_header_args(p)


def add_client_args(p: argparse.ArgumentParser) -> None:
    """How the load generator sends: the API, timeouts, caps and phase timing."""
    p.add_argument("--api", default="chat", choices=["chat", "completions"])
    p.add_argument("--timeout", type=float, default=120.0, help="client timeout per request (s)")
    p.add_argument(
        "--enforce-deadlines", action="store_true", help="end a request at its group's deadline"
    )
    p.add_argument(
        "--cancel-fraction", type=float, default=0.0, help="cancel this fraction mid-stream"
    )
    p.add_argument(
        "--max-concurrency", type=int, default=None, help="cap in-flight requests (reported)"
    )
    p.add_argument(
        "--lag-threshold-ms", type=float, default=10.0, help="p99 dispatch lag that flags the run"
    )
    p.add_argument(
        "--cold-start", type=int, default=0, help="mark the first N requests as cold start"
    )
    p.add_argument(
        "--scrape-interval",
        type=float,
        default=1.0,
        help="seconds between scrapes of the engine's own figures inside each phase (0: only "
        "at the phase edges)",
    )
    p.add_argument(
        "--back-to-back",
        action="store_true",
        help="start each phase when the previous one has drained (default: the schedule's times)",
    )
    p.add_argument(
        "--no-stages",
        action="store_true",
        help="do not run client-side stages (records keep their planned seconds)",
    )
    p.add_argument(
        "--no-usage", action="store_true", help="do not ask for stream_options.include_usage"
    )
