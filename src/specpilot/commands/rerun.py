"""``specpilot rerun RUN_DIR [--set arms.NAME.options.FIELD=VALUE ...] --out NEW_DIR``: measure
a finished pilot again after an upgrade, and compare.

Rebuilds the pilot from the config stored in ``RUN_DIR/pilot.duckdb``, changed only where
``--set`` says, and runs it on the same schedule (the same requests, seed, capacity figures and
deadlines: nothing is probed again). The new report has a section "Compared with the previous
run": each cell's outcome and interval before and now, and what changed in the frozen settings
the engines report (model hashes, engine version). ``specpilot report NEW_DIR/pilot.duckdb``
rebuilds it from the new file alone.

A rerun changes one thing: one arm's switch (its strategy options, on that arm only), or an
upgrade (settings that are not the strategy, each set alike on every arm of its engine:
``arms.*.options.FIELD``), or nothing (an engine upgraded outside specpilot). VALUE is read as
YAML. ``--dry-run`` checks all of it and prints what would change; running the same command
again resumes an interrupted rerun.

    specpilot rerun runs/before --out runs/after                       # the same config again
    specpilot rerun runs/before --set 'arms.*.options.target=new.gguf' --out runs/new-target
    specpilot rerun runs/before --set arms.speculative.options.k=4 --out runs/k4 --dry-run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rerun",
        help="run a finished pilot again on its schedule (after an upgrade) and compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", metavar="RUN_DIR", help="the previous run's folder (or its pilot file)")
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="arms.NAME.options.FIELD=VALUE",
        help="change one engine option of the stored config (repeatable; NAME '*': every arm "
        "whose engine has FIELD)",
    )
    p.add_argument("--out", required=True, metavar="NEW_DIR", help="the new run's folder")
    p.add_argument(
        "--base-dir",
        default=None,
        metavar="DIR",
        help="where the stored workload's relative paths start (the original pilot file's "
        "folder), for a pilot file that does not record it",
    )
    p.add_argument("--dry-run", action="store_true", help="check and say what changes; run nothing")
    p.add_argument("--quiet", action="store_true", help="no live progress")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specpilot.pilot.run.rerun import Rerun

    if args.dry_run:
        plan = Rerun(args.run, args.settings, args.out, base_dir=args.base_dir).plan()
        prev = plan.previous.record
        print(f"rerun of {prev.pilot_id} ({plan.previous.path}) into {args.out}")
        print(f"  changes: {plan.change}")
        print(
            f"  schedule: the previous run's, {len(plan.schedule)} requests, seed "
            f"{plan.schedule.seed} (rebuilt and checked request by request)"
        )
        print(f"  workload files from: {plan.base_dir}")
        return 0
    import signal

    from specpilot.pilot.eta.progress import PilotProgress
    from specpilot.report.sections_previous import markdown

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as `specpilot pilot` does
    progress = PilotProgress(quiet=True if args.quiet else None)
    with progress:
        rr = Rerun(args.run, args.settings, args.out, base_dir=args.base_dir, progress=progress)
        result = rr.run()
    print(result.summary)
    doc = (
        json.loads(Path(result.files["json"]).read_text("utf-8")) if "json" in result.files else {}
    )
    lines = markdown(doc.get("previous_run"), heading="")
    print("\n".join(line.lstrip() for line in lines).rstrip())
    for kind, f in sorted(result.files.items()):
        print(f"{kind:>6}: {f}")
    return 0 if not result.failed_arms else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(1)
