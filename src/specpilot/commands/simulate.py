"""``specpilot simulate PILOT.duckdb``: the calibrated serving simulator (past the pilot's machine).

Calibrates an arm's step, prefill and overhead costs and its per-group committed tokens per
round from the pilot file, then:

- ``--validate``: calibrates on ``--calibrate-on`` phases and predicts the others from their
  measured arrivals and lengths, next to what was measured (the gate: p50 / p99 E2E within
  15%); a simulation that misses it says NOT validated, and is no evidence.
- ``--rate R [R ...]``: Poisson arrivals at each rate, prompts and outputs resampled from the
  arm's measured requests; ``--replicas N`` behind ``--router`` round_robin | least_loaded.
- ``--baseline B``: also the baseline arm, and where the candidate's p50 E2E stops beating it
  over the rates (over 5 seeds: the bracket is the interval).
- ``--profile FILE``: the what-ifs (``--rate``, ``--trace``, ``--k-schedule``) on another
  machine's measured step curves (a GPU's, say; ``specpilot.simulate.profile`` has the format)
  with this pilot's acceptance. ``--validate`` always checks the pilot's own machine: a
  profile's figures are labelled as such and are not validated here.

Every figure names its profile: the pilot, the arm, the phases and the CPU it was measured on.

    specpilot simulate runs/x/pilot.duckdb --arm speculative --validate
    specpilot simulate runs/x/pilot.duckdb --arm speculative --baseline baseline --rate 0.5 1 2 4
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specpilot.records import PilotData
    from specpilot.simulate import ArmCosts, Validation
    from specpilot.simulate.kschedule import KSchedule, ScheduleCheck
    from specpilot.simulate.profile import HardwareProfile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="calibrated serving simulation: validation, other rates, replicas, crossover",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("pilot", help="pilot file (pilot.duckdb)")
    p.add_argument("--arm", default=None, help="arm to simulate (default: the speculative arm)")
    p.add_argument("--baseline", default=None, help="also simulate this arm; print the crossover")
    p.add_argument("--validate", action="store_true", help="the validation gate")
    p.add_argument("--calibrate-on", nargs="+", default=None, help="phases to calibrate on")
    p.add_argument("--rate", nargs="+", type=float, default=None, help="Poisson rates (req/s)")
    p.add_argument("--trace", default=None, help="replay this arrival trace (CSV/JSONL) instead")
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="with --trace: multiply its gaps (2 = half its rate)",
    )
    p.add_argument("--requests", type=int, default=2000, help="requests per simulated rate")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--router", default="round_robin", choices=["round_robin", "least_loaded"])
    p.add_argument(
        "--k-schedule",
        action="store_true",
        help="k per batch size against --baseline, in vLLM's speculative-config syntax",
    )
    p.add_argument(
        "--profile",
        default=None,
        help="hardware profile file (YAML/JSON): step curves measured elsewhere",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _arm(data: PilotData, name: str | None, role: str) -> str:
    from specpilot.errors import ConfigError

    names = [a.arm for a in data.arms]
    if name is not None:
        if name not in names:
            raise ConfigError(f"no arm {name!r} in the pilot", fix=f"one of {', '.join(names)}")
        return name
    rec = next((a for a in data.arms if a.role == role), None)
    if rec is None:
        raise ConfigError(f"the pilot has no {role} arm", fix=f"name one: --arm {names[0]}")
    return rec.arm


def run(args: argparse.Namespace) -> int:
    from specpilot.analysis.base.fold import fold
    from specpilot.errors import ConfigError
    from specpilot.simulate.predict import measured_phases
    from specpilot.store import read_pilot

    # records (the simulator reads requests one by one), by load level as the report sees them
    data = fold(read_pilot(args.pilot))
    prof = None
    if args.profile:
        from specpilot.simulate.profile import load_profile

        prof = load_profile(args.profile)
    arm = _arm(data, args.arm, "speculative")
    phases = measured_phases(data, arm)  # the schedule's order
    if not phases:
        raise ConfigError(f"arm {arm!r} has no measured phases in {args.pilot}")
    out: dict[str, Any] = {"arm": arm}
    if args.validate:
        out["validation"] = _validation(args, data, arm, phases)
    if args.rate:
        out.update(_what_if(args, data, prof, arm, phases[-1]))
    if args.trace:
        out["trace"] = _trace(args, data, prof, arm)
    if args.k_schedule:
        out["k_schedule"] = _k_schedule(args, data, prof, arm)
    if not (args.validate or args.rate or args.k_schedule or args.trace):
        raise ConfigError(
            "nothing to simulate", fix="add --validate, --rate R ... and/or --k-schedule"
        )
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    return 0


def _costs(
    data: PilotData, name: str, args: argparse.Namespace, prof: HardwareProfile | None
) -> ArmCosts:
    """The arm's costs calibrated on ``--calibrate-on`` (default: every measured phase), with
    the step curves of ``--profile`` when one is given."""
    from specpilot.simulate import calibrate

    c = calibrate(data, name, args.calibrate_on)
    if prof is None:
        return c
    from specpilot.simulate.profile import apply

    return apply(c, prof, args.profile)


def _validation(
    args: argparse.Namespace, data: PilotData, arm: str, phases: list[str]
) -> dict[str, object]:
    """``--validate``: calibrate on ``--calibrate-on`` (default: the first phase), predict the
    other phases and check them against what was measured."""
    from specpilot.errors import ConfigError
    from specpilot.simulate import validate as gate

    cal = args.calibrate_on or phases[:1]
    bad = [p for p in cal if p not in phases]
    if bad:
        raise ConfigError(f"--calibrate-on {bad}: not phases of {arm}", fix=", ".join(phases))
    rest = [p for p in phases if p not in cal]
    if not rest:
        raise ConfigError("--validate needs a phase to predict", fix="calibrate on fewer")
    v = gate(data, arm, cal, rest, seed=args.seed)
    if not args.json:
        _print_validation(v)
    return v.to_dict()


def _print_validation(v: Validation) -> None:
    print(v.text)
    print(f"  profile: {v.profile}")
    print(
        f"  {'phase':<10}{'metric':<10}{'measured':>10}{'its 95% interval':>20}"
        f"{'predicted':>11}{'error':>8}"
    )
    for c in v.checks:
        err = "n/a" if c.rel_error is None else f"{c.rel_error:+.0%}"
        m = "n/a" if c.measured is None else f"{c.measured:.3g}"
        pr = "n/a" if c.predicted is None else f"{c.predicted:.3g}"
        own = (
            ""
            if c.metric == "goodput"
            else " to ".join(
                "open" if x is None else f"{x:.3g}" for x in (c.measured_low, c.measured_high)
            )
        )
        print(
            f"  {c.phase:<10}{c.metric:<10}{m:>10}{own:>20}{pr:>11}{err:>8}"
            + ("" if c.gated else "  (not gated)")
        )


def _what_if(
    args: argparse.Namespace,
    data: PilotData,
    prof: HardwareProfile | None,
    arm: str,
    phase: str,
) -> dict[str, object]:
    """``--rate``: Poisson arrivals at each rate with ``phase``'s measured lengths; with
    ``--baseline``, where the candidate stops beating it (the ``crossover`` entry)."""
    import numpy as np

    from specpilot.simulate import crossover, measured, poisson_workload, predict

    costs = _costs(data, arm, args, prof)
    template, _ = measured(data, arm, phase)
    rows = []
    for rate in args.rate:
        w = poisson_workload(template, rate, args.requests, np.random.default_rng(args.seed))
        f = predict(costs, w, seed=args.seed, replicas=args.replicas, router=args.router)
        rows.append({"rate": rate, **f.to_dict()})
    out: dict[str, object] = {
        "what_if": {"profile": costs.profile, "replicas": args.replicas, "rows": rows}
    }
    if not args.json:
        print(f"{arm} simulated ({costs.profile}; {args.replicas} replica(s), {args.router}):")
        for r in rows:
            print(
                f"  {r['rate']:>7.3g} req/s  E2E p50 {r['e2e_p50'] or float('nan'):.3g} s"
                f"  p99 {r['e2e_p99'] or float('nan'):.3g} s  TTFT p50 "
                f"{r['ttft_p50'] or float('nan'):.3g} s  goodput {r['goodput']:.3g}/s"
            )
    if args.baseline:
        base = _costs(data, _arm(data, args.baseline, "baseline"), args, prof)
        x = crossover(base, costs, template, args.rate, n=args.requests)
        out["crossover"] = {
            "text": x.text,
            "bracket": x.bracket,
            "ratio_p50": x.ratio_p50,
            "outcome": x.outcome,
        }
        if not args.json:
            print(x.text + " (simulated: trust it only where --validate passes)")
    return out


def _trace(
    args: argparse.Namespace, data: PilotData, prof: HardwareProfile | None, arm: str
) -> dict[str, object]:
    """``--trace``: the arm replaying a recorded arrival trace (gaps times ``--time-scale``)."""
    from specpilot.simulate import predict
    from specpilot.simulate.predict import trace_workload

    costs = _costs(data, arm, args, prof)
    w = trace_workload(args.trace, args.time_scale)
    f = predict(costs, w, seed=args.seed, replicas=args.replicas, router=args.router)
    rate = len(w) / w.duration_s if w.duration_s else float("nan")
    if not args.json:
        print(
            f"{arm} on {args.trace} x{args.time_scale:g} ({len(w)} requests, {rate:.3g} req/s; "
            f"{args.replicas} replica(s)): E2E p50 {f.e2e_p50 or float('nan'):.3g} s, "
            f"p99 {f.e2e_p99 or float('nan'):.3g} s, TTFT p50 {f.ttft_p50 or float('nan'):.3g} s"
            f" ({costs.profile}; simulated)"
        )
    return {
        "path": args.trace,
        "time_scale": args.time_scale,
        "rate": rate,
        "profile": costs.profile,
        **f.to_dict(),
    }


def _k_schedule(
    args: argparse.Namespace, data: PilotData, prof: HardwareProfile | None, arm: str
) -> dict[str, object]:
    """``--k-schedule``: k per batch size against the baseline arm, and the schedule checked
    against the fixed k at ``--rate`` (at most 1000 requests each)."""
    from specpilot.simulate.kschedule import check, k_schedule

    base_arm = _arm(data, args.baseline, "baseline")
    ks = k_schedule(data, base_arm, arm, profile=prof)
    chk = check(data, base_arm, arm, ks, rates=args.rate, n=min(args.requests, 1000), profile=prof)
    if not args.json:
        _print_k_schedule(ks, chk)
    return {
        "ranges": ks.ranges,
        "notes": ks.notes,
        "check": chk.to_dict(),
        "vllm_speculative_config": ks.vllm_speculative_config(),
    }


def _print_k_schedule(ks: KSchedule, chk: ScheduleCheck) -> None:
    print(ks.text)
    print(f"  --speculative-config '{ks.vllm_speculative_config()}'")
    print(f"  {chk.text}")
    print(
        f"  {'req/s':>8}{'goodput k=' + str(chk.k_max):>16}{'schedule':>10}"
        f"{'p50 E2E k=' + str(chk.k_max):>16}{'schedule':>10}"
    )
    for r in chk.rows:
        print(
            f"  {r['rate']:>8.3g}{r['goodput_fixed'] or 0:>16.3g}"
            f"{r['goodput_schedule'] or 0:>10.3g}{r['e2e_p50_fixed'] or float('nan'):>16.3g}"
            f"{r['e2e_p50_schedule'] or float('nan'):>10.3g}"
        )
    for n in ks.notes:
        print(f"  note: {n}")
