"""The report's middle sections: verify cost, quality, load, end to end (capacity and the
simulation follow in ``sections_capacity``)."""

from __future__ import annotations

from html import escape
from typing import Any

from specpilot.analysis.verdicts.undecided import needs
from specpilot.report.fmt import html_table, interval, mib, num, pct, seconds
from specpilot.report.sections import Doc, Svgs, figure, section


def verify_cost(doc: Doc, svgs: Svgs) -> str:
    rows = [
        [
            c["arm"],
            c["source"],
            c["batch_size"],
            c["dtype"] or "",
            c["reference"],
            ", ".join(f"v({p['tokens']}) = {num(p['ratio'])}" for p in c["points"]),
        ]
        for c in doc["verify_cost"]["curves"]
    ]
    table = html_table(["arm", "source", "batch", "dtype", "1-token reference", "curve"], rows)
    note = "<p>Whether speculation can pay is decided here: verifying k+1 tokens must cost little more than one.</p>"
    return section(
        "verify-cost", "Verify-cost curve", note + table + figure(doc, svgs, "verify_cost")
    )


def quality(doc: Doc, svgs: Svgs) -> str:
    cells = _quality_cells(doc)
    body = (
        (cells if doc["quality"]["cells"] else "<p>No quality records in the pilot file.</p>")
        + "<h3>Gates</h3>"
        + _quality_gates(doc)
    )
    return section(
        "quality", "Per-group quality and consistency", body + figure(doc, svgs, "group_matrix")
    )


def _quality_cells(doc: Doc) -> str:
    return html_table(*quality_rows(doc))


def _quality_gates(doc: Doc) -> str:
    return html_table(*gate_rows(doc))


def quality_rows(doc: Doc) -> tuple[list[str], list[list[Any]]]:
    """One row an arm and task group: its checks passed, greedy consistency and defects."""
    rows = [
        [
            c["arm"],
            c["task_group"],
            f"{c['key_passed']}/{c['key_checks']}",
            pct(c["key_pass_rate"]),
            f"{c['minor_passed']}/{c['minor_checks']}",
            f"{c['identical']}/{c['consistency_prompts']}",
            c["defects"],
            c["near_tie_flips"],
            "; ".join(f"{r} (x{n})" for r, n in c["top_reasons"]),
        ]
        for c in doc["quality"]["cells"]
    ]
    return (
        [
            "arm",
            "group",
            "key checks",
            "key pass rate",
            "minor checks",
            "greedy identical",
            "defects",
            "near-tie flips",
            "top failure reasons",
        ],
        rows,
    )


def gate_rows(doc: Doc) -> tuple[list[str], list[list[Any]]]:
    """One row a candidate and task group: each quality gate's state and why."""
    return (
        [
            "candidate",
            "group",
            "key gate",
            "consistency gate",
            "distribution gate",
            "compat gate",
            "why",
            "decided by",
            "not conclusive",
        ],
        [
            [
                g["arm"],
                g["task_group"],
                g["key_gate"],
                g["consistency_gate"],
                g.get("distribution_gate", "no_data"),
                g.get("compat_gate", "no_data"),
                "; ".join(g["reasons"]),
                "; ".join(g.get("carried", [])),
                "; ".join(g.get("notes", [])),
            ]
            for g in doc["quality"]["gates"]
        ],
    )


def _q(q: dict | None) -> str:
    if not q:
        return "n/a"
    vals = " / ".join(
        "not reached" if q[k] is None else seconds(q[k]) for k in ("p50", "p90", "p99")
    )
    return f"{vals} (n={q['n']})"


def _load_table(doc: Doc) -> str:
    rows = []
    for c in sorted(
        doc["load"]["cells"],
        key=lambda c: (c["phase"], c["task_group"] != "*", c["task_group"], c["arm"]),
    ):
        r = c["ratios"]
        fails = ", ".join(f"{k} {pct(v)}" for k, v in r.items() if k != "ok" and v)
        rows.append(
            [
                c["phase"],
                num(c["offered_rate"]),
                c["task_group"],
                c["arm"],
                c["scheduled"],
                _q(c["ttft"]),
                _q(c["tpot"]),
                _q(c["itl_token"]),
                _q(c["e2e"]),
                num(c["goodput_rps"]),
                pct(c["on_time_ratio"]),
                pct(c.get("good_ratio")),
                fails or "none",
                num(c["tokens_per_chunk"]),
                mib(c["peak_rss_bytes"]),
            ]
        )
    return html_table(
        [
            "phase",
            "offered req/s",
            "group",
            "arm",
            "scheduled",
            "TTFT p50/p90/p99",
            "TPOT p50/p90/p99",
            "ITL p50/p90/p99",
            "E2E p50/p90/p99",
            "goodput req/s",
            "on time (latency)",
            "good (+ quality)",
            "failure ratios",
            "tokens/chunk",
            "peak RSS",
        ],
        rows,
    )


SLO_HEAD = ["phase", "group", "arm", "condition", "observed", "over", "result"]
SLO_NOTE = (
    "Each percentile condition of a group's SLO, checked on each arm's cell at each load level: "
    "the cell's own percentile in the table above (a request that never finished counts as "
    "never finishing, so a percentile among them is not reached and fails). Per request, on "
    "time stays TTFT and deadline."
)


def slo_check_rows(doc: Doc, failed_only: bool = False) -> list[list[str]]:
    """One row per percentile condition checked on a cell (only the failed ones if asked)."""
    rows = []
    for c in sorted(doc["load"]["cells"], key=lambda c: (c["phase"], c["task_group"], c["arm"])):
        for k in c.get("slo_checks", []):
            if failed_only and k["pass"] is not False:
                continue
            seen = "not reached" if k["observed"] is None else f"{k['observed']:.4g}"
            result = {True: "pass", False: "FAIL", None: "not evaluated"}[k["pass"]]
            rows.append(
                [
                    c["phase"],
                    c["task_group"],
                    c["arm"],
                    f"p{k['percentile']} {k['metric']} <= {k['threshold']:g}",
                    seen if k["n"] else "no data",
                    str(k["n"]),
                    result,
                ]
            )
    return rows


def _slo_checks(doc: Doc) -> str:
    rows = slo_check_rows(doc)
    if not rows:
        return ""
    bad = sum(r[-1] == "FAIL" for r in rows)
    head = (
        f"<h3>SLO percentile conditions</h3><p>{escape(SLO_NOTE)} {bad} of {len(rows)} failed.</p>"
    )
    return head + html_table(SLO_HEAD, rows)


def _comparison_table(doc: Doc) -> str:
    return html_table(
        [
            "baseline",
            "candidate",
            "phase",
            "group",
            "pairs",
            "task time change [CI]",
            "E2E change [CI]",
            "TTFT change [CI]",
            "on-time difference [CI]",
            "adjusted p",
            "power at min. effect",
            "outcome",
        ],
        [
            [
                c["baseline_arm"],
                c["candidate_arm"],
                c["phase"],
                c["task_group"],
                f"{c['pairs']} ({c['both_ok']} both ok"
                + (
                    f", {c['clusters']} {c.get('unit') or 'episode'}s)"
                    if c.get("clusters") is not None
                    else ")"
                ),
                interval(c["task_rel_change"]),
                interval(c["e2e_rel_change"]),
                interval(c["ttft_rel_change"]),
                interval(c["on_time_diff"]),
                num(c.get("p_adjusted")),
                pct(c.get("power")),
                outcome_text(c),
            ]
            for c in doc["comparisons"]
        ],
    )


def outcome_text(c: Doc) -> str:
    """A comparison's outcome; an insufficient one with the pairs a decision would need."""
    if c["outcome"] == "insufficient" and c.get("clusters"):
        why = needs(
            c.get("clusters"),
            c.get("episodes_needed"),
            c.get("processes_needed"),
            estimated=c.get("df") is not None,
            because=c.get("undecided_because"),
        )
        return f"insufficient ({why})"
    return str(c["outcome"])


def method_of(doc: Doc) -> str:
    """How the comparisons' intervals were computed (one method for every pair of arms)."""
    return str(doc["comparisons"][0]["method"]) if doc["comparisons"] else ""


PREDICTION_HEAD = [
    "arm",
    "level",
    "predicted MDE",
    "achieved MDE",
    "predicted / achieved",
    "predicted interval (median; 1 in 5 wider than)",
    "achieved interval",
    "noise the planner used",
]
PREDICTION_NOTE = (
    "What the planner (the numbers `--dry-run` prints) predicted before this pilot ran, beside "
    "what each pooled cell achieved: the smallest effect found with 80% power (achieved: at the "
    "noise this cell measured itself) and the deciding interval's half-width. A ratio outside "
    "1/1.5 to 1.5 means the noise the planner used did not carry to this pilot; the next "
    "--dry-run on this machine reads this pilot's."
)


def prediction_rows(doc: Doc) -> list[list[str]]:
    """The predicted-and-achieved table's rows (``report.json`` ``prediction``)."""
    return [
        [
            r["arm"],
            r["phase"],
            pct(r["predicted_mde"], 0),
            pct(r["achieved_mde"], 0),
            "n/a"
            if r["ratio"] is None
            else f"{r['ratio']:.2f}" + ("" if r["within"] else " (off by more than 1.5x)"),
            f"+-{pct(r.get('predicted_half_width'), 0)} (+-{pct(r.get('predicted_half_width_80'), 0)})",
            f"+-{pct(r['achieved_half_width'], 0)}",
            str(r.get("source") or ""),
        ]
        for r in doc.get("prediction") or []
    ]


LOOKS_NOTE = (
    "The pilot looked at its cells after planned numbers of episodes; a load level whose pooled "
    "cells were all decided got no more, and a budget drops the last episodes first. Each look "
    "tests at its share of the error rate (O'Brien-Fleming-type spending, Bonferroni over the "
    "looks), so every interval above is at the last look's level, not 95%."
)


def looks_lines(doc: Doc) -> list[str]:
    """The looks in words (``report.json`` ``sequential``), then the analysis settings they
    changed (``analysis_settings``); empty: no looks."""
    looks = list((doc.get("sequential") or {}).get("lines") or [])
    return looks + [f"Tested with {x}" for x in doc.get("analysis_settings") or []] if looks else []


def load(doc: Doc, svgs: Svgs) -> str:
    table, comps = _load_table(doc), _comparison_table(doc)
    method = method_of(doc)
    rows = prediction_rows(doc)
    predicted = (
        f"<h3>Predicted and achieved</h3><p>{escape(PREDICTION_NOTE)}</p>"
        + html_table(PREDICTION_HEAD, rows, "prediction")
        if rows
        else ""
    )
    body = (
        "<p>Every scheduled steady-state request is in every denominator; n is given with each figure.</p>"
        + table
        + _slo_checks(doc)
        + f"<h3>Paired comparisons</h3><p>Method: {escape(method)}.</p>"
        + comps
        + predicted
        + (
            f"<h3>Sequential looks</h3><p>{escape(LOOKS_NOTE)}</p><ul>"
            + "".join(f"<li>{escape(x)}</li>" for x in looks_lines(doc))
            + "</ul>"
            if looks_lines(doc)
            else ""
        )
        + figure(doc, svgs, "latency_cdf")
    )
    return section("load", "Peak and burst behaviour", body)


def _with_ci(x: float | None, ci: list[float | None] | None) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return num(x)
    return f"{num(x)} [{num(ci[0])}, {num(ci[1])}]"


def end_to_end(doc: Doc, svgs: Svgs) -> str:
    e = doc["end_to_end"]
    recs = html_table(
        ["group", "tasks", "recommendation", "bottleneck", "why"],
        [
            [
                r["task_group"],
                r["numbers"].get("tasks", ""),
                r["action"],
                r["bottleneck"] or "",
                r["reason"],
            ]
            for r in e["recommendations"]
        ],
    )
    checks = html_table(
        [
            "candidate",
            "group",
            "phase",
            "decode share",
            "decode speed-up [CI]",
            "projected end-to-end speed-up (Amdahl) [CI]",
            "measured end-to-end speed-up [CI]",
            "agreement",
        ],
        [
            [
                c["candidate_arm"],
                c["task_group"],
                c["phase"],
                pct(c["decode_share"]),
                _with_ci(c["decode_speedup"], c.get("decode_speedup_ci")),
                _with_ci(c["projected_task_speedup"], c.get("projected_task_ci")),
                _with_ci(c["measured_task_speedup"], c["measured_task_ci"]),
                c.get("agreement", ""),
            ]
            for c in e["amdahl_checks"]
        ],
    )
    body = (
        recs
        + "<h3>Amdahl projection next to the measured change</h3>"
        + checks
        + figure(doc, svgs, "stage_decomposition")
    )
    return section("end-to-end", "End to end: stages and decode share", body)
