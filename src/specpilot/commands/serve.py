"""``specpilot serve``: the OpenAI-compatible server over the reference engine.

    specpilot serve --target model.gguf --draft shipped:smollm2-135m-instruct-d4 -k 3 --port 8000
    specpilot serve --no-draft            # plain decoding only; the draft is never loaded

The port opens at once; ``/health`` answers 503 until the model is loaded.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specpilot.commands._engine_args import add_engine_format_args
from specpilot.errors import ConfigError

if TYPE_CHECKING:
    from specpilot.engine.generate import Engine
    from specpilot.serve.app import ServerConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the engine over an OpenAI-compatible HTTP API with vLLM-style metrics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_model_args(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    _add_engine_args(p)
    _add_scheduler_args(p)
    _add_api_args(p)
    p.add_argument("--log-level", default="warning")
    p.set_defaults(func=run)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """What is served: the target, the draft (or none) and the draft tokens per round."""
    p.add_argument(
        "--target",
        help="target model (GGUF file or checkpoint dir); default: SmolLM2-135M-Instruct",
    )
    d = p.add_mutually_exclusive_group()
    d.add_argument(
        "--draft",
        help="draft: 'shipped:NAME', 'truncate:I,J,...' or a path (default: the shipped distilled draft)",
    )
    d.add_argument(
        "--no-draft", action="store_true", help="load no draft at all (plain decoding only)"
    )
    p.add_argument(
        "-k",
        "--num-speculative-tokens",
        dest="k",
        type=int,
        default=None,
        help="default draft tokens per round (default 3 with a draft, 0 without)",
    )


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    """How the engine runs: formats and device, threads, KV cache size."""
    add_engine_format_args(p)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--max-slots", type=int, default=4, help="KV cache slots = max running requests")
    p.add_argument("--max-seq-len", type=int, default=2048, help="context length per slot")


def _add_scheduler_args(p: argparse.ArgumentParser) -> None:
    """How requests are batched, queued and timed out."""
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help="rows per decode round (default: all running)",
    )
    p.add_argument(
        "--max-queued", type=int, default=64, help="requests waiting for a slot before 429"
    )
    p.add_argument(
        "--queue-timeout", type=float, default=60.0, help="seconds a request may wait for a slot"
    )
    p.add_argument(
        "--request-timeout", type=float, default=None, help="server-side limit per request (s)"
    )


def _add_api_args(p: argparse.ArgumentParser) -> None:
    """What the HTTP API shows and who may use it: model ids, strategies, keys, limits."""
    p.add_argument(
        "--served-model-name", default=None, help="model id in the API (default: target file stem)"
    )
    p.add_argument(
        "--model-alias", action="append", default=[], help="extra model id (a strategy scope)"
    )
    p.add_argument(
        "--strategy-file", type=Path, default=None, help="YAML/JSON strategy per scope (reloadable)"
    )
    p.add_argument(
        "--admin-token",
        default=None,
        help="bearer token for /admin (default: $SPECPILOT_ADMIN_TOKEN, else generated and printed)",
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="require Authorization: Bearer KEY on /v1 (as vLLM's --api-key; /health and "
        "/metrics stay open); default: $SPECPILOT_API_KEY, else no key",
    )
    p.add_argument(
        "--per-request-spec-decode-metrics",
        choices=["off", "summary", "detailed"],
        default="off",
        help="include per-request speculative stats in every response (requests may opt in anyway)",
    )
    p.add_argument(
        "--admin-trust-proxy",
        action="store_true",
        help="accept /admin requests that carry proxy headers (X-Forwarded-For, Via, ...); "
        "by default they are refused, since behind a proxy every client looks like loopback",
    )
    p.add_argument(
        "--request-read-timeout",
        type=float,
        default=10.0,
        help="seconds a client has to send a whole request (headers and body) before its "
        "connection is closed (slow clients)",
    )


def api_key(args: argparse.Namespace) -> str | None:
    """The key ``/v1`` requires: ``--api-key``, else ``$SPECPILOT_API_KEY``, else none."""
    return args.api_key or os.environ.get("SPECPILOT_API_KEY") or None


def run(args: argparse.Namespace) -> int:
    from specpilot.backends.process import die_with_parent

    die_with_parent()  # started by a pilot or a test: stop when it is gone
    try:
        import uvicorn

        from specpilot.engine.runtime import DEFAULT_DRAFT
        from specpilot.serve.app import create_app
    except ImportError as exc:  # pragma: no cover - depends on the install
        print(
            f"specpilot serve needs the server extra: pip install 'specpilot[server]' ({exc})",
            file=sys.stderr,
        )
        return 2
    from specpilot.engine.loader import default_target_path

    target = Path(args.target) if args.target else default_target_path()
    if not target.exists():
        raise FileNotFoundError(f"--target {target} does not exist")
    draft = None if args.no_draft else (args.draft or DEFAULT_DRAFT)
    k = _draft_tokens(args, draft)
    token = args.admin_token or os.environ.get("SPECPILOT_ADMIN_TOKEN") or secrets.token_urlsafe(16)
    cfg = _server_config(args, target, draft, k, token)
    app = create_app(cfg, loader=lambda: _load_engine(args, target, draft, k, cfg.model_name))
    print(
        f"specpilot serve: http://{args.host}:{args.port} (model {cfg.model_name!r}; "
        f"admin token {'from option/env' if args.admin_token or os.environ.get('SPECPILOT_ADMIN_TOKEN') else token}; "
        f"{'/v1 needs the API key' if cfg.api_key else 'no API key'})",
        file=sys.stderr,
        flush=True,
    )
    from specpilot.serve.transport import timed_protocol

    if args.request_read_timeout <= 0:
        raise ConfigError(f"--request-read-timeout must be > 0, got {args.request_read_timeout}")
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=30,
        http=timed_protocol(args.request_read_timeout),
    )
    return 0


def _draft_tokens(args: argparse.Namespace, draft: str | None) -> int:
    """The default k: ``-k``, else 3 with a draft and 0 without; refused below 0, or above 0
    with no draft."""
    # k=3 by default: with the shipped draft, k=1..3 gave the best decode speed-ups (1.14-1.19x,
    # benchmarks/engine_speed.py) and k>=4 was slower than plain decoding on this CPU.
    k: int = args.k if args.k is not None else (3 if draft else 0)
    if k < 0:
        raise ConfigError(f"-k must be >= 0, got {k}")
    if k > 0 and draft is None:
        raise ConfigError("-k > 0 needs a draft; drop --no-draft or set -k 0")
    return k


def _server_config(
    args: argparse.Namespace, target: Path, draft: str | None, k: int, token: str
) -> ServerConfig:
    """The app's configuration: model ids, scheduler limits (checked), tokens and keys."""
    from specpilot.engine.scheduler import SchedulerConfig
    from specpilot.serve.app import ServerConfig

    sched = SchedulerConfig(
        max_running=args.max_slots,
        max_queued=args.max_queued,
        queue_timeout_s=args.queue_timeout,
        request_timeout_s=args.request_timeout,
        max_batch_size=args.max_batch_size,
    )
    sched.validate(args.max_slots)
    return ServerConfig(
        model_name=args.served_model_name or target.stem,
        aliases=tuple(args.model_alias),
        draft_name=draft,
        default_k=k,
        scheduler=sched,
        admin_token=token,
        api_key=api_key(args),
        admin_trust_proxy=args.admin_trust_proxy,
        strategy_file=args.strategy_file,
        spec_metrics=args.per_request_spec_decode_metrics,
    )


def _load_engine(
    args: argparse.Namespace, target: Path, draft: str | None, k: int, model_name: str
) -> Engine:
    """Build the engine (the app calls this once, on its loader thread) and say what loaded."""
    from specpilot.engine.runtime import build_engine

    engine, spec = build_engine(
        target,
        draft,
        dtype=args.dtype,
        max_slots=args.max_slots,
        max_seq_len=args.max_seq_len,
        threads=args.threads,
        device=args.device,
        k=k,
        calibration=args.calibration,
    )
    print(
        f"specpilot serve: model loaded ({model_name}, draft={draft}, k={k}, "
        f"target {spec.dtype}, draft {spec.draft_dtype}, {spec.device})",
        file=sys.stderr,
        flush=True,
    )
    return engine
