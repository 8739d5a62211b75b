"""The HTML report's sections, each from the JSON document (R9 order: verdict first).

Every function takes the document (and the rendered plots) and returns one ``<section>``.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from specpilot.report.firstpage import tick
from specpilot.report.fmt import (
    Markup,
    html_table,
    mib,
    ms,
    no_verdict_reason,
    num,
    pct,
    seconds,
    signed_pct,
    simulated_for,
)

Doc = dict[str, Any]
Svgs = dict[str, str | None]


def section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{escape(title)}</h2>{body}</section>'


def figure(doc: Doc, svgs: Svgs, fid: str) -> str:
    f = next(x for x in doc["figures"] if x["id"] == fid)
    svg = svgs.get(fid)
    inner = svg if svg else '<p class="nodata">No data for this plot in the pilot file.</p>'
    state = "rendered" if svg else "empty"
    return (
        f'<figure class="plot" id="plot-{fid}" data-plot="{fid}" data-state="{state}">{inner}'
        f"<figcaption><b>{escape(f['title'])}.</b> {escape(f['caption'])}</figcaption></figure>"
    )


def _verdict_one(v: Doc, simulated: list[str]) -> str:
    hyp = ""
    if v["pilot_hypothesis"]:
        items = "".join(f"<li>{escape(r)}</li>" for r in v["hypothesis_reasons"])
        hyp = f'<div class="hypothesis"><b>PILOT_HYPOTHESIS</b>: not yet a decision, because<ul>{items}</ul></div>'
    groups = html_table(
        ["group", "verdict", "where", "bottleneck to fix first"],
        [
            [
                "all groups pooled" if g["task_group"] == "*" else g["task_group"],
                g["verdict"],
                _where(g),
                g["bottleneck"] or "",
            ]
            for g in v["groups"]
        ],
        "groups",
    )
    conds = html_table(
        ["holds", "condition"],
        [
            [
                Markup(
                    '<span class="ok">yes</span>' if c["holds"] else '<span class="bad">no</span>'
                ),
                c["text"],
            ]
            for c in v["conditions"]
        ],
        "conditions",
    )
    trig = "".join(
        f"<li><code>{escape(t['alert'])}</code>: {escape(t['annotations']['summary'])}</li>"
        for t in v["rollback_triggers"]
    )
    return (
        f'<div class="verdict-block verdict-{v["verdict"]}" data-candidate="{escape(v["candidate_arm"])}">'
        f'<p class="verdict-label">{v["verdict"]}</p>'
        f'<p class="summary">{escape(v["candidate_arm"])} against {escape(v["baseline_arm"])}: {escape(v["summary"])}</p>'
        + (
            f'<p class="aa-control">A/A: {escape(v["aa_control"])}</p>'
            if v.get("aa_control")
            else ""
        )
        + (f'<p class="planted">Planted: {escape(v["planted"])}</p>' if v.get("planted") else "")
        + (
            f'<p class="within">Second estimate: {escape(v["within"])}</p>'
            if v.get("within")
            else ""
        )
        + "".join(f'<p class="simulated">{escape(t)}</p>' for t in simulated)
        + f"{hyp}<h3>Per task group</h3>{groups}<h3>Conditions</h3>{conds}"
        f"<h3>Rollback triggers{' (if it were switched on anyway)' if v['verdict'] in ('DO_NOT_ADOPT', 'UNDECIDED') else ''}</h3>"
        f"<ul>{trig}</ul></div>"
    )


def _where(g: Doc) -> str:
    if g["load_range_rps"]:
        lo, hi = g["load_range_rps"]
        return (
            f"{lo:.3g}-{hi:.3g} req/s (measured range)"
            if lo != hi
            else f"{lo:.3g} req/s (the one measured level)"
        )
    if g["below_rps"] is not None and g.get("pays_up_to_rps") is not None:
        return (
            f"pays at {g['pays_up_to_rps']:.3g} req/s, not at {g['below_rps']:.3g} "
            "(not measured between)"
        )
    if g["below_rps"] is not None:
        return f"below {g['below_rps']:.3g} req/s"
    if g["windows"]:
        return "in " + ", ".join(g["windows"])
    return ""


def verdict(doc: Doc, svgs: Svgs) -> str:
    if not doc["verdicts"]:
        body = '<div class="verdict-block verdict-NONE"><p class="verdict-label">NO VERDICT</p>'
        body += f"<p>{escape(no_verdict_reason(doc))}</p></div>"
    else:
        body = "".join(_verdict_one(v, simulated_for(doc, v)) for v in doc["verdicts"])
    if any(f["id"] == "forest" for f in doc["figures"]):  # the picture first, the words under it
        body = figure(doc, svgs, "forest") + body
    body = _first_page(doc) + body  # the decision in plain words above the picture
    curve = _verify_headline(doc)
    body += f'<p class="hardware-line">Hardware: {escape(doc["hardware"]["summary"])}{curve}</p>'
    return section("verdict", "Verdict", body)


def _first_page(doc: Doc) -> str:
    """The decision in plain words and the checks line (``report.firstpage``); the terms it
    uses are defined where they first appear (a tooltip)."""
    fp = doc.get("first_page") or {}
    paras = "".join(
        f'<p class="decision decision-{escape(p["kind"])}">{_terms(p["text"], fp)}</p>'
        for p in fp.get("paragraphs") or []
    )
    ticks = " · ".join(
        f'<a href="#{escape(c["section"])}">{tick(c["ok"])} {_terms(c["text"], fp)}</a>'
        for c in fp.get("checks") or []
    )
    return (
        f'<div class="first-page">{paras}<p class="checks">{ticks}</p></div>'
        if paras or ticks
        else ""
    )


def _terms(text: str, fp: Doc) -> str:
    """``text`` escaped, each defined term's first use (a whole word, not inside a flag such
    as ``--episodes``) with its definition as a tooltip."""
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text)))
    for term, meaning in (fp.get("terms") or {}).items():
        m = re.search(rf"(?<![\w-]){re.escape(escape(term))}s?(?![\w-])", out)
        if m:
            abbr = f'<abbr title="{escape(meaning)}">{m.group(0)}</abbr>'
            out = out[: m.start()] + abbr + out[m.end() :]
    return out


def _verify_headline(doc: Doc) -> str:
    parts = []
    for c in doc["verify_cost"]["curves"]:
        pts = [
            f"{p['tokens']}: {p['ratio']:.2f}x"
            for p in c["points"]
            if p["ratio"] is not None and p["tokens"] > 1
        ]
        if pts:
            parts.append(f"{c['arm']} ({c['source']}, batch {c['batch_size']}) {', '.join(pts)}")
    return "; verify cost v(n) " + "; ".join(parts) if parts else ""


def load_range(doc: Doc, svgs: Svgs) -> str:
    rows = [
        [
            p["arm"],
            p["phase"],
            num(p["offered_rps"]),
            p["scheduled"],
            seconds(p["planned_s"]),
            seconds(p["actual_s"]),
            p["status"],
        ]
        for p in doc["load_range"]["phases"]
    ]
    return section(
        "load-range",
        "Load range",
        html_table(
            ["arm", "phase", "offered req/s", "scheduled", "planned", "actual", "status"], rows
        ),
    )


def hardware(doc: Doc, svgs: Svgs) -> str:
    h = doc["hardware"]
    rows = [
        ["CPU", h.get("cpu_model") or "not recorded"],
        [
            "flags that decide verify cost",
            ", ".join(
                f
                for f in h.get("cpu_flags", [])
                if f in ("avx2", "avx512f", "avx512_bf16", "amx_tile")
            )
            or "none recorded",
        ],
        [
            "cores (logical / usable)",
            f"{num(h.get('cpu_logical_cores'))} / {num(h.get('cpu_affinity'))}",
        ],
        ["memory", mib(h.get("memory_bytes"))],
        ["GPUs", ", ".join(str(g.get("name")) for g in h.get("gpus", [])) or "none"],
        ["OS / Python", f"{h.get('os', '')} / {h.get('python', '')}"],
    ]
    return section("hardware", "Hardware", html_table(["", ""], rows))


def round_rows(doc: Doc) -> tuple[list[str], list[list[Any]]]:
    """Per arm and task group, all phases pooled: the rounds' advance and time split (the
    HTML's and the Markdown's one table)."""
    rows = []
    for r in doc["rounds"]["pooled"]:
        sh = r["shares"]
        rows.append(
            [
                r["arm"],
                r["task_group"],
                r["requests"],
                r["rounds"],
                num(r["k"]),
                pct(r["acceptance_rate"]),
                num(r["mean_acceptance_length"]),
                pct(r["per_request_mean_acceptance_rate"]),
                ms(r["cost_per_token_s"]),
                f"{pct(sh['draft'], 0)} / {pct(sh['verify'], 0)} / {pct(sh['overhead'], 0)}",
                num(r["decode_speedup"]) + ("x" if r["decode_speedup"] else ""),
            ]
        )
    return (
        [
            "arm",
            "group",
            "requests",
            "rounds",
            "k",
            "acceptance rate",
            "mean acceptance length",
            "per-request mean acceptance",
            "decode cost/token",
            "draft / verify / overhead",
            "decode speed-up",
        ],
        rows,
    )


def _round_table(doc: Doc) -> str:
    return html_table(*round_rows(doc))


def _leviathan_table(doc: Doc) -> str:
    return html_table(
        [
            "arm",
            "group",
            "phase",
            "k",
            "alpha",
            "E[c]",
            "measured tokens/round",
            "v(k+1)",
            "bound (v = 1)",
            "decode speed-up bound",
            "measured decode speed-up",
            "gap factors",
        ],
        [
            [
                g["arm"],
                g["task_group"],
                g["phase"],
                g["k"],
                num(g["alpha"]),
                num(g["expected_committed"]),
                num(g["measured_mal"]),
                f"{num(g['v_next'])} ({g['v_source']})",
                num(g["bound_free_verify"]),
                num(g["bound"]),
                num(g["measured_speedup"]),
                "; ".join(
                    f"{s['name']} x{s['factor']:.2f}: {s['explanation']}" for s in g["steps"]
                ),
            ]
            for g in doc["rounds"]["leviathan"]
        ],
    )


def rounds(doc: Doc, svgs: Svgs) -> str:
    table, lev, k = _round_table(doc), _leviathan_table(doc), _k_choice(doc)
    figs = "".join(
        figure(doc, svgs, f)
        for f in ("acceptance_position", "acceptance_group", "round_time_stack")
    )
    body = (
        "<p>All phases pooled per arm and task group; per phase in the JSON document.</p>"
        + table
        + _engine_counters(doc)
        + "<h3>Leviathan expectation next to the measured value</h3>"
        + lev
        + k
        + figs
    )
    return section("rounds", "Per-round advance and time breakdown", body)


def _engine_counters(doc: Doc) -> str:
    """Acceptance from the engines' own counters (llama.cpp, vLLM: no per-round rows)."""
    cs = [c for c in doc["rounds"].get("engine_counters", []) if c["drafts"]]
    if not cs:
        return ""
    rows = [
        [
            c["arm"],
            c["engine"],
            num(c["drafts"]),
            num(c["draft_length"]),
            pct(c["acceptance_rate"]),
            num(c["mean_acceptance_length"]),
            " / ".join(pct(p) for p in c["per_position"][:6]),
        ]
        for c in cs
    ]
    head = [
        "arm",
        "engine",
        "drafts",
        "tokens a draft",
        "acceptance rate",
        "mean acceptance length",
        "P(a >= i), i = 1..",
    ]
    return (
        "<h3>Acceptance from the engines' counters</h3><p>Deltas of each engine's own "
        "speculative counters over the measured phases, in this report's definitions (bonus "
        "token counted); these engines export no per-round times.</p>" + html_table(head, rows)
    )


def _k_choice(doc: Doc) -> str:
    ks = doc["rounds"]["k_choice"]
    if not ks:
        return "<h3>Choice of k</h3><p>Not tuned: the pilot did not measure several k with 3 or more runs each (see notes).</p>"
    rows = [
        [
            k["task_group"],
            k["phase"],
            num(k["chosen_k"]),
            signed_pct(None if k["vs_k0_percent"] is None else k["vs_k0_percent"] / 100),
            k["reason"],
        ]
        for k in ks
    ]
    return "<h3>Choice of k (vLLM's tune_speculative_k method)</h3>" + html_table(
        ["group", "phase", "k", "vs plain", "why"], rows
    )
