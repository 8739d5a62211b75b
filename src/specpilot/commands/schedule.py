"""``specpilot schedule FILE.yaml [--json]``: build the deterministic schedule of a workload.

Without ``--json`` it prints a summary (phases, offered rates, requests per group); with
``--json`` the canonical schedule JSON (same file and seed -> same bytes) for the load
generator or for review.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schedule", help="build a workload's deterministic schedule")
    p.add_argument("workload", help="workload YAML (or a pilot YAML with a workload: section)")
    p.add_argument("--json", action="store_true", help="print the schedule as canonical JSON")
    p.add_argument("--indent", type=int, default=None, help="indent the JSON (default: compact)")
    p.add_argument("--seed", type=int, default=None, help="override the workload's seed")
    p.add_argument("--phase", action="append", default=None, help="only this phase (repeatable)")
    p.add_argument("--out", default=None, help="write the JSON to this file instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specpilot.workload import build_schedule

    sched = build_schedule(args.workload, seed=args.seed)
    if args.phase:
        keep = set(args.phase)
        for name in keep:
            sched.phase(name)  # raises with the list of phases
        sched.requests = [r for r in sched.requests if r.phase in keep]
        sched.phases = [p for p in sched.phases if p.name in keep]
    if args.json or args.out:
        text = sched.to_json(indent=args.indent)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(text)
            print(
                f"wrote {len(sched)} requests to {args.out} (sha256 {sched.sha256()[:16]})",
                file=sys.stderr,
            )
        else:
            sys.stdout.write(text + "\n")
        return 0
    s = sched.summary()
    print(
        f"schedule {s['name']!r}  seed {s['seed']}  {s['requests']} requests  sha256 {sched.sha256()[:16]}"
    )
    print(f"{'phase':<16}{'arrival':<12}{'duration_s':>11}{'requests':>10}{'rate/s':>9}")
    for p in s["phases"]:
        print(
            f"{p['name']:<16}{p['arrival']:<12}{p['duration_s']:>11.1f}{p['requests']:>10}{p['offered_rate']:>9.3f}"
        )
    print("by group: " + json.dumps(s["by_group"], ensure_ascii=False))
    for p in sched.phases:
        logged = p.arrival.get("kind") == "request_log"
        if p.window:
            w = p.window
            print(
                f"{p.name}: {'request-log' if logged else 'trace'} {w['kind']} window "
                f"{w['start_s']:.0f}-{w['end_s']:.0f} s ({w['rate']:.2f} req/s in the "
                f"{'log' if logged else 'trace'}), time scale {p.arrival.get('time_scale')}"
            )
        if logged:
            print(f"{p.name}: {log_line(p.arrival)}")
    return 0


def log_line(a: dict) -> str:
    """A request-log phase's arrival in one line: counts, lengths and a hash, never a prompt."""
    head = f"request log {a['source']} ({a['shape']}): {a['requests']} requests replayed"
    if a.get("window"):
        lo, hi = a["window"]
        head += f" of {a['requests_in_window']} in its window {lo:g}-{hi:g} s"
    head += f" ({a['requests_in_log']} in the log), by api {json.dumps(a['by_api'])}"
    parts = [head, f"time scale {a['time_scale']:g}"]
    if a.get("rate_cap"):
        parts.append(f"rate cap {a['rate_cap']:g}/s (kept {a['keep_fraction']:.0%})")
    ins = a.get("input_tokens_est") or {}
    if ins:
        parts.append(f"input tokens ~p50 {ins['p50']:.0f} p90 {ins['p90']:.0f}")
    if a.get("not_replayed"):
        fields = ", ".join(f"{k} {n}" for k, n in a["not_replayed"].items())
        parts.append(f"not replayed: {fields}")
    parts.append(f"bodies sha256 {a['bodies_sha256'][:16]}")
    return "; ".join(parts)
