"""After the last arm: the cross-arm quality gates, then the analysis and the report, and the
one-screen summary with the verdict.

The cross-arm step recomputes every business check on every stored answer and compares each
candidate's greedy outputs with the arm it is compared with; it replaces its own earlier
results, so a resumed pilot does not count them twice.
"""

from __future__ import annotations

import contextlib
import textwrap
from pathlib import Path
from typing import Any

from specpilot.analysis.comparison.contention import contended
from specpilot.analysis.verdicts.decision import ADOPT, WINDOWS
from specpilot.pilot.config.file import PilotConfig
from specpilot.pilot.eta.progress import PilotProgress
from specpilot.pilot.plan.arms import ArmPlan
from specpilot.pilot.plan.noise import remember
from specpilot.pilot.run.gates import Gates
from specpilot.report import build_report
from specpilot.report.firstpage import tick
from specpilot.simulate.section import pilot_simulation
from specpilot.store import Store, read_pilot


def pairs(plans: list[ArmPlan]) -> list[tuple[str, str]]:
    """(reference, arm) for every arm compared with another (R6)."""
    return [(p.reference, p.name) for p in plans if p.reference is not None]


def cross_arm(store: Store, gates: Gates, plans: list[ArmPlan], progress: PilotProgress) -> None:
    progress.step("all arms", "quality checks and greedy consistency across arms")
    data = store.read()
    quality, consistency = gates.cross_arm(data, pairs(plans))
    store.delete("quality")
    store.delete("consistency")
    store.add_quality(quality)
    store.add_consistency(consistency)


def report(
    path: Path, out_dir: Path, cfg: PilotConfig, progress: PilotProgress
) -> tuple[dict[str, Path], dict[str, Any]]:
    """Analyse the pilot file and write the report next to it; returns (files, document)."""
    progress.step("all arms", "analysis and report")
    data = read_pilot(path)
    rep = build_report(data, cfg.analysis, simulation=pilot_simulation)
    files: dict[str, Path] = {"duckdb": path}
    for p in rep.write(out_dir):
        key = p.suffix.lstrip(".") if p.name.startswith("report.") else p.stem
        files["markdown" if key == "md" else key] = p
    shared = contended(data.phases, [a.arm for a in data.arms])
    if shared:
        progress.note(
            "this pilot's noise is not kept for the planner: the machine was shared unevenly "
            f"({shared[0]})"
        )
    with contextlib.suppress(OSError):  # the planner's memory of this machine: a cache only
        remember(rep.document, shared=shared)
    return files, rep.document


def _group_why(g: dict[str, Any]) -> str:
    """A group's reason in one parenthesis: where it pays (the verdict's own window), else
    why not or why undecided, else its first condition that does not hold."""
    if g["verdict"] in (ADOPT, WINDOWS) and g.get("window"):
        return f" ({g['window']})"
    if g.get("bottleneck"):
        return f" ({g['bottleneck']})"
    held = [c["text"] for c in g.get("conditions", []) if c.get("holds") is False][:1]
    return f" ({held[0]})" if held else ""


def _levels_line(doc: dict[str, Any]) -> str:
    """The load levels with the utilization each meant here (the capacity probe's figure)."""
    probe = (doc.get("capacity") or {}).get("probe")
    parts = [
        f"{lv['level']} {lv['offered_rps']:.3g} req/s"
        + (f" ({lv['utilization']:.2f} of capacity)" if lv["utilization"] is not None else "")
        for lv in (doc.get("capacity") or {}).get("levels") or []
        if lv["offered_rps"] is not None
    ]
    how = "given, not measured" if (probe or {}).get("given") else "probed"
    cap = (
        f"capacity {probe['sustainable_rps']:.3g} req/s ({how})" if probe else "capacity not probed"
    )
    return f"load: {'; '.join(parts) or 'no measured level'}; {cap}"


def summary(doc: dict[str, Any], failed: list[str], elapsed_s: float) -> str:
    """The verdict on one screen: per candidate the verdict, its groups and the main conditions."""
    hw = doc.get("hardware", {}).get("summary", "")
    lines = [f"pilot {doc['pilot']['name']} on {hw}"]
    lines += [_levels_line(doc), ""]
    fp = doc.get("first_page") or {}
    for p in fp.get("paragraphs") or []:  # the decision in plain words first
        lines += [*textwrap.wrap(p["text"], 100), ""]
    if fp.get("checks"):
        lines += ["checks: " + "; ".join(f"{tick(c['ok'])} {c['text']}" for c in fp["checks"]), ""]
    for v in doc.get("verdicts", []):
        flag = " [PILOT_HYPOTHESIS]" if v.get("pilot_hypothesis") else ""
        lines.append(f"{v['verdict']}{flag}: {v['candidate_arm']} vs {v['baseline_arm']}")
        lines.append(f"  {v['summary']}")
        if v.get("aa_control"):
            lines.append(f"  A/A: {v['aa_control']}")
        if v.get("planted"):
            lines.append(f"  planted: {v['planted']}")
        if v.get("within"):
            lines.append(f"  second estimate: {v['within']}")
        for g in v.get("groups", []):
            lines.append(f"    {g['task_group']:<12} {g['verdict']}{_group_why(g)}")
        reasons = v.get("hypothesis_reasons") or []
        if reasons:
            more = f" (+{len(reasons) - 3} more in report.md)" if len(reasons) > 3 else ""
            lines.append(f"  hypothesis because: {'; '.join(reasons[:3])}{more}")
    if not doc.get("verdicts"):
        lines.append("no verdict: " + "; ".join(doc.get("notes", [])[:3]))
    lines += [n for n in doc.get("notes", []) if "not measured, no verdict" in n]
    for d in doc.get("drills", []):
        if d.get("status") == "done":
            force = d.get("switch_in_force_s")
            rec = d.get("recovery_s")
            lines.append(
                f"rollback drill {d['arm']} ({d['kind']}): in force after "
                f"{force:.3f} s, {d.get('interrupted', 0)} failed, {d.get('delayed', 0)} late, "
                + (
                    f"goodput back after {rec:.1f} s"
                    if rec is not None
                    else "goodput not back in the window"
                )
            )
        else:
            lines.append(f"rollback drill {d['arm']}: {d.get('status')} ({d.get('reason', '')})")
    lines += [f"looks: {x}" for x in (doc.get("sequential") or {}).get("lines") or []]
    lines += [
        f"planner: {p['text']}" for p in doc.get("prediction") or [] if p.get("within") is False
    ]
    if failed:
        lines.append(f"FAILED ARMS: {', '.join(failed)} (see the report's arms section)")
    lines.append(f"wall time {elapsed_s / 60:.1f} min")
    return "\n".join(lines)
