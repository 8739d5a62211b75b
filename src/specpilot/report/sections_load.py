"""The report's middle sections: verify cost, quality, load, end to end, capacity."""

from __future__ import annotations

from html import escape

from specpilot.analysis.verdicts.undecided import needs
from specpilot.report.fmt import html_table, interval, k_schedule_line, mib, num, pct, seconds
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
    table = html_table(
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
    gates = html_table(
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
    body = (
        (table if rows else "<p>No quality records in the pilot file.</p>")
        + "<h3>Gates</h3>"
        + gates
    )
    return section(
        "quality", "Per-group quality and consistency", body + figure(doc, svgs, "group_matrix")
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
    """The looks in words (``report.json`` ``sequential``); empty: no looks."""
    return list((doc.get("sequential") or {}).get("lines") or [])


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


LEVEL_HEAD = ["level", "offered req/s", "requests", "seconds", "given as", "utilization here"]


def probe_text(doc: Doc) -> str:
    """The capacity probe's result in one sentence (``report.json``'s ``capacity.probe``), or
    why there is none."""
    f = (doc.get("capacity") or {}).get("probe")
    if not f:
        return (
            "Capacity not probed: the load levels are absolute rates, and what they mean on "
            "this machine was not measured (load.capacity_probe: true measures it)."
        )
    if f.get("given"):
        return (
            f"Capacity of {f.get('arm', 'the baseline')}: {f['sustainable_rps']:.3g} req/s as "
            "given on the command line (--capacity), not measured by this pilot."
        ) + _derived_text(f)
    unloaded = ", ".join(f"{g} {v:.2f} s" for g, v in (f.get("unloaded_s") or {}).items())
    where = (
        f" (on a {f['process_of']} process with speculation switched off, as the episodes serve it)"
        if f.get("process_of")
        else ""
    )
    text = (
        f"Capacity of {f.get('arm', 'the baseline')}{where} on this machine: "
        f"{f['sustainable_rps']:.3g} req/s sustained (every group's p90 task time within "
        f"min(its SLO, {f.get('factor', 2):g}x unloaded)); {f['sync_rps']:.3g} req/s one at a "
        f"time, {f['max_rps']:.3g} req/s saturated; unloaded {unloaded}. Method: "
        f"{f['method']}; {f['probe_s'] + f.get('start_s', 0.0):.0f} s."
    )
    c = f.get("confirm") or {}
    if c.get("over_limit"):
        worst = max(c["over_limit"].values())
        sim = f.get("predicted_p90_s") or {}
        text += (
            f" Cross-check: {c['answered']} of {c['requests']} requests open-loop at "
            f"{c['rate_rps']:.3g} req/s, measured p90 at worst {worst:.2f}x its limit"
            + (
                " (simulated p90 "
                + ", ".join(f"{g} {v:.2f} s" for g, v in sim.items())
                + "; measured "
                + ", ".join(f"{g} {v:.2f} s" for g, v in (c.get("p90_s") or {}).items())
                + ")"
                if sim
                else ""
            )
            + "."
        )
    text += f" {f['note']}." if f.get("note") else ""
    return text + _derived_text(f)


def _derived_text(f: Doc) -> str:
    """What the pilot set from the probe: deadlines (``slo.unloaded_x``) and the levels' lengths
    fitted to its budget (``episodes.fit_budget``)."""
    out = ""
    if f.get("deadlines_s"):
        out += (
            " Deadlines set from it (slo.unloaded_x): "
            + ", ".join(f"{g} {v:.2f} s" for g, v in f["deadlines_s"].items())
            + "."
        )
    if f.get("fitted_s"):
        out += (
            " Levels fitted to the budget at this capacity (episodes.fit_budget): "
            + ", ".join(f"{g} {v:g} s" for g, v in f["fitted_s"].items())
            + "; a slower machine plays fewer requests in the same budget, a faster one more."
        )
    return out


def level_rows(doc: Doc) -> list[list[str]]:
    """One row a load level: its rate, and the fraction of the measured capacity it meant."""
    return [
        [
            lv["level"],
            num(lv["offered_rps"]),
            str(lv["requests"]),
            num(lv["duration_s"]),
            f"{lv['target_utilization']:g} of capacity"
            if lv["target_utilization"] is not None
            else "a rate",
            "not measured" if lv["utilization"] is None else f"{lv['utilization']:.2f}",
        ]
        for lv in (doc.get("capacity") or {}).get("levels") or []
    ]


def capacity(doc: Doc, svgs: Svgs) -> str:
    probe = f"<p>{escape(probe_text(doc))}</p>" + html_table(LEVEL_HEAD, level_rows(doc))
    caps = html_table(
        ["arm", "group", "requests per load level", "capacity req/s", "limited at"],
        [
            [
                c["arm"],
                c["task_group"],
                ", ".join(f"{p['phase']} {p['scheduled']}" for p in c["points"]),
                num(c["capacity_rps"])
                if c["capacity_rps"] is not None
                else "below the lowest load",
                c["limited_at"] or "met at every measured load",
            ]
            for c in doc["capacity"]["arms"]
        ],
    )
    cross = html_table(
        ["baseline", "candidate", "group", "crossover req/s", "summary"],
        [
            [
                x["baseline_arm"],
                x["candidate_arm"],
                x["task_group"],
                num(x["crossover_rps"]),
                x["summary"],
            ]
            for x in doc["capacity"]["crossover"]
        ],
    )
    return section(
        "capacity",
        "Capacity and crossover",
        probe + caps + cross + figure(doc, svgs, "load_curves"),
    )


def _own(c: Doc) -> str:
    """A measured quantile's own interval ("-" for a figure without one; "open" an unbounded side)."""
    lo, hi = c.get("measured_low"), c.get("measured_high")
    if c.get("measured") is None or (lo is None and hi is None and c["metric"] == "goodput"):
        return "-"
    return f"{'open' if lo is None else num(lo)} to {'open' if hi is None else num(hi)}"


def simulation(doc: Doc, svgs: Svgs) -> str:
    sim = doc.get("simulation") or {}
    lines = "".join(f"<p>{escape(v['text'])}</p>" for v in sim.get("validations", []))
    rows = [
        [
            v["arm"],
            c["phase"],
            c["metric"],
            num(c["measured"]),
            _own(c),
            num(c["predicted"]),
            "n/a" if c["rel_error"] is None else f"{c['rel_error']:+.0%}",
            "gate" if c["gated"] else "",
        ]
        for v in sim.get("validations", [])
        for c in v["checks"]
    ]
    table = (
        html_table(
            ["arm", "phase", "metric", "measured", "its 95% interval", "simulated", "error", ""],
            rows,
        )
        if rows
        else ""
    )
    cross = "".join(f"<p><b>{escape(x['text'])}</b></p>" for x in sim.get("crossovers", []))
    cross += "".join(
        f"<p>{escape(k_schedule_line(k))} ({escape('; '.join(k['notes'][1:]))})</p>"
        for k in sim.get("k_schedules", [])
    )
    notes = "".join(f"<p>{escape(n)}</p>" for n in sim.get("notes", []))
    head = (
        "<p>Simulated (specpilot simulate): each arm calibrated on its first measured phase and "
        "checked on the others; only a validated simulation (p50 and p99 E2E within 15%) gives "
        "a crossover.</p>"
    )
    return section(
        "simulation", "Simulation (calibrated on this pilot)", head + lines + cross + table + notes
    )
