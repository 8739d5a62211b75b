"""The Markdown summary: the verdict with its conditions, then the figures a reader needs first.

>>> from specpilot.analysis import analyze
>>> from specpilot.records import PilotData, PilotRecord
>>> from specpilot.report.document import to_document
>>> render_markdown(to_document(analyze(PilotData(PilotRecord("p", "empty", {}, "", "0", 0.0))))).splitlines()[0]
'# specpilot report: empty'
"""

from __future__ import annotations

from typing import Any

from specpilot.report.firstpage import tick
from specpilot.report.fmt import (
    interval,
    k_schedule_line,
    md_table,
    no_verdict_reason,
    num,
    pct,
    simulated_for,
)
from specpilot.report.sections import round_rows
from specpilot.report.sections_capacity import LEVEL_HEAD, level_rows, probe_text
from specpilot.report.sections_fleet import (
    FLEET_HEAD,
    FLEET_NOTE,
    FLEET_TITLE,
    fleet_lines,
    fleet_rows,
)
from specpilot.report.sections_load import (
    LOOKS_NOTE,
    PREDICTION_HEAD,
    PREDICTION_NOTE,
    SLO_HEAD,
    gate_rows,
    looks_lines,
    method_of,
    outcome_text,
    prediction_rows,
    quality_rows,
    slo_check_rows,
)
from specpilot.report.sections_ops import cold_rows, drill_rows, memory_rows
from specpilot.report.sections_previous import markdown as previous_markdown


def _first_page(doc: dict[str, Any]) -> list[str]:
    """The decision in plain words, the checks line and the terms it uses (footnotes)."""
    fp = doc.get("first_page") or {}
    paras = [p["text"] for p in fp.get("paragraphs") or []]
    if not paras:
        return []
    ticks = " · ".join(
        f"[{tick(c['ok'])} {c['text']}](#{c['section']})" for c in fp.get("checks") or []
    )
    terms = [f"- *{t}*: {m}" for t, m in (fp.get("terms") or {}).items()]
    return ["## The decision", "", *[x for p in paras for x in (p, "")], ticks, "", *terms, ""]


def _verdict(v: dict[str, Any], simulated: list[str]) -> list[str]:
    out = [
        f"## {v['verdict']}: {v['candidate_arm']} against {v['baseline_arm']}",
        "",
        v["summary"],
        "",
    ]
    if v.get("aa_control"):
        out += [f"A/A: {v['aa_control']}", ""]
    if v.get("planted"):
        out += [f"Planted: {v['planted']}", ""]
    if v.get("within"):
        out += [f"Second estimate: {v['within']}", ""]
    if simulated:
        out += [*[f"- {t}" for t in simulated], ""]
    if v["pilot_hypothesis"]:
        out += ["**PILOT_HYPOTHESIS**, because:", *[f"- {r}" for r in v["hypothesis_reasons"]], ""]
    rows = []
    for g in v["groups"]:
        where = ""
        if g["load_range_rps"]:
            where = f"{g['load_range_rps'][0]:.3g}-{g['load_range_rps'][1]:.3g} req/s"
        elif g["below_rps"] is not None and g.get("pays_up_to_rps") is not None:
            where = f"pays at {g['pays_up_to_rps']:.3g} req/s, not at {g['below_rps']:.3g}"
        elif g["below_rps"] is not None:
            where = f"below {g['below_rps']:.3g} req/s"
        elif g["windows"]:
            where = ", ".join(g["windows"])
        rows.append([g["task_group"], g["verdict"], where, g["bottleneck"] or ""])
    out += [
        md_table(["group", "verdict", "where", "bottleneck to fix first"], rows),
        "",
        "Conditions:",
        "",
    ]
    out += [f"- [{'x' if c['holds'] else ' '}] {c['text']}" for c in v["conditions"]]
    out += ["", "Rollback triggers (Prometheus rules in report.json and the .rules.yml file):", ""]
    out += [f"- `{t['alert']}`: {t['annotations']['summary']}" for t in v["rollback_triggers"]]
    return [*out, ""]


LOAD_HEAD = [
    "phase",
    "offered req/s",
    "arm",
    "scheduled",
    "on time (latency)",
    "good (+ quality)",
    "goodput req/s",
    "p99 E2E s",
]
PAIR_HEAD = [
    "candidate",
    "baseline",
    "phase",
    "group",
    "pairs (both ok)",
    "task time change [CI]",
    "adjusted p",
    "power",
    "outcome",
]


def _load(doc: dict[str, Any]) -> list[str]:
    pooled = [c for c in doc["load"]["cells"] if c["task_group"] == "*"]
    if not pooled:
        return []
    rows = [
        [
            c["phase"],
            num(c["offered_rate"]),
            c["arm"],
            c["scheduled"],
            pct(c["on_time_ratio"]),
            pct(c.get("good_ratio")),
            num(c["goodput_rps"]),
            "not reached" if c["e2e"]["p99"] is None else num(c["e2e"]["p99"]),
        ]
        for c in sorted(pooled, key=lambda c: (c["offered_rate"] or 0, c["arm"]))
    ]
    return ["## Load (all groups)", "", md_table(LOAD_HEAD, rows), ""]


def _slo_failed(doc: dict[str, Any]) -> list[str]:
    """The SLO's percentile conditions that failed on a cell (all of them are in report.json)."""
    checked, rows = slo_check_rows(doc), slo_check_rows(doc, failed_only=True)
    if not checked:
        return []
    head = f"## SLO percentile conditions: {len(rows)} of {len(checked)} checks failed"
    return [head, "", md_table(SLO_HEAD, rows), ""] if rows else [head, ""]


def _levels(doc: dict[str, Any]) -> list[str]:
    """The load levels and what each meant on this machine (the capacity probe)."""
    rows = level_rows(doc)
    if not rows:
        return []
    return [
        "## Load levels on this machine",
        "",
        probe_text(doc),
        "",
        md_table(LEVEL_HEAD, rows),
        "",
    ]


def _fleet(doc: dict[str, Any]) -> list[str]:
    """The servers' own figures during the phases, and the concurrency the draft costs."""
    rows = fleet_rows(doc)
    if not rows:
        return []
    out = [f"## {FLEET_TITLE}", "", FLEET_NOTE, ""]
    return [*out, md_table(FLEET_HEAD, rows), "", *[f"- {x}" for x in fleet_lines(doc)], ""]


def _pairs(doc: dict[str, Any]) -> list[str]:
    comps = [c for c in doc["comparisons"] if c["task_group"] != "*"]
    if not comps:
        return []
    rows = [
        [
            c["candidate_arm"],
            c["baseline_arm"],
            c["phase"],
            c["task_group"],
            f"{c['pairs']} ({c['both_ok']})",
            interval(c["task_rel_change"]),
            num(c.get("p_adjusted")),
            pct(c.get("power")),
            outcome_text(c),
        ]
        for c in comps
    ]
    out = ["## Paired comparisons", "", method_of(doc) + ".", "", md_table(PAIR_HEAD, rows), ""]
    predicted = prediction_rows(doc)
    if predicted:
        out += ["### Predicted and achieved", "", PREDICTION_NOTE, ""]
        out += [md_table(PREDICTION_HEAD, predicted), ""]
    if looks_lines(doc):
        out += ["### Sequential looks", "", LOOKS_NOTE, ""]
        out += [f"- {x}" for x in looks_lines(doc)] + [""]
    return out


def _cost(doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if doc["cost"]["lines"] or doc["cost"].get("ledgers"):
        out += [
            "## Cost",
            "",
            *[f"- {c['candidate_arm']}: {c['text']}" for c in doc["cost"]["lines"]],
            "",
        ]
        for x in doc["cost"].get("ledgers") or []:
            cur = x["currency"]
            out += [
                f"{x['candidate_arm']} against {x['baseline_arm']}, first year: {x['text']}",
                "",
            ]
            out += [
                md_table(
                    ["item", f"{cur} a year (+ more spent, - less)", "how"],
                    [
                        [
                            i["name"] + (" (one-off)" if i["one_off"] else ""),
                            "not priced" if i["amount"] is None else f"{i['amount']:,.0f}",
                            i["basis"],
                        ]
                        for i in x["items"]
                    ],
                ),
                "",
            ]
    return out


def _rounds(doc: dict[str, Any]) -> list[str]:
    head, rows = round_rows(doc)
    if not rows:
        return []
    note = "All phases pooled per arm and task group; per phase in report.json."
    return ["## Per-round advance and time split", "", note, "", md_table(head, rows), ""]


def _quality(doc: dict[str, Any]) -> list[str]:
    out = ["## Quality per group", ""]
    head, rows = quality_rows(doc)
    out += [md_table(head, rows) if rows else "No quality records in the pilot file.", ""]
    head, rows = gate_rows(doc)
    return out + (["### Gates", "", md_table(head, rows), ""] if rows else [])


def _cold(doc: dict[str, Any]) -> list[str]:
    head, rows = cold_rows(doc)
    return (
        ["## Cold start apart from the steady state", "", md_table(head, rows), ""] if rows else []
    )


def _memory(doc: dict[str, Any]) -> list[str]:
    head, rows = memory_rows(doc)
    return ["## Memory budget of the draft", "", md_table(head, rows), ""] if rows else []


def _drills(doc: dict[str, Any]) -> list[str]:
    head, rows = drill_rows(doc)
    if not rows:
        return []
    files = [f"- {arm}: rollback-{arm}.rules.yml" for arm in doc.get("rollback_rules") or {}]
    return ["## Rollback drills", "", md_table(head, rows), "", *files, ""]


def render_markdown(doc: dict[str, Any]) -> str:
    p = doc["pilot"]
    out = [
        f"# specpilot report: {p['name']}",
        "",
        f"Pilot `{p['pilot_id']}`, {doc['generated_by']}.",
        "",
    ]
    out += [f"Hardware: {doc['hardware']['summary']}", ""]
    out += _first_page(doc)
    if not doc["verdicts"]:
        out += ["No verdict: " + no_verdict_reason(doc), ""]
    for v in doc["verdicts"]:
        out += _verdict(v, simulated_for(doc, v))
    out += _levels(doc) + _load(doc) + _fleet(doc) + _slo_failed(doc) + _pairs(doc)
    out += previous_markdown(doc.get("previous_run"))  # a rerun's cells beside the previous
    sim = doc.get("simulation") or {}
    if sim.get("validations") or sim.get("crossovers"):
        out += [
            "## Simulation (calibrated on this pilot)",
            "",
            *[f"- {v['text']}" for v in sim.get("validations", [])],
            *[f"- {x['text']}" for x in sim.get("crossovers", [])],
            *[f"- {k_schedule_line(k)}" for k in sim.get("k_schedules", [])],
            "",
        ]
    out += _rounds(doc) + _quality(doc) + _memory(doc) + _cold(doc) + _cost(doc) + _drills(doc)
    out += [
        "The full report (every table, plot and metric definition) is report.html; "
        "every figure is in report.json.",
        "",
    ]
    return "\n".join(out)
