"""``specpilot load [URL] --workload FILE.yaml --out RUN.duckdb [--phase NAME] [--seed S]``.

Replays a workload's deterministic schedule open-loop against an OpenAI-compatible endpoint
and writes a pilot file (``specpilot.store``) of one arm: the pilot (config, schedule, this
machine's hardware with its CPU flags), the arm (role, engine, frozen manifest, strategy), each
phase (planned and actual edges, clock anchor), every request as it finishes (one record each,
whatever happened) with its chunk timings and, for engines that report them (the builtin
server), every decode round and prefill; counters and memory are scraped at every phase edge.
Loading into a file that already holds a pilot of the same workload adds another arm to it
(``--arm``/``--role``). The workload may also be a schedule JSON
(``specpilot schedule FILE.yaml --json``).

Two ways to name the engine:

- ``specpilot load URL --engine E``: someone else started it. ``--engine`` picks the /metrics
  and per-response parsers (default ``openai``: delivery metrics only); the run's manifest can
  only say what the URL is, not which model files, flags or speculative config serve it.
- ``specpilot load --start --engine E [--engine-opt KEY=VALUE ...]``: specpilot starts the
  engine through its backend (``builtin``, ``llamacpp``, ``vllm``, ``sglang``), records the
  backend's full ``describe()`` manifest (model files with sha256, tokenizer hash, engine
  version, launch flags, speculative config, hardware), scrapes its counters and memory at
  every phase edge, and stops it at the end. Options are a pilot file's arm options
  (``arms[].options``, the same names and checks; ``specpilot.pilot.config``), values in
  YAML syntax (the builtin engine without ``draft`` is plain decoding). The arm is resolved
  as a pilot file's (``pilot.arms.plan_arm``: its role's rules, the frozen settings and
  capacity in its manifest); it is named after ``--role``, else ``baseline``, or
  ``speculative`` when an option switches speculation on, unless ``--arm`` says otherwise::

      specpilot load --start --engine builtin --engine-opt threads=1 \\
          --workload w.yaml --out run.duckdb
      specpilot load --start --engine builtin --engine-opt draft=shipped:smollm2-135m-instruct-d4 \\
          --engine-opt k=3 --workload w.yaml --out run.duckdb
      specpilot load --start --engine llamacpp --engine-opt spec_type=ngram-mod \\
          --engine-opt threads=2 --workload w.yaml --out run.duckdb

Phases follow the schedule's start times on one open-loop timeline (``--back-to-back``: each
phase starts when the previous one has drained, and per-phase counter deltas are exact);
client-side stages (retrieval, tool calls) run
before each request's model call and are measured (``--no-stages``: keep the planned seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import uuid
from typing import Any

from specpilot.errors import ConfigError
from specpilot.loadgen.client import served_model
from specpilot.records import ARM_ROLES, ENGINES

START_TIMEOUT_S = 600.0  # specpilot.backends.START_TIMEOUT_S (not imported: keeps --help fast)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "load",
        help="replay a workload open-loop against an endpoint, record every request",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    p.add_argument("--run-id", default=None, help="run id (default: a new one)")
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
        default=START_TIMEOUT_S,
        help="seconds to wait for --start's engine",
    )
    p.add_argument(
        "--model",
        default=None,
        help="model name sent in each request (default: the first of /v1/models, else 'default')",
    )
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
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.set_defaults(func=run)


def _schedule(args: argparse.Namespace) -> Any:
    from specpilot.workload import Schedule, build_schedule

    if args.workload.endswith(".json"):
        sched = Schedule.load(args.workload)
    else:
        sched = build_schedule(args.workload, seed=args.seed)
    return sched


def engine_opts(items: list[str]) -> dict[str, Any]:
    """``["threads=1", "draft=null"]`` -> ``{"threads": 1, "draft": None}`` (YAML values)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--engine-opt {item!r}: expected KEY=VALUE")
        out[key.strip().replace("-", "_")] = yaml.safe_load(value) if value else ""
    return out


def _refuse_unprepared(engine: str, opts: Any) -> None:
    """Files a pilot prepares before it starts an engine (``backends.adapter.Asset``: vLLM
    loads no GGUF, so a GGUF target is converted first; a specpilot draft is exported for
    llama.cpp or vLLM), which a one-arm load does not: said, not passed on raw."""
    from specpilot.backends.adapters import adapter_of
    from specpilot.pilot.assets import prepared_elsewhere

    a = adapter_of(engine)
    for option, asset in (a.assets(opts) if a is not None else {}).items():
        if not prepared_elsewhere(asset):
            continue
        if option == "model":
            raise ConfigError(
                f"--start --engine {engine} needs --engine-opt model=DIR (a Hugging Face "
                "directory): converting the default GGUF target is the pilot's preparation",
                fix="give model=..., or run a pilot file with this arm (specpilot pilot)",
            )
        raise ConfigError(
            f"--engine-opt {option}={asset.source}: a specpilot draft is converted for {engine} "
            "by the pilot",
            fix=f"give the converted file or directory as {option}=..., or run specpilot pilot",
        )


def _manifest(args: argparse.Namespace, backend: Any, plan: Any, url: str) -> dict[str, Any]:
    from specpilot.backends import hardware_info
    from specpilot.pilot.arms import arm_manifest

    if backend is not None:  # the pilot's manifest of an arm: frozen settings, capacity, hash
        return {
            **arm_manifest(backend.describe().to_dict(), plan, {}),
            "started_by_specpilot": True,
        }
    return {
        "engine": args.engine,
        "endpoint": url,
        "started_by_specpilot": False,
        "note": "endpoint given by URL: model files and flags are not known to the load "
        "command (use --start for the full manifest)",
        "client_hardware": hardware_info(),
    }


def _config(args: argparse.Namespace, sched: Any, url: str, backend: Any, run_id: str) -> Any:
    from specpilot.backends import response_extras_for
    from specpilot.loadgen import LoadConfig

    return LoadConfig.build(
        url,
        api=args.api,
        model=args.model or served_model(url),
        run_id=run_id,
        arm=args.arm,
        timeout_s=args.timeout,
        enforce_deadlines=args.enforce_deadlines,
        cancel_fraction=args.cancel_fraction,
        max_concurrency=args.max_concurrency,
        lag_threshold_s=args.lag_threshold_ms / 1e3,
        include_usage=not args.no_usage,
        response_extras=(
            backend.response_extras if backend is not None else response_extras_for(args.engine)
        ),
        seed=sched.seed,
        cold_start_requests=args.cold_start,
        phase_timing="back_to_back" if args.back_to_back else "schedule",
        run_stages=not args.no_stages,
        progress=False if args.quiet else None,
    )


def _pilot(store: Any, args: argparse.Namespace, sched: Any, options: dict[str, Any]) -> Any:
    """The file's pilot (a new one, or the existing one when it replays the same workload)."""
    from specpilot import __version__
    from specpilot.backends import hardware_facts
    from specpilot.records import PilotRecord

    config = {"load": options, "workload_config_sha256": sched.config_sha256}
    existing = store.records("pilots")
    if existing:
        pilot = existing[0]
        if pilot.config.get("workload_config_sha256") != sched.config_sha256:
            raise ConfigError(
                f"{args.out} holds the pilot {pilot.name!r} of another workload "
                f"(config sha256 {pilot.config.get('workload_config_sha256')}): give another --out"
            )
        return pilot
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return PilotRecord(
        pilot_id=f"pilot-{uuid.uuid4().hex[:12]}",
        name=sched.name,
        config=config,
        config_sha256=hashlib.sha256(blob).hexdigest(),
        specpilot_version=__version__,
        created_unix=time.time(),
        hardware=hardware_facts(),
        schedule=sched.to_dict(),
    )


def _arm(
    pilot: Any, args: argparse.Namespace, run_id: str, manifest: dict[str, Any], n: int, plan: Any
) -> Any:
    from specpilot.backends.freeze import frozen_sha256, strategy_of
    from specpilot.records import ArmRecord

    return ArmRecord(
        pilot_id=pilot.pilot_id,
        run_id=run_id,
        arm=args.arm,
        role=plan.role if plan else args.role or (args.arm if args.arm in ARM_ROLES else "extra"),
        engine=args.engine,
        manifest=manifest,
        manifest_sha256=frozen_sha256(manifest),
        strategy=strategy_of(manifest),  # as served (the draft's sha256 and path with it)
        run_order=n,
        status="running",
        started_unix=time.time(),
    )


def run(args: argparse.Namespace) -> int:
    from specpilot.backends import BackendError, scrape_endpoint
    from specpilot.loadgen import LoadRunner
    from specpilot.pilot.engines import engine_options, make_backend, one_arm
    from specpilot.store import PhaseRecorder, Store

    if args.start == (args.url is not None):
        raise ConfigError("give either an endpoint URL or --start (specpilot starts the engine)")
    if args.engine_opt and not args.start:
        raise ConfigError("--engine-opt needs --start")
    if args.start and args.engine == "openai":
        raise ConfigError("--start needs --engine builtin, llamacpp, vllm or sglang")
    sched = _schedule(args)
    if not sched.select(args.phase, warmup=not args.no_warmup):
        raise ConfigError("the selection has no requests")
    run_id = args.run_id or f"load-{uuid.uuid4().hex[:12]}"
    if not args.start:
        args.arm = args.arm or "baseline"
    backend = plan = None
    cold_start_s = None
    if args.start:  # one arm of a pilot file: the same checks, constructor and manifest
        raw = engine_opts(args.engine_opt)
        _refuse_unprepared(args.engine, engine_options(args.engine, raw))  # before any hashing
        plan = one_arm(args.engine, args.arm, args.role, raw)
        args.arm = plan.name
        backend = make_backend(plan)
        print(f"starting {args.engine} at {backend.endpoint} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            backend.start(args.start_timeout)
        except BackendError as exc:
            print(f"specpilot load: the {args.engine} engine did not start: {exc}", file=sys.stderr)
            return 1
        cold_start_s = time.perf_counter() - t0
    try:
        url = backend.endpoint if backend is not None else args.url.rstrip("/").removesuffix("/v1")
        cfg = _config(args, sched, url, backend, run_id)
        runner = LoadRunner.for_schedule(sched, cfg, None, args.phase, warmup=not args.no_warmup)
        options: dict[str, Any] = {
            k: v
            for k, v in vars(args).items()
            if k != "func" and isinstance(v, (str, int, float, bool, list, type(None)))
        }
        options.update(model=cfg.endpoint.model, phase_starts=runner.phase_starts)
        man = _manifest(args, backend, plan, url)  # it checks the served strategy: first
        with Store(args.out) as store:
            pilot = _pilot(store, args, sched, options)
            if any(a.run_id == run_id for a in store.records("arms")):
                raise ConfigError(f"run {run_id!r} already exists in {args.out}: pick another")
            store.add_pilot(pilot)
            arm = _arm(pilot, args, run_id, man, len(store.records("arms")), plan)
            arm.cold_start_s = cold_start_s
            store.add_arm(arm)
            scrape = (
                backend.scrape
                if backend is not None
                else lambda r, a, p, lbl: scrape_endpoint(args.engine, url, r, a, p, lbl)
            )
            durations = {p.name: p.duration_s for p in sched.phases}
            PhaseRecorder(
                store, run_id, args.arm, scrape, durations, local_engine=backend is not None
            ).attach(runner)
            runner.sink = store.sink
            result = runner.run()
            s = result.summary
            status = "interrupted" if s.interrupted or s.stop_reason else "complete"
            arm.status, arm.finished_unix, arm.load_summary = status, time.time(), s.to_dict()
            store.add_arm(arm)
            pilot.status, pilot.finished_unix = status, time.time()
            store.add_pilot(pilot)
    finally:
        if backend is not None:
            backend.stop()
    _report(args, run_id, result)
    return 130 if s.interrupted else 0


def _report(args: argparse.Namespace, run_id: str, result: Any) -> None:
    s = result.summary
    counts = "  ".join(f"{k} {v}" for k, v in s.status_counts.items() if v)
    lag = s.dispatch_lag_p99_s
    print(f"run {run_id} -> {args.out}: {s.scheduled} requests  {counts}")
    print(
        f"dispatch lag p50 {1e3 * (s.dispatch_lag_p50_s or 0):.2f} ms  p99 {1e3 * (lag or 0):.2f} ms  "
        f"max {1e3 * (s.dispatch_lag_max_s or 0):.2f} ms  max in flight {s.max_in_flight}"
    )
    if result.rounds:
        print(f"rounds {len(result.rounds)}  prefills {len(result.prefills)} (engine-reported)")
    for note in s.notes:
        print(f"note: {note}", file=sys.stderr)
    if not s.trustworthy:
        for reason in s.reasons:
            print(f"NOT TRUSTWORTHY: {reason}", file=sys.stderr)
