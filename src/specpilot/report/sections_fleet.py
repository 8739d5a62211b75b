"""The servers' own figures during the phases (``report.json`` ``capacity.fleet``): one row per
arm and load level (KV use, the queue, preemptions), the concurrency each arm was started with,
and what the draft costs of it; shown in the capacity section and in the Markdown summary.

    >>> doc = {"capacity": {"fleet": {"cells": [], "admissible": [], "draft_concurrency": []}}}
    >>> fleet_rows(doc), fleet_lines(doc)
    ([], [])
"""

from __future__ import annotations

from html import escape
from typing import Any

from specpilot.report.fmt import html_table, num, pct

Doc = dict[str, Any]

FLEET_TITLE = "The servers' own figures during the phases"
FLEET_HEAD = [
    "level",
    "arm",
    "samples (replicas)",
    "KV use peak / p90",
    "waiting peak / p90",
    "running peak / p90",
    "preemptions",
    "admissible concurrency at start",
    "not published / failed",
]
FLEET_NOTE = (
    "Scraped from each replica's own /metrics every second or two while the phases ran (the "
    "'during' snapshots in the pilot file); peak and p90 over every sample of every replica at "
    "that level; preemptions are the engine's counter over the phase edges. A figure the engine "
    "does not publish is n/a, and a replica whose scrapes failed is named: its figures are left "
    "out, never counted as zero."
)


def _pair(peak: float | None, p90: float | None, as_pct: bool = False) -> str:
    fmt = pct if as_pct else num
    return "n/a" if peak is None else f"{fmt(peak)} / {fmt(p90)}"


def _admissible_text(a: Doc | None) -> str:
    if a is None or a.get("sequences") is None:
        return "not published"
    if a["sized_by"] == "slots":
        return f"{a['sequences']:.4g} slots (a setting)"
    ctx = f" of {int(a['context_tokens']):,} tokens" if a.get("context_tokens") else ""
    return f"{a['sequences']:.4g} sequences{ctx} (KV cache)"


def fleet_rows(doc: Doc) -> list[list[str]]:
    f = (doc.get("capacity") or {}).get("fleet") or {}
    adm = {a["arm"]: a for a in f.get("admissible") or []}
    rows = []
    for c in sorted(f.get("cells") or [], key=lambda c: (c["phase"], c["arm"])):
        missing = "; ".join([*c["not_published"], *c["failed"]]) or "none"
        rows.append(
            [
                c["phase"],
                c["arm"],
                f"{c['samples']} ({c['replicas']})",
                _pair(c["kv_use_peak"], c["kv_use_p90"], as_pct=True),
                _pair(c["waiting_peak"], c["waiting_p90"]),
                _pair(c["running_peak"], c["running_p90"]),
                num(c["preemptions"]),
                _admissible_text(adm.get(c["arm"])),
                missing,
            ]
        )
    return rows


def fleet_lines(doc: Doc) -> list[str]:
    """The concurrency each candidate's draft costs, one sentence per pair."""
    f = (doc.get("capacity") or {}).get("fleet") or {}
    return [
        f"Concurrency {d['candidate_arm']}'s draft costs against {d['baseline_arm']}: {d['text']}."
        for d in f.get("draft_concurrency") or []
    ]


def fleet_html(doc: Doc) -> str:
    rows = fleet_rows(doc)
    if not rows:
        return ""
    lines = "".join(f"<p>{escape(x)}</p>" for x in fleet_lines(doc))
    return (
        f"<h3>{escape(FLEET_TITLE)}</h3><p>{escape(FLEET_NOTE)}</p>"
        + html_table(FLEET_HEAD, rows, "fleet")
        + lines
    )
