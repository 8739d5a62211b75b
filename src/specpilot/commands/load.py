"""``specpilot load URL --workload FILE.yaml --out RUN.duckdb [--phase NAME] [--seed S]``.

Replays a workload's deterministic schedule open-loop against an OpenAI-compatible endpoint
and writes every request (one record each, whatever happened) and its chunk timings to the
run's DuckDB file as they finish. ``--engine`` names what is behind the URL so its counters are
scraped before/after and its per-response speculative stats parsed; the default ``openai``
records delivery metrics only. The workload may also be a schedule JSON
(``specpilot schedule FILE.yaml --json``).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "load", help="replay a workload open-loop against an endpoint, record every request"
    )
    p.add_argument(
        "url", help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000"
    )
    p.add_argument("--workload", required=True, help="workload YAML, or a schedule JSON")
    p.add_argument("--out", required=True, help="DuckDB file of the run (created or appended to)")
    p.add_argument(
        "--phase", action="append", default=None, help="only this phase (repeatable; warm-up kept)"
    )
    p.add_argument("--seed", type=int, default=None, help="override the workload's seed")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up requests")
    p.add_argument("--arm", default="baseline", help="arm label stored with every record")
    p.add_argument("--run-id", default=None, help="run id (default: a new one)")
    p.add_argument(
        "--engine",
        default="openai",
        choices=["openai", "builtin", "llamacpp", "vllm", "sglang"],
        help="what serves URL: picks the /metrics and per-response parsers (openai: none)",
    )
    p.add_argument("--model", default="default", help="model name sent in each request")
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
        "--no-usage", action="store_true", help="do not ask for stream_options.include_usage"
    )
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.set_defaults(func=run)


def _schedule(args: argparse.Namespace) -> Any:
    from specpilot.workload import Schedule, build_schedule

    if args.workload.endswith(".json"):
        sched = Schedule.load(args.workload)
    else:
        sched = build_schedule(args.workload, seed=args.seed)
    return sched


def run(args: argparse.Namespace) -> int:
    from specpilot.backends import response_extras_for, scrape_endpoint
    from specpilot.backends.base import hardware_info
    from specpilot.loadgen import LoadConfig, LoadRunner
    from specpilot.store import Store

    sched = _schedule(args)
    requests = sched.select(args.phase, warmup=not args.no_warmup)
    if not requests:
        raise ValueError("the selection has no requests")
    url = args.url.rstrip("/").removesuffix("/v1")
    run_id = args.run_id or f"load-{uuid.uuid4().hex[:12]}"
    cfg = LoadConfig(
        url=url,
        api=args.api,
        model=args.model,
        run_id=run_id,
        arm=args.arm,
        timeout_s=args.timeout,
        enforce_deadlines=args.enforce_deadlines,
        cancel_fraction=args.cancel_fraction,
        max_concurrency=args.max_concurrency,
        lag_threshold_s=args.lag_threshold_ms / 1e3,
        include_usage=not args.no_usage,
        response_extras=response_extras_for(args.engine),
        seed=sched.seed,
        cold_start_requests=args.cold_start,
        progress=False if args.quiet else None,
    )
    manifest = {
        "engine": args.engine,
        "endpoint": url,
        "started_by_specpilot": False,
        "note": "endpoint given by URL: model files and flags are not known to the load command",
        "client_hardware": hardware_info(),
    }
    loadgen_cfg = {
        k: v
        for k, v in vars(args).items()
        if k not in ("func",) and isinstance(v, (str, int, float, bool, list, type(None)))
    }
    with Store(args.out) as store:
        store.start_run(
            run_id,
            name=sched.name,
            config={"load": loadgen_cfg, "workload_config_sha256": sched.config_sha256},
            schedule=sched.to_dict(),
            manifests={args.arm: manifest},
        )
        phases = sorted({r.phase for r in requests})
        label_phase = ",".join(phases)
        try:
            store.add_snapshot(
                scrape_endpoint(args.engine, url, run_id, args.arm, label_phase, "before")
            )
        except Exception as exc:  # a missing /metrics is recorded, not fatal
            print(f"warning: could not scrape {url}/metrics before the run: {exc}", file=sys.stderr)
        runner = LoadRunner(requests, cfg, store.sink)
        result = runner.run()
        try:
            store.add_snapshot(
                scrape_endpoint(args.engine, url, run_id, args.arm, label_phase, "after")
            )
        except Exception as exc:
            print(f"warning: could not scrape {url}/metrics after the run: {exc}", file=sys.stderr)
        s = result.summary
        status = (
            "interrupted" if s.interrupted else ("complete" if s.stop_reason is None else "stopped")
        )
        store.finish_run(run_id, status=status, meta={"load_summary": s.to_dict()})
    counts = "  ".join(f"{k} {v}" for k, v in s.status_counts.items() if v)
    lag = s.dispatch_lag_p99_s
    print(f"run {run_id} -> {args.out}: {s.scheduled} requests  {counts}")
    print(
        f"dispatch lag p50 {1e3 * (s.dispatch_lag_p50_s or 0):.2f} ms  p99 {1e3 * (lag or 0):.2f} ms  "
        f"max {1e3 * (s.dispatch_lag_max_s or 0):.2f} ms  max in flight {s.max_in_flight}"
    )
    if not s.trustworthy:
        for reason in s.reasons:
            print(f"NOT TRUSTWORTHY: {reason}", file=sys.stderr)
    return 130 if s.interrupted else 0
