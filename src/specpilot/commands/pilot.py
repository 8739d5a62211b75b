"""``specpilot pilot [PILOT.yaml] [--quick] [--out DIR] [--dry-run] [--budget MIN] [--episodes N]
[--capacity RPS]``: the whole pilot.

Runs every arm of the pilot on one schedule (baseline, one speculative strategy, the
equal-budget alternative, any extra arms), gates quality, drills the rollback, then writes the
analysis and the verdict: ``report.html``, ``report.md``, ``report.json`` and the pilot's
``pilot.duckdb`` in ``--out`` (default ``runs/<timestamp>/``). Without a file it runs the
embedded default (SmolLM2-135M + the shipped draft on the builtin engine, llama.cpp beside it).

``--dry-run`` checks the config (one switch at a time between arms), prints the arms, what
each is compared with, the exact launch commands, each process's GPUs (arms with ``devices:``;
free memory checked where ``nvidia-smi`` answers) and the schedule, and starts nothing.
Running the same command again with the same ``--out`` resumes an interrupted pilot.

A phase may give its load as ``target_utilization`` (a fraction of what the baseline sustains
on this machine): the pilot then probes the baseline's capacity first (``pilot.run.capacity``), and
``--dry-run`` plans those phases at ``--capacity RPS`` where given (without it, it says the
rates wait for the probe). ``--capacity RPS`` on a run uses that figure instead of probing.

    specpilot pilot --quick --out runs/quick          # the embedded default, quick profile
    specpilot pilot examples/pilot-vllm-gpu.yaml --dry-run
    specpilot pilot --episodes 40 --dry-run          # the default, 40 episodes per level
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pilot",
        help="run a three-arm pilot end to end and write the verdict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", default=None, help="pilot YAML (default: the embedded one)")
    p.add_argument("--quick", action="store_true", help="the config's quick profile")
    p.add_argument("--out", default=None, help="output directory (default runs/<timestamp>)")
    p.add_argument("--dry-run", action="store_true", help="check and print the plan; start nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    p.add_argument("--quiet", action="store_true", help="no live progress (CI is quiet anyway)")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="MIN",
        help="wall minutes for the whole pilot (episodes.budget_min): the last episodes are "
        "dropped when it would run longer",
    )
    p.add_argument(
        "--episodes",
        type=int,
        default=None,
        metavar="N",
        help="N episodes per load level, each as long as now: episodes.per_level and every "
        "measured phase's duration_s scaled by N / per_level (episodes.budget_min grown alike, "
        "never shrunk; the drill replays the seconds it did), so the 'about N episodes per "
        "level would decide it' of an undecided pilot can be run as said",
    )
    p.add_argument(
        "--capacity",
        type=float,
        default=None,
        metavar="RPS",
        help="the baseline's sustainable rate in requests/s, given instead of probed: "
        "target_utilization phases run (or, with --dry-run, are planned) at that fraction of "
        "it; the report says it was given, not measured",
    )
    p.set_defaults(func=run)


def plan_summary(cfg: Any, base_dir: Path, capacity_rps: float | None = None) -> dict[str, Any]:
    """What ``--dry-run`` prints: arms, references, strategies, frozen settings, commands; the
    schedule and its pairs where its rates are known (``target_utilization`` phases need
    ``capacity_rps``, else the probe at the pilot's start sets them)."""
    from specpilot.backends.llamacpp import LlamaCppBackend
    from specpilot.pilot.config.credentials import names
    from specpilot.pilot.plan import devices, noise
    from specpilot.pilot.plan.arms import check_one_switch, plan_arms
    from specpilot.pilot.plan.engines import make_backend
    from specpilot.pilot.run.capacity import refuse_unprobed, wants_probe
    from specpilot.workload import build_schedule

    plans = plan_arms(cfg)
    check_one_switch(plans)
    placement = devices.summary(plans, cfg)  # each process's GPUs; refused as the run would
    wl = cfg.workload_config()
    if wants_probe(cfg, wl) and capacity_rps is None:  # refused here as the run refuses it
        refuse_unprobed(cfg, next(p for p in plans if p.role == "baseline"))
    waits = wl.utilization_phases() if capacity_rps is None else []
    wdir = cfg.workload_dir(base_dir)
    at_most = None if waits else build_schedule(wl, base_dir=wdir, capacity_rps=capacity_rps)
    schedule, fitted = _at_least(cfg, wl, wdir, at_most, capacity_rps)
    thin: list[str] = []
    if schedule is not None:  # a level too thin for its episodes: refused here too
        from specpilot.pilot.config.sizing import refuse_short_levels

        thin = refuse_short_levels(cfg, schedule)
    arms = []
    for p in plans:
        # an arm by URL starts nothing: its credentials are read when the pilot runs
        backend = make_backend(p) if p.url is None else None
        command = backend.command() if backend is not None and hasattr(backend, "command") else None
        if isinstance(backend, LlamaCppBackend):
            command = backend.cfg.flags()
            _check_llamacpp(p.name, backend.cfg)
        arms.append(
            {
                "name": p.name,
                "role": p.role,
                "engine": p.engine,
                "compared_with": p.reference,
                "strategy": p.strategy.to_dict(),
                "frozen": p.frozen,
                "capacity": p.capacity,
                "budget": p.budget.to_dict(),
                "drill": p.drill,
                "url": p.url,
                "urls": p.spec.replicas,  # an arm by URL: one replica per process
                "headers_sent": names(p.spec.headers, p.spec.api_key_env) if p.url else [],
                "launch": command,
            }
        )
    return {
        "name": cfg.name,
        "profile": cfg.profile,
        "config_sha256": cfg.sha256(),
        "arms": arms,
        "placement": placement,
        "schedule": schedule.summary() if schedule is not None else None,
        "pairs": pairs_per_cell(schedule, cfg, at_most) if schedule is not None else None,
        "capacity": {"given_rps": capacity_rps, "waits_for_probe": waits},
        "fitted_s": fitted,
        "slo_from_probe": wl.unloaded_slo_groups(),
        "thin_levels": thin,
        "episodes": noise.episode_plan(cfg),
        "equivalence_margin": cfg.analysis.verdict.equivalence_margin,
    }


def _at_least(
    cfg: Any, wl: Any, wdir: Path, schedule: Any, capacity_rps: float | None
) -> tuple[Any, dict[str, list[float]]]:
    """``schedule`` (its levels at their most) with the levels fitted to the budget at their
    least, where they are (the run lengthens them by what its budget leaves), and each such
    level's [least, most] seconds."""
    from specpilot.pilot.plan.fit import lengths
    from specpilot.workload import build_schedule

    ep = cfg.episodes
    if schedule is None or not ep.fit_budget or capacity_rps is None:
        return schedule, {}
    got = lengths(schedule, wl.utilization_phases(), ep.per_level)
    fitted = {n: [least, most] for n, (least, most) in got.items()}
    least = {n: v[0] for n, v in fitted.items()}
    return build_schedule(
        wl.with_durations(least), base_dir=wdir, capacity_rps=capacity_rps
    ), fitted


def _check_llamacpp(arm: str, cfg: Any) -> None:
    """Build the engine's own parameters now: an option the installed llama.cpp lacks is
    refused here, with the valid names, instead of crashing the arm at start."""
    from specpilot.backends import BackendError
    from specpilot.errors import ConfigError

    try:
        cfg.common_params()
    except ConfigError as exc:
        raise ConfigError(f"arm {arm!r}: {exc}") from None
    except BackendError:  # xllamacpp not installed: nothing to check against here
        return


def pairs_per_cell(schedule: Any, cfg: Any, at_most: Any = None) -> dict[str, Any]:
    """The sample-size plan: pairs each (phase, group) cell will have against the pairs a
    direction needs (``analysis.verdict.min_pairs``); ``at_most``: the levels at their most
    (fitted to the budget, ``schedule`` is at their least): the cells short even there."""
    need = cfg.analysis.verdict.min_pairs

    def cells(sch: Any) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for r in sch.requests:
            if not r.warmup:
                cell = counts.setdefault(r.phase, {})
                cell[r.group] = cell.get(r.group, 0) + 1
        return counts

    def short(counts: dict[str, dict[str, int]]) -> list[str]:
        return sorted(f"{p}/{g}" for p, gs in counts.items() for g, n in gs.items() if n < need)

    counts = cells(schedule)
    most = short(cells(at_most)) if at_most is not None and at_most is not schedule else None
    return {
        "min_pairs": need,
        "cells": counts,
        "insufficient_by_design": short(counts),
        "insufficient_at_most": most,  # None: the levels are not fitted
    }


def _print_plan(plan: dict[str, Any]) -> None:
    print(f"pilot {plan['name']} ({plan['profile']}), config sha256 {plan['config_sha256'][:12]}")
    for a in plan["arms"]:
        _print_arm(a)
    for line in plan["placement"]["lines"]:
        print(f"  {line}")
    sch = plan["schedule"]
    if sch is None:
        print(
            f"  schedule: phases {', '.join(plan['capacity']['waits_for_probe'])} give "
            "target_utilization, so their rates come from the capacity probe at the pilot's "
            "start (--capacity RPS plans them at a figure)"
        )
        if plan.get("episodes"):
            _print_episodes(plan["episodes"], plan.get("equivalence_margin"))
        return
    for note in plan.get("thin_levels") or []:
        print(f"  note: {note}")
    given = plan["capacity"]["given_rps"]
    if given is not None:
        print(f"  capacity: {given:g} req/s as given (--capacity), not measured")
    phases = ", ".join(
        f"{p['name']} {p['duration_s']:g}s x {p['offered_rate']:g}/s" for p in sch["phases"]
    )
    print(f"  schedule: {sch['requests']} requests per arm: {phases}")
    slo = plan.get("slo_from_probe") or {}
    if slo:
        print(
            f"  deadlines: groups {', '.join(sorted(slo))} take a multiple of the baseline's "
            "unloaded task time (slo.unloaded_x), measured by the probe at the pilot's start "
            "(a run given --capacity has none, and is refused)"
        )
    for name, (least, most) in (plan.get("fitted_s") or {}).items():
        print(
            f"  {name}: planned here at its least ({least:.0f} s, a request an episode); the "
            f"run lengthens it up to {most:g} s by what its budget leaves (episodes.fit_budget)"
        )
    pairs = plan["pairs"]
    print("  pairs per cell (the episodes, not the pairs, are the units; see below):")
    for phase, groups in pairs["cells"].items():
        cells = ", ".join(f"{g} {n}" for g, n in sorted(groups.items()))
        print(f"    {phase:<12} {cells}, all {sum(groups.values())}")
    ep = plan.get("episodes")
    if ep:
        _print_episodes(ep, plan.get("equivalence_margin"))
    _print_short(pairs)


def _print_short(pairs: dict[str, Any]) -> None:
    """The cells with fewer pairs than a direction needs; fitted to the budget, at the levels'
    least and at their most (the run plays them between)."""
    short, most = pairs["insufficient_by_design"], pairs.get("insufficient_at_most")
    need = pairs["min_pairs"]
    if short and most is not None:
        print(
            f"  {len(short)} cells have fewer pairs than {need} at their levels' least (a "
            "request an episode); "
            + (
                f"{len(most)} still at their most (the phases' duration_s): raise rates or "
                "duration_s for a decision"
                if most
                else "none at their most (the phases' duration_s): how many reach a direction "
                "depends on how long the budget lets the levels play (the run's fit line)"
            )
        )
    elif short:
        print(
            f"  {len(short)} cells cannot reach a direction by design (fewer pairs than "
            f"{need}): raise phase durations or rates for a decision"
        )


def _print_arm(a: dict[str, Any]) -> None:
    s = a["strategy"]
    strat = (
        "plain"
        if s["kind"] == "none"
        else f"{s['kind']} k={s['k']} {s.get('draft_id') or s.get('ngram_type') or ''}"
    )
    if (s.get("params") or {}).get("synth_rates"):
        strat += f" SYNTHETIC acceptance {s['params']['synth_rates']} (invalid text by design)"
    ref = f" vs {a['compared_with']}" if a["compared_with"] else ""
    print(f"  {a['name']:<16} {a['role']:<11} {a['engine']:<8} {strat}{ref}")
    if a["launch"]:
        print("      " + " ".join(str(x) for x in a["launch"]))
    elif len(a.get("urls") or []) > 1:
        print(
            f"      replicas {', '.join(a['urls'])} (one per process; given by URL: not "
            "started, not drilled)"
        )
    elif a["url"]:
        print(f"      endpoint {a['url']} (given by URL: not started, not drilled)")
        if a["headers_sent"]:
            print(f"      headers {', '.join(a['headers_sent'])} (values from the environment)")


def _print_mirrored(ep: dict[str, Any]) -> None:
    """The line of a mirrored design (``episodes.design``); nothing for turn-taking."""
    if ep.get("design") != "mirrored":
        return
    shared = " (on one machine, as episodes.share_machine insists)" * bool(ep.get("share_machine"))
    print(
        "    mirrored: every arm of an episode at once, each request sent at one instant to a "
        f"process of each arm{shared}; the noise below is the turn-taking design's"
    )


def _print_episodes(ep: dict[str, Any], margin: float | None) -> None:
    """The episode design's size, each arm's predicted smallest effect and interval, the looks
    and the budget."""
    print(
        (
            f"  episodes: {ep['processes']} speculative processes serve both arms (the "
            "baseline is each one switched off in place: the command line above is not "
            f"started), {ep['per_level']} episodes per load level"
            if ep.get("in_place")
            else f"  episodes: {ep['processes']} process{'es' if ep['processes'] > 1 else ''} "
            f"per arm, {ep['per_level']} "
            "episodes per load level"
        )
        + (f", a planted +{ep['planted']:.0%} that must be found" if ep["planted"] else "")
        + f"; per pooled level, at the deciding level {ep['deciding_level']:.2%} "
        f"(half of alpha over {ep['cells']} levels, the groups' cells have the other "
        "half), 80% power:"
    )
    _print_mirrored(ep)
    if ep["processes"] == 1:
        print(
            "    one process per arm: no cell of an arm on processes of its own can be decided "
            "(how two processes of one config differ, 7-20% on these CPUs, cannot be told from "
            "the effect) -> episodes.processes 2 or more for a decision"
        )
    for r in ep["predicted"]:
        noise = (
            f"episode sd {r['episode_sd']:.1%}, process sd {r['process_sd'][0]:.1%}/"
            f"{r['process_sd'][1]:.1%}, {r['source']}"
        )
        eq = (
            f"; 'no difference' needs it under +-{margin:.0%}"
            + (": out of reach" if r["half_width"] >= margin else "")
            if margin
            else ""
        )
        if not math.isfinite(r["mde"]):  # one process an arm, or no df for the episode noise
            print(
                f"    {r['arm']:<16} no decision possible at {ep['per_level']} episodes per level "
                f"on {ep['processes']} process{'es' if ep['processes'] > 1 else ''} per arm "
                f"({noise})"
            )
            continue
        print(
            f"    {r['arm']:<16} smallest effect found {r['mde']:.0%}; interval about "
            f"+-{r['half_width']:.0%} (+-{r['half_width_80']:.0%} or wider in 1 pilot of 5)"
            f"{eq} ({noise})"
        )
    if len(ep["looks"]) > 1 or ep.get("budget_min"):
        interim = ", ".join(str(x) for x in ep["looks"][:-1])
        print(
            (
                f"  looks after {interim} episodes per level (a level decided there gets no "
                f"more); the last tests at alpha {ep['final_alpha']:.4f}"
                if interim
                else f"  no interim look: one test at alpha {ep['final_alpha']:.4f}"
            )
            + (
                f"; budget {ep['budget_min']:g} min: the last episodes are dropped when the "
                "pilot would run past it"
                if ep.get("budget_min")
                else ""
            )
        )


@contextlib.contextmanager
def _named(path: Path) -> Iterator[None]:
    """A config or input error found past validation (arms that differ in two switches, a
    trace that is not there) names the pilot file it came from, and the line of the field it
    is about when it says which (``PilotConfigError.at``)."""
    from specpilot.errors import ConfigError, InputFileError
    from specpilot.pilot.config.file import at_line
    from specpilot.yamlpos import LineMap

    try:
        yield
    except (ConfigError, InputFileError) as exc:
        if str(path) in exc.message:
            raise
        at = getattr(exc, "at", None)
        if at is None:
            raise type(exc)(f"{path}: {exc.message}", fix=exc.fix) from None
        lines = LineMap.from_text(path.read_text("utf-8")) if path.is_file() else None
        raise type(exc)(f"{at_line(str(path), lines, at)}: {exc.message}", fix=exc.fix) from None


def run(args: argparse.Namespace) -> int:
    from specpilot.pilot.config.file import default_pilot_path, load_pilot
    from specpilot.pilot.config.sizing import with_budget, with_episodes

    # resolved: relative paths in a config (traces, workloads) are relative to the real file,
    # also when it is reached through a link (examples/pilot-default.yaml)
    path = (Path(args.config) if args.config else default_pilot_path()).resolve()
    cfg = load_pilot(path, quick=args.quick)
    if args.capacity is not None:
        from specpilot.pilot.run.capacity import given_capacity

        given_capacity(args.capacity, "baseline")  # above 0, or refused with the fix
    if args.episodes is not None:
        cfg = with_episodes(cfg, args.episodes, path.parent, args.capacity)
    if args.budget is not None:
        cfg = with_budget(cfg, args.budget)
    if args.dry_run:
        with _named(path):
            plan = plan_summary(cfg, path.parent, args.capacity)
        if args.json:
            print(json.dumps(plan, indent=2, default=str))
        else:
            _print_plan(plan)
        return 0
    import signal

    from specpilot.pilot.eta.progress import PilotProgress
    from specpilot.pilot.run.runner import Pilot, default_out_dir

    # SIGTERM (a supervisor, `kill`) stops the pilot as Ctrl-C does: the arm marked interrupted,
    # every record written so far kept, engines stopped; a rerun resumes
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    out = Path(args.out) if args.out else default_out_dir()
    progress = PilotProgress(quiet=True if args.quiet else None)
    with progress, _named(path):
        pilot = Pilot(cfg, out, base_dir=path.parent, progress=progress, capacity_rps=args.capacity)
        result = pilot.run()
    print(result.summary)
    for kind, f in sorted(result.files.items()):
        print(f"{kind:>6}: {f}")
    return 0 if not result.failed_arms else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(1)
