"""The report's capacity sections: what the probe measured and the load levels it set, each
arm's capacity and the crossover, and the simulation calibrated on the pilot."""

from __future__ import annotations

from html import escape

from specpilot.report.fmt import html_table, k_schedule_line, num
from specpilot.report.sections import Doc, Svgs, figure, section
from specpilot.report.sections_fleet import fleet_html

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
        probe + caps + cross + fleet_html(doc) + figure(doc, svgs, "load_curves"),
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
