"""``specpilot load [URL] --workload FILE.yaml --out RUN.duckdb [--phase NAME] [--seed S]``.

Replays a workload's deterministic schedule open-loop against an OpenAI-compatible endpoint
and writes a pilot file (``specpilot.store``) of one arm: the pilot (config, schedule, this
machine's hardware with its CPU flags), the arm (role, engine, frozen manifest, strategy), each
phase (planned and actual edges, clock anchor), every request as it finishes (one record each,
whatever happened) with its chunk timings and, for engines that report them (the builtin
server), every decode round and prefill; counters and memory are scraped at every phase edge.
Loading into a file that already holds a pilot of the same workload adds another arm to it
(``--arm``/``--role``). The run is a one-arm pilot (``pilot.run.one_arm``): the pilot's own start,
measured phases and stop, with its records and its resume rule (``--run-id`` of a run left
incomplete: a fresh engine, the complete phases skipped, a cut phase replayed from its start). The workload may also be a schedule JSON
(``specpilot schedule FILE.yaml --json``).

Two ways to name the engine:

- ``specpilot load URL --engine E``: someone else started it. ``--engine`` picks the /metrics
  and per-response parsers (default ``openai``: delivery metrics only); the run's manifest can
  only say what the URL is, not which model files, flags or speculative config serve it.
  An endpoint that needs credentials: ``--api-key-env NAME`` (``Authorization: Bearer
  $NAME``) or ``--header 'NAME: ${VAR}'``, values read from the environment, only the header
  names stored (the manifest's ``headers_sent``).
- ``specpilot load --start --engine E [--engine-opt KEY=VALUE ...]``: specpilot starts the
  engine through its backend (``builtin``, ``llamacpp``, ``vllm``, ``sglang``), records the
  backend's full ``describe()`` manifest (model files with sha256, tokenizer hash, engine
  version, launch flags, speculative config, hardware), scrapes its counters and memory at
  every phase edge, and stops it at the end. Options are a pilot file's arm options
  (``arms[].options``, the same names and checks; ``specpilot.pilot.config.file``), values in
  YAML syntax (the builtin engine without ``draft`` is plain decoding). The arm is resolved
  as a pilot file's (``pilot.plan.arms.plan_arm``: its role's rules, the frozen settings and
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
import dataclasses
import hashlib
import json
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

from specpilot.commands._header_args import header_options
from specpilot.commands._load_args import (
    START_TIMEOUT_S,
    URL_WAIT_S,
    add_client_args,
    add_engine_args,
    add_run_args,
)
from specpilot.errors import ConfigError

if TYPE_CHECKING:
    from specpilot.loadgen.summary import LoadResult
    from specpilot.records import ArmRecord, PilotRecord
    from specpilot.store import Store

FLAGS = {  # LoadSettings field -> the option that sets it (errors name the option)
    "timeout_s": "--timeout",
    "max_concurrency": "--max-concurrency",
    "lag_threshold_ms": "--lag-threshold-ms",
    "start_timeout_s": "--start-timeout",
    "cancel_fraction": "--cancel-fraction",
    "cold_start_requests": "--cold-start",
    "scrape_interval_s": "--scrape-interval",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "load",
        help="replay a workload open-loop against an endpoint, record every request",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_args(p)
    add_engine_args(p)
    add_client_args(p)
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
    from specpilot.pilot.plan.assets import prepared_elsewhere

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


def _settings(args: argparse.Namespace) -> Any:
    """The run's ``LoadSettings`` (a pilot file's ``load:``) from the options."""
    from pydantic import ValidationError

    from specpilot.pilot.config.settings import LoadSettings

    try:
        return LoadSettings.model_validate(
            {
                "api": args.api,
                "timeout_s": args.timeout,
                "enforce_deadlines": args.enforce_deadlines,
                "max_concurrency": args.max_concurrency,
                "lag_threshold_ms": args.lag_threshold_ms,
                "start_timeout_s": args.start_timeout
                or (START_TIMEOUT_S if args.start else URL_WAIT_S),
                "phase_timing": "back_to_back" if args.back_to_back else "schedule",
                "cancel_fraction": args.cancel_fraction,
                "cold_start_requests": args.cold_start,
                "scrape_interval_s": args.scrape_interval,
                "include_usage": not args.no_usage,
                "run_stages": not args.no_stages,
            },
        )
    except ValidationError as exc:  # each problem named by its option
        lines = [f"{FLAGS.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("; ".join(lines), fix="see specpilot load --help") from None


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


def run(args: argparse.Namespace) -> int:
    from specpilot.backends import BackendError
    from specpilot.pilot.eta.progress import PilotProgress
    from specpilot.pilot.run import armrun
    from specpilot.pilot.run.context import RunPlan
    from specpilot.pilot.run.one_arm import OneArm, measure, run_record
    from specpilot.store import Store

    _refuse_conflicts(args)
    sched = _schedule(args)
    if not sched.select(args.phase, warmup=not args.no_warmup):
        raise ConfigError("the selection has no requests")
    settings, plan = _settings(args), _plan(args)
    if plan.url is not None:  # an unset variable is refused before any file is written
        from specpilot.pilot.config.credentials import arm_headers

        arm_headers(plan.spec)
    run_id = args.run_id or f"load-{uuid.uuid4().hex[:12]}"
    if args.start:
        print(f"starting {args.engine} ...", file=sys.stderr, flush=True)
    with Store(args.out) as store, PilotProgress(quiet=True if args.quiet else None) as progress:
        pilot = _pilot(store, args, sched, _options(args, sched, settings))
        rec, again = run_record(store, pilot.pilot_id, plan, run_id)
        resumed = rec.manifest if again else None
        store.add_pilot(pilot)
        store.add_arm(rec)
        ctx = OneArm(store, sched, settings, progress, run=_run_facts(args, sched, settings))
        ctx.resumed = resumed
        run = RunPlan(plan, 0, rec.run_order, run_id, phases=_phases(args))
        try:
            life = measure(ctx, run, rec, warm=args.no_warmup)
            result, rec = life.result, life.rec
        except armrun.Interrupted as exc:
            result, rec = exc.result, store.records("arms", run_id=run_id)[0]
        except BaseException as exc:  # a new run that failed is kept as failed, saying why
            if resumed is None:  # (a resumed one keeps its state: it can be resumed again)
                _keep_failed(store, pilot, run_id, exc)
            if not isinstance(exc, BackendError):
                raise
            print(f"specpilot load: the {args.engine} engine did not start: {exc}", file=sys.stderr)
            return 1
        _keep_finished(store, pilot, rec, result)
    if result is None:
        print(f"run {run_id} -> {args.out}: nothing left to replay")
        return 0
    _report(args, run_id, result)
    return 130 if result.summary.interrupted else 0


def _refuse_conflicts(args: argparse.Namespace) -> None:
    """Options that contradict each other (a URL and --start, or --start's with a URL's)."""
    if args.start == (args.url is not None):
        raise ConfigError("give either an endpoint URL or --start (specpilot starts the engine)")
    if args.engine_opt and not args.start:
        raise ConfigError("--engine-opt needs --start")
    if args.start and args.engine == "openai":
        raise ConfigError("--start needs --engine builtin, llamacpp, vllm or sglang")
    if args.start and (args.header or args.api_key_env):
        raise ConfigError(
            "--header and --api-key-env are for an endpoint URL: --start's engine takes none"
        )


def _keep_failed(store: Store, pilot: PilotRecord, run_id: str, exc: BaseException) -> None:
    """The run's arm and the pilot marked failed, with the exception that ended them."""
    rec = store.records("arms", run_id=run_id)[0]
    store.add_arm(dataclasses.replace(rec, status="failed", error=repr(exc)))
    pilot.status, pilot.finished_unix = "failed", time.time()
    store.add_pilot(pilot)


def _keep_finished(
    store: Store, pilot: PilotRecord, rec: ArmRecord, result: LoadResult | None
) -> None:
    """The arm and the pilot marked complete (the load step done) or interrupted, with the
    load summary (the stored one when nothing was left to replay)."""
    from specpilot.pilot.run import armrun

    status = "complete" if armrun.LOAD_STEP in rec.completed_steps else "interrupted"
    summary = result.summary.to_dict() if result is not None else rec.load_summary
    store.add_arm(
        dataclasses.replace(rec, status=status, finished_unix=time.time(), load_summary=summary)
    )
    pilot.status, pilot.finished_unix = status, time.time()
    store.add_pilot(pilot)


def _plan(args: argparse.Namespace) -> Any:
    """The arm, resolved as a pilot file's (``pilot.plan.engines.one_arm``)."""
    from specpilot.pilot.plan.engines import engine_options, one_arm

    if args.start:  # one arm of a pilot file: the same checks, constructor and manifest
        raw = engine_opts(args.engine_opt)
        _refuse_unprepared(args.engine, engine_options(args.engine, raw))  # before any hashing
        return one_arm(args.engine, args.arm, args.role, raw, model_name=args.model)
    url = args.url.rstrip("/").removesuffix("/v1")
    name = args.arm or "baseline"
    headers = header_options(args.header, args.api_key_env)
    return one_arm(
        args.engine,
        name,
        args.role,
        {},
        url=url,
        model_name=args.model,
        headers=headers,
        api_key_env=args.api_key_env,
    )


def _options(args: argparse.Namespace, sched: Any, settings: Any) -> dict[str, Any]:
    """The run's options as the pilot record keeps them, with the phases' start times."""
    from specpilot.loadgen.phases import phase_starts_for

    options: dict[str, Any] = {
        k: v
        for k, v in vars(args).items()
        if k != "func" and isinstance(v, (str, int, float, bool, list, type(None)))
    }
    options["phase_starts"] = {}
    if settings.phase_timing == "schedule":
        present = {r.phase for r in sched.select(args.phase, warmup=not args.no_warmup)}
        options["phase_starts"] = phase_starts_for(p for p in sched.phases if p.name in present)
    return options


def _run_facts(args: argparse.Namespace, sched: Any, settings: Any) -> dict[str, Any]:
    """What a run replays and how, kept in its manifest (``load``): a resumed run must give
    the same (``pilot.run.one_arm.OneArm.manifest``)."""
    return {
        **settings.model_dump(exclude={"start_timeout_s"}),
        "seed": sched.seed,
        "role": args.role,
        "url": args.url,
        "model": args.model,
        "phases": sorted(args.phase) if args.phase else None,
        "warmup": not args.no_warmup,
    }


def _phases(args: argparse.Namespace) -> tuple[str, ...] | None:
    return tuple(args.phase) if args.phase else None


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
