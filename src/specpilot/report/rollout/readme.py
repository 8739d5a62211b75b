"""The rollout's README: what is adopted and what is not, how to apply each file, how to roll
back, and what the rollback drill measured of the switch (``DrillRecord``, the report's drills
section)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specpilot.report.rollout.engines import EngineFiles
from specpilot.report.rollout.routes import api_base_env
from specpilot.report.rollout.scopes import Adoption, NotAdopted

ADMIN = (
    'curl -sf -X POST "http://$HOST:$PORT/admin/strategy" '
    '-H "Authorization: Bearer $SPECPILOT_ADMIN_TOKEN" -H "Content-Type: application/json" '
)


def _title(doc: Mapping[str, Any]) -> list[str]:
    p = doc.get("pilot") or {}
    return [
        f"# Rollout: {p.get('name', 'pilot')}",
        "",
        f"Written by {doc.get('generated_by', 'specpilot')} from this pilot's `report.json` "
        f"(pilot `{p.get('pilot_id', '?')}`). Only what a verdict adopted is configured here; "
        "a task group that was not adopted gets no engine configuration.",
        "",
    ]


def nothing_adopted(doc: Mapping[str, Any], verdicts: Sequence[NotAdopted]) -> str:
    """The README of a pilot whose verdicts adopt nothing: no configuration, and why."""
    lines = [*_title(doc), "**Nothing was adopted**, so nothing is deployed:", ""]
    lines += [f"- `{v.candidate}` vs `{v.baseline}`: {v.verdict}: {v.summary}" for v in verdicts]
    if not verdicts:
        lines.append("- this pilot has no verdict (see report.md for why)")
    lines += ["", "Keep the current service as it is; `report.md` says what to fix or measure."]
    return "\n".join(lines) + "\n"


def _adopted(ads: Sequence[Adoption]) -> list[str]:
    lines = ["## What is adopted", ""]
    lines += [
        "| candidate | engine | task group | verdict | where it pays |",
        "|---|---|---|---|---|",
    ]
    for a in ads:
        for s in a.scopes:
            lines.append(f"| `{a.candidate}` | {a.engine} | {s.group} | {s.verdict} | {s.window} |")
    rejected = [(a, g, v, why) for a in ads for g, v, why in a.rejected]
    if rejected:
        lines += ["", "Not adopted (no configuration; `routes.yaml` keeps them unchanged):", ""]
        lines += [f"- {g} (`{a.candidate}`): {v}: {why}" for a, g, v, why in rejected]
    for a in ads:
        if a.hypothesis:
            lines += [
                "",
                f"**PILOT_HYPOTHESIS** (`{a.candidate}`): these files deploy a hypothesis, "
                "not a decision, because " + "; ".join(a.hypothesis) + ".",
            ]
    return [*lines, ""]


def _in_place(a: Adoption, cfg: EngineFiles) -> list[str]:
    table = f"{a.candidate}.strategy.json"
    on = (
        ", ".join(s.group for s in a.scopes if s.always)
        or "none (every adopted group is in a window)"
    )
    lines = [
        f"`{table}` is the strategy table: k = {a.k} for {on} (scopes `tag:<group>` and "
        "`model:<group>`), k = 0 for every other request (`default`).",
        "",
    ]
    if f"{a.candidate}.launch.sh" in cfg.files:
        lines += [
            f"1. Start: `HOST=0.0.0.0 PORT=8000 SPECPILOT_ADMIN_TOKEN=... sh {a.candidate}.launch.sh`"
            f" starts the server ({a.engine}) with the draft loaded, each task group's name as a "
            f"model alias and `{table}` applied (`--strategy-file`).",
        ]
    lines += [
        f"2. On a running server with the draft loaded: `{ADMIN}--data @{table}` replaces the "
        "whole table at once (every scope checked first: a refused file changes nothing; "
        "loopback clients with the admin token only). A server started with `--strategy-file` "
        "also takes the file copied over its own and `POST /admin/strategy/reload`.",
        "3. A request takes its group's scope from its `tag`, an `X-Specpilot-Tag: <group>` "
        "header, or the group's name as its model (what the LiteLLM routes send). New requests "
        "get the new table; requests in flight keep theirs.",
        "4. Check: `GET /admin/strategy` shows the table; every response's "
        "`X-Specpilot-Strategy: k=...; scope=...` header says what served it.",
        "",
        f'Roll back: `{ADMIN}--data \'{{"default": 0, "models": {{}}, "tags": {{}}}}\'` '
        "(speculation off for every scope, the same process, no restart).",
        "",
    ]
    return lines


def _restarted(a: Adoption, cfg: EngineFiles) -> list[str]:
    lines = []
    if f"{a.candidate}.launch.sh" in cfg.files:
        lines.append(
            f"1. Start `HOST=0.0.0.0 PORT=8000 sh {a.candidate}.launch.sh` beside the current "
            f"service and set `{api_base_env(a.candidate)}` to its `http://HOST:PORT/v1`."
        )
    lines += [
        "2. Route the adopted groups to it (`routes.yaml`, `litellm.config.yaml`); every other "
        f"group stays on the current service (`{api_base_env(a.baseline)}`).",
        "",
        "Roll back: route the groups back to the current service (speculation is a launch "
        f"setting of {a.engine}: switching it off in place is a restart without it).",
        "",
    ]
    return lines


def _windows(a: Adoption, cfg: EngineFiles) -> list[str]:
    """Groups adopted only in a load window: on inside it, off outside, switched by whoever
    watches the offered rate (no gateway switches a route on it)."""
    lines = []
    for s in a.scopes:
        if s.always:
            continue
        up_to = s.pays_up_to_rps
        when = f"up to {up_to:.3g} req/s, the highest rate measured paying" if up_to else ""
        when = when or (f"in {', '.join(s.phases)}" if s.phases else s.window)
        how = (
            f'`PUT /admin/strategy` with `{{"scope": "tag:{s.group}", "k": {a.k}}}` and '
            f'`{{"scope": "model:{s.group}", "k": {a.k}}}` (k 0 switches it off again)'
            if cfg.switch == "runtime"
            else f"route {s.group} to `{a.candidate}` (`routes.yaml`: `in_window`)"
        )
        lines.append(
            f"- {s.group} pays only {when} ({s.window}): the files keep it off; while the "
            f"offered rate is there, {how}."
        )
    return ["Adopted only in a load window:", "", *lines, ""] if lines else []


def _models(a: Adoption) -> list[str]:
    models = [m for m in a.manifest.get("models") or [] if m.get("path")]
    if not models:
        return []
    lines = ["", "The model files measured (deploy the same bytes):", ""]
    for m in models:
        sha = m.get("sha256")
        lines.append(f"- {m.get('role')}: `{m['path']}`" + (f" (sha256 `{sha}`)" if sha else ""))
    return lines


def _files(ads: Sequence[Adoption], configs: Mapping[str, EngineFiles]) -> list[str]:
    lines = ["## The files and how to apply them", ""]
    for a in ads:
        cfg = configs[a.candidate]
        lines += [f"### `{a.candidate}` ({a.engine})", ""]
        lines += [f"Files: {', '.join(f'`{n}`' for n in sorted(cfg.files)) or 'none'}.", ""]
        lines += _in_place(a, cfg) if cfg.switch == "runtime" else _restarted(a, cfg)
        lines += _windows(a, cfg)
        lines += [cfg.note, ""] if cfg.note else []
        lines += [f"Note: {n}" for n in cfg.notes]
        lines += [*_models(a), ""]
    return lines


def _routing() -> list[str]:
    return [
        "## Routing",
        "",
        "`routes.yaml` routes each task group to its deployment; a group adopted only in a "
        "load window names the deployment outside the window and, under `in_window`, the one "
        "inside it with its rate or phases (for the builtin server, the `PUT /admin/strategy` "
        "bodies that switch that group on and off). `litellm.config.yaml` is the same table as "
        "a LiteLLM proxy config (`litellm --config litellm.config.yaml`): each group is a "
        "`model_name`, routed to the deployment that serves it now (outside its window). "
        "LiteLLM was chosen because it routes OpenAI-compatible traffic by the model name "
        "every client already sends; no gateway format (LiteLLM, Envoy) switches a route on "
        "the offered rate, so a window is applied by whoever watches the load.",
        "",
    ]


def _rollback(ads: Sequence[Adoption], files: Mapping[str, str]) -> list[str]:
    lines = ["## Rollback rules", ""]
    for a in ads:
        name = f"rollback-{a.candidate}.rules.yml"
        if name in files:
            lines.append(
                f"- `{name}` (a copy of the report's): Prometheus alerting rules in the "
                "engine's own metric names, from the SLOs and the baseline's measured latency; "
                "add it to Prometheus's `rule_files`. Each alert's `action` is the roll back "
                "above."
            )
        else:
            lines.append(f"- `{a.candidate}`: the report wrote no rollback rules")
    return [*lines, ""]


def _drill_line(d: Mapping[str, Any]) -> str:
    if d.get("status") != "done":
        return (
            f"- `{d['arm']}`: {d.get('status')}: {d.get('reason') or 'no reason recorded'}; "
            "the rollback has not been rehearsed under load"
        )

    def s(x: Any, unit: str = " s") -> str:
        return f"{x:.3g}{unit}" if isinstance(x, int | float) else "not measured"

    back = d.get("recovery_s")
    return (
        f"- `{d['arm']}` ({d['kind']}, replaying phase {d['phase']}): speculation off in force "
        f"{s(d.get('switch_in_force_s'))} after it was asked for; {d.get('interrupted', 0)} "
        f"requests failed and {d.get('delayed', 0)} missed their deadline during the switch; "
        + (
            "goodput back at the baseline's in that phase"
            + (f" ({s(d['goodput_baseline'], ' req/s')})" if d.get("goodput_baseline") else "")
            + f" after {s(back)}"
            if back is not None
            else "goodput did not come back within the window"
        )
        + (
            f"; switched back on in {s(d.get('switch_back_s'))}"
            if d.get("switch_back_s") is not None
            else ""
        )
    )


def _drills(doc: Mapping[str, Any], ads: Sequence[Adoption]) -> list[str]:
    lines = [
        "## How the drill measured the switch",
        "",
        "The pilot's rollback drill replayed its peak phase on the candidate and switched "
        "speculation off under that load: by the admin API in the same process "
        "(`runtime_switch`, the builtin server) or by restarting the engine without it "
        "(`restart`). It recorded when the switch was asked for and when it was in force, the "
        "requests that failed or missed their deadline meanwhile, and how long goodput took to "
        "come back (the report's drills section):",
        "",
    ]
    names = {a.candidate for a in ads}
    drills = [d for d in doc.get("drills") or [] if d.get("arm") in names]
    lines += [_drill_line(d) for d in drills] or ["- no drill was recorded for these arms"]
    return [*lines, ""]


def readme(
    doc: Mapping[str, Any],
    ads: Sequence[Adoption],
    configs: Mapping[str, EngineFiles],
    files: Mapping[str, str],
) -> str:
    lines = _title(doc) + _adopted(ads) + _files(ads, configs) + _routing()
    lines += _rollback(ads, files) + _drills(doc, ads)
    return "\n".join(lines).rstrip() + "\n"


__all__ = ["nothing_adopted", "readme"]
