"""``specpilot diff OLD NEW``: two runs of one schedule side by side.

Prints the table a rerun's report holds ("Compared with the previous run"): each cell's outcome
and task-time interval in OLD and in NEW, the frozen settings the engines reported that changed
(model hashes, engine version, the frozen manifest's hash) and the config settings that
changed. OLD and NEW are each a ``report.json``, a run folder (its ``report.json``) or a pilot
file (the ``report.json`` beside it). Two runs of different schedules are refused, naming the
first request where they part: their cells measured different traffic.

A report written before reports named their schedule is matched through the ``pilot.duckdb``
beside it, whose stored schedule names it.

    specpilot diff runs/before/report.json runs/after/report.json
    specpilot diff runs/before runs/after --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specpilot.errors import InputFileError

_PILOT = "pilot.duckdb"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff",
        help="compare two runs of one schedule cell by cell (outcomes, intervals, frozen settings)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("old", metavar="OLD", help="report.json, run folder or pilot file")
    p.add_argument("new", metavar="NEW", help="report.json, run folder or pilot file")
    p.add_argument("--json", action="store_true", help="the comparison as JSON")
    p.set_defaults(func=run)


def _report_path(arg: str) -> Path:
    p = Path(arg)
    f = (
        p / "report.json"
        if p.is_dir()
        else p.with_name("report.json")
        if p.suffix == ".duckdb"
        else p
    )
    if f.is_file():
        return f
    raise InputFileError(
        f"diff: {arg}: no report.json there ({f})",
        fix="give a report.json, the folder `specpilot pilot --out` wrote, or write the report "
        "first: specpilot report PILOT.duckdb --out DIR",
    )


def load(arg: str) -> dict[str, Any]:
    """A report document whose ``pilot.schedule`` names its schedule (from the pilot file beside
    an older report that did not name it)."""
    f = _report_path(arg)
    try:
        doc = json.loads(f.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFileError(f"diff: {f}: not a report.json ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("pilot"), dict):
        raise InputFileError(f"diff: {f}: not a specpilot report.json (no pilot section)")
    if doc["pilot"].get("schedule") is None:
        doc["pilot"]["schedule"] = _stored_schedule(f, doc["pilot"].get("pilot_id"))
    return doc


def _stored_schedule(report: Path, pilot_id: str | None) -> dict[str, Any]:
    from specpilot.report.compare import schedule_fingerprint
    from specpilot.store import Store

    beside = report.with_name(_PILOT)
    if beside.is_file():
        with Store(beside, read_only=True) as st:
            recs = st.records("pilots")
        if recs and recs[0].pilot_id == pilot_id:
            fp = schedule_fingerprint(recs[0].schedule)
            if fp is not None:
                return fp
    raise InputFileError(
        f"diff: {report} does not name its schedule (a report of an older specpilot), and no "
        f"{_PILOT} of the same pilot lies beside it",
        fix="give the run's folder (report.json beside pilot.duckdb), or write the report again "
        "from its pilot file: specpilot report PILOT.duckdb --out DIR",
    )


def run(args: argparse.Namespace) -> int:
    from specpilot.report.compare import compare, first_difference, summary_of
    from specpilot.report.sections_previous import markdown

    old, new = load(args.old), load(args.new)
    said = first_difference(old["pilot"]["schedule"], new["pilot"]["schedule"])
    if said is not None:
        raise InputFileError(
            f"diff: {args.old} and {args.new} replayed different schedules, so their cells "
            f"measured different traffic: {said} (first: {args.old}, second: {args.new})",
            fix="diff compares two runs of one schedule (a pilot and its `specpilot rerun`); to "
            "compare these, read their reports side by side",
        )
    cmp = compare(summary_of(old), summary_of(new))
    if args.json:
        print(json.dumps(cmp, indent=1, default=str))
        return 0
    print("\n".join(line.lstrip() for line in markdown(cmp, heading="")).rstrip())
    return 0
