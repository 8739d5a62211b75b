"""The report's closing sections: memory, cost, compatibility, rollback drills, definitions."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from specpilot.report.fmt import Markup, html_table, mib, num, seconds
from specpilot.report.sections import Doc, Svgs, section


def memory(doc: Doc, svgs: Svgs) -> str:
    return section("memory", "Memory budget of the draft", html_table(*memory_rows(doc)))


def memory_rows(doc: Doc) -> tuple[list[str], list[list[Any]]]:
    """Per candidate, the draft's memory and the target sequences it would hold."""
    rows = [
        [
            m["candidate_arm"],
            mib(m["draft_weight_bytes"]),
            mib(m["draft_kv_bytes"]),
            mib(m["workspace_bytes"]),
            mib(m["total_bytes"]),
            mib(m["kv_bytes_per_sequence"]),
            num(m["sequences_forgone"]),
            "; ".join(m["notes"]),
        ]
        for m in doc["memory"]
    ]
    head = [
        "candidate",
        "draft weights",
        "draft KV",
        "workspace",
        "total",
        "target KV per sequence",
        "target sequences that memory would hold",
        "notes",
    ]
    return head, rows


def cost(doc: Doc, svgs: Svgs) -> str:
    arms = html_table(
        [
            "arm",
            "devices",
            "measured s",
            "on-time tasks",
            "device-s per 1,000 on-time",
            "price per 1,000 on-time",
            "capacity req/s",
            "devices at target peak",
        ],
        [
            [
                c["arm"],
                num(c["devices"]),
                num(c["measured_s"]),
                c["on_time"],
                num(c["device_s_per_1000_on_time"]),
                num(c["price_per_1000_on_time"]),
                num(c["capacity_rps"]),
                num(c["devices_at_peak"]),
            ]
            for c in doc["cost"]["arms"]
        ],
    )
    lines = "".join(
        f'<p class="cost-line cost-{escape(c["kind"])}">{escape(c["candidate_arm"])}: {escape(c["text"])}</p>'
        for c in doc["cost"]["lines"]
    )
    lost = "".join(_memory_line(m) for m in doc["memory"])
    whole = "".join(_ledger(x) for x in doc["cost"].get("ledgers") or [])
    return section("cost", "Cost at equal quality", whole + lines + lost + arms)


def _ledger(x: Doc) -> str:
    """A candidate's first-year cost, item by item (``analysis.service.ledger``)."""
    cur = x["currency"]
    rows = [
        [
            i["name"] + (" (one-off)" if i["one_off"] else ""),
            "not priced" if i["amount"] is None else f"{i['amount']:,.0f} {cur}",
            i["basis"],
        ]
        for i in x["items"]
    ]
    head = f"{x['candidate_arm']} against {x['baseline_arm']}, first year: {x['text']}"
    return (
        f'<p class="cost-ledger cost-{escape(x["kind"])}"><b>{escape(head)}</b></p>'
        + html_table(["item", f"{cur} a year (+ more spent, - less)", "how"], rows, "ledger")
    )


def _memory_line(m: Doc) -> str:
    arm = escape(m["candidate_arm"])
    if m.get("resource_class") == "ngram":
        return (
            f"<p>{arm} runs n-gram self-speculation: a different resource structure from a "
            f"draft model (no draft weights, no draft KV cache); its extra peak memory, "
            f"{mib(m['total_bytes'])}, is its lookup tables and noise, not a draft's.</p>"
        )
    return (
        f"<p>Capacity held by {arm}'s draft: {mib(m['total_bytes'])}, "
        f"{num(m['sequences_forgone'])} target sequences at the baseline's KV per sequence.</p>"
    )


def compatibility(doc: Doc, svgs: Svgs) -> str:
    c = doc["compatibility"]
    if not c["features"]:
        return section(
            "compatibility",
            "Compatibility matrix",
            "<p>No compatibility records in the pilot file.</p>",
        )
    cell = {(m["feature"], m["arm"]): m for m in c["matrix"]}
    rows = [
        [
            f,
            *[
                Markup(
                    f'<span class="st-{cell[(f, a)]["status"]}" title="{escape(cell[(f, a)]["evidence"])}">{cell[(f, a)]["status"]}</span>'
                )
                for a in c["arms"]
            ],
        ]
        for f in c["features"]
    ]
    return section(
        "compatibility", "Compatibility matrix", html_table(["feature", *c["arms"]], rows)
    )


def drills(doc: Doc, svgs: Svgs) -> str:
    rules = "".join(
        f"<details><summary>Prometheus alerting rules for {escape(arm)}</summary><pre>{escape(text)}</pre></details>"
        for arm, text in doc["rollback_rules"].items()
    )
    table = html_table(*drill_rows(doc))
    return section("drills", "Rollback drill records and triggers", table + rules)


def drill_rows(doc: Doc) -> tuple[list[str], list[list[Any]]]:
    """Per drilled arm: the switch, the recovery, the requests it cost, after the rollback."""
    rows = [
        [
            d["arm"],
            d.get("kind", ""),
            d["status"],
            d.get("reason", ""),
            seconds(d.get("switch_in_force_s")),
            seconds(d.get("recovery_s"))
            if d.get("recovery_s") is not None
            else ("never recovered" if d["status"] == "done" else "n/a"),
            num(d.get("interrupted")),
            num(d.get("delayed")),
            ((d.get("detail") or {}).get("post_rollback") or {}).get("text", "n/a"),
            d.get("weighed", ""),
        ]
        for d in doc["drills"]
    ]
    head = [
        "arm",
        "kind",
        "status",
        "reason",
        "switch in force after",
        "goodput recovered after",
        "interrupted",
        "delayed",
        "after the rollback (same prompts as the baseline)",
        "cost against the gain",
    ]
    return head, rows


def definitions(doc: Doc, svgs: Svgs) -> str:
    items = "".join(
        f"<dt>{escape(d['name'])}</dt><dd>{escape(d['definition'])}</dd>"
        for d in doc["definitions"]
    )
    notes = "".join(f"<li>{escape(n)}</li>" for n in doc["notes"])
    return section(
        "definitions",
        "Metric definitions",
        f"<dl>{items}</dl>" + (f"<h3>Notes</h3><ul>{notes}</ul>" if notes else ""),
    )


def cold_rows(doc: Doc) -> tuple[list[str], list[list[Any]]]:
    """Per arm: start to healthy, the first requests after a start and after the drill's
    restart, against its steady state (``analysis.service.coldstart``)."""

    def t(x: Doc | None, key: str) -> str:
        return seconds(x.get(key)) if x and x.get("requests") else "n/a"

    rows = [
        [
            c["arm"],
            f"{seconds(c['start_to_healthy_s'])} ({c['processes']})",
            f"{t(c['first'], 'ttft_s')} / {t(c['first'], 'task_s')}",
            f"{t(c['steady'], 'ttft_s')} / {t(c['steady'], 'task_s')}",
            f"{t(c['after_restart'], 'ttft_s')} / {t(c['after_restart'], 'task_s')}",
        ]
        for c in doc.get("cold_start") or []
    ]
    head = [
        "arm",
        "start to healthy (processes)",
        "first requests after a start: TTFT / task",
        "steady state: TTFT / task",
        "after the drill's restart: TTFT / task",
    ]
    return head, rows


def arms(doc: Doc, svgs: Svgs) -> str:
    rows = []
    for a in doc["arms"]:
        s = a["strategy"]
        strat = (
            s["kind"]
            if s["kind"] == "none"
            else f"{s['kind']} k={s['k']} {s.get('draft_id') or s.get('ngram_type') or ''}"
        )
        rows.append(
            [
                a["arm"],
                a["role"],
                a["engine"],
                strat,
                a["compared_with"] or "",
                seconds(a["cold_start_s"]),
                (a["manifest_sha256"] or "")[:12],
                ", ".join(a["runs"]),
            ]
        )
    config = (
        "<details><summary>The pilot's configuration as given (re-run it after a model "
        f"upgrade)</summary><pre>{escape(json.dumps(doc['pilot']['config'], indent=2, default=str))}</pre></details>"
    )
    manifests = config + "".join(
        f"<details><summary>{escape(a['arm'])}: frozen manifest and budget</summary><pre>"
        f"{escape(json.dumps({'manifest': a['manifest'], 'budget': a['budget']}, indent=2, default=str))}</pre></details>"
        for a in doc["arms"]
    )
    table = html_table(
        [
            "arm",
            "role",
            "engine",
            "strategy",
            "compared with",
            "cold start",
            "manifest sha256",
            "runs",
        ],
        rows,
    )
    cold = doc.get("cold_start") or []
    starts = (
        "<h3>Cold start apart from the steady state</h3>" + html_table(*cold_rows(doc))
        if cold
        else ""
    )
    return section("arms", "Frozen configuration of every arm", table + starts + manifests)
