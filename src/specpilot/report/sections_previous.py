"""The section "Compared with the previous run" of a rerun's report (``specpilot rerun``) and
the table ``specpilot diff`` prints, from ``report.compare``'s dict, in HTML and in Markdown.

    >>> from specpilot.report.compare import compare
    >>> cell = {"candidate": "s", "baseline": "b", "phase": "peak", "group": "*",
    ...         "outcome": "faster", "estimate": -0.2, "low": -0.3, "high": -0.1}
    >>> cmp = compare({"cells": [cell]}, {"cells": [{**cell, "outcome": "insufficient"}]})
    >>> print(markdown(cmp)[5].splitlines()[-1])
    | s | b | peak | * | faster | -20.0% [-30.0%, -10.0%] | insufficient | -20.0% [-30.0%, -10.0%] | changed |
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from html import escape
from typing import Any

from specpilot.report.fmt import html_table, md_table
from specpilot.report.sections import section

Doc = Mapping[str, Any]
TITLE = "Compared with the previous run"
CELL_HEAD = [
    "candidate",
    "compared with",
    "level",
    "group",
    "outcome before",
    "task time change before [CI]",
    "outcome now",
    "task time change now [CI]",
    "outcome",
]
FROZEN_HEAD = ["arm", "frozen setting", "before", "now"]
CONFIG_HEAD = ["setting", "before", "now"]
NOT_A_RERUN = (
    "This pilot is not a rerun. `specpilot rerun RUN_DIR --out NEW_DIR` measures a finished "
    "pilot again on the same schedule (after a target or engine upgrade, or with one arm's "
    "switch changed by --set) and sets each cell beside the previous run's here; `specpilot "
    "diff OLD/report.json NEW/report.json` prints the same table for any two runs of one "
    "schedule."
)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def _interval(c: Doc | None) -> str:
    if c is None or c.get("estimate") is None:
        return "n/a"
    return f"{_pct(c['estimate'])} [{_pct(c.get('low'))}, {_pct(c.get('high'))}]"


def _outcome(c: Doc | None) -> str:
    return "not in this run" if c is None else str(c["outcome"])


def _value(v: Any) -> str:
    if v is None:
        return "n/a"
    text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def cell_rows(cmp: Doc) -> list[list[str]]:
    """One row per cell: its outcome and task-time interval before and now."""
    rows = []
    for c in cmp["cells"]:
        same = c["same_outcome"]
        rows.append(
            [
                c["candidate"],
                c["baseline"],
                c["phase"],
                c["group"],
                _outcome(c["before"]),
                _interval(c["before"]),
                _outcome(c["after"]),
                _interval(c["after"]),
                "n/a" if same is None else ("same" if same else "changed"),
            ]
        )
    return rows


def _frozen_rows(cmp: Doc) -> list[list[str]]:
    return [
        [f["arm"], f["setting"], _value(f["before"]), _value(f["after"])]
        for f in cmp["frozen_changes"]
    ]


def _config_rows(cmp: Doc) -> list[list[str]]:
    return [[c["field"], _value(c["before"]), _value(c["after"])] for c in cmp["config_changes"]]


def _when(t: float | None) -> str:
    return "" if t is None else time.strftime(" of %Y-%m-%d %H:%M", time.localtime(t))


def head_lines(cmp: Doc) -> list[str]:
    """Which two runs, on which schedule, and what was changed between them."""
    p, c, s = cmp["previous"], cmp["current"], cmp["schedule"]
    sched = {
        True: f"the same schedule ({s['requests']} requests, seed {s['seed']}, sha256 "
        f"{(s['sha256'] or '')[:12]})",
        False: "DIFFERENT schedules: the cells are not comparable",
        None: "a schedule one of the reports does not name (made before reports named it)",
    }[s["same"]]
    out = [
        f"Previous run {p['pilot_id']}{_when(p.get('created_unix'))}; this run "
        f"{c['pilot_id']}{_when(c.get('created_unix'))}; {sched}.",
        cmp["text"] + ".",
    ]
    if cmp.get("change"):
        out.append(f"Changed for this run: {cmp['change']}.")
    if cmp.get("given"):
        out.append("Given: " + " ".join(f"--set {g}" for g in cmp["given"]) + ".")
    return out


def markdown(cmp: Doc | None, heading: str = "##") -> list[str]:
    """The section's Markdown lines (``cmp`` None: the pilot is not a rerun: nothing)."""
    if cmp is None:
        return []
    out = [f"{heading} {TITLE}", "", *head_lines(cmp), ""]
    out += [md_table(CELL_HEAD, cell_rows(cmp)), ""]
    frozen = _frozen_rows(cmp)
    n = cmp["frozen_unchanged"]
    if frozen:
        out += [f"Frozen settings that changed ({n} others compared stayed the same):", ""]
        out += [md_table(FROZEN_HEAD, frozen), ""]
    else:
        out += [f"No frozen setting changed ({n} compared, every arm's reported ones).", ""]
    config = _config_rows(cmp)
    if config:
        out += ["Config settings that changed:", "", md_table(CONFIG_HEAD, config), ""]
    return out


def html(doc: Doc, svgs: Mapping[str, str | None]) -> str:
    """The HTML section: the same tables (a pilot that is not a rerun says how to make one)."""
    cmp = doc.get("previous_run")
    if not cmp:
        return section("previous-run", TITLE, f'<p class="nodata">{escape(NOT_A_RERUN)}</p>')
    body = "".join(f"<p>{escape(line)}</p>" for line in head_lines(cmp))
    body += html_table(CELL_HEAD, cell_rows(cmp))
    frozen = _frozen_rows(cmp)
    n = cmp["frozen_unchanged"]
    if frozen:
        body += f"<h3>Frozen settings that changed ({n} others compared stayed the same)</h3>"
        body += html_table(FROZEN_HEAD, frozen)
    else:
        body += f"<p>No frozen setting changed ({n} compared, every arm's reported ones).</p>"
    config = _config_rows(cmp)
    if config:
        body += "<h3>Config settings that changed</h3>" + html_table(CONFIG_HEAD, config)
    return section("previous-run", TITLE, body)
