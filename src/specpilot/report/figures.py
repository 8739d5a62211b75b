"""The data of every plot, kept in the JSON document (``figures``) and drawn by ``plots``.

Each figure: ``id``, ``title``, ``caption`` (what it shows and over what), ``data``. Arms carry
their role so the plots colour the baseline grey and the candidates in colour.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specpilot.analysis.pilot import PilotAnalysis
from specpilot.analysis.verdicts.matrix import GroupMatrix

FIGURE_IDS = (
    "forest",
    "latency_cdf",
    "load_curves",
    "acceptance_position",
    "acceptance_group",
    "group_matrix",
    "round_time_stack",
    "stage_decomposition",
    "verify_cost",
)


def _role(a: PilotAnalysis, arm: str) -> str:
    if arm == a.plan.baseline:
        return "baseline"
    if arm == a.plan.alternative:
        return "alternative"
    rec = a.plan.record(arm)
    return "candidate" if rec is not None and rec.strategy.kind != "none" else "plain"


def _latency(a: PilotAnalysis) -> dict[str, Any]:
    arms = [{"arm": arm, "role": _role(a, arm), **cdf} for arm, cdf in a.latency_cdf.items()]
    return {"arms": arms}


def _load(a: PilotAnalysis) -> dict[str, Any]:
    arms = []
    for c in a.capacities:
        if c.task_group != "*":
            continue
        pts = [
            {
                "phase": p.phase,
                "offered_rps": p.offered_rps,
                "goodput_rps": p.goodput_rps,
                "e2e_p99_s": p.e2e_p99_s,
            }
            for p in c.points
        ]
        arms.append(
            {"arm": c.arm, "role": _role(a, c.arm), "capacity_rps": c.capacity_rps, "points": pts}
        )
    cross = [
        {
            "candidate_arm": x.candidate_arm,
            "baseline_arm": x.baseline_arm,
            "crossover_rps": x.crossover_rps,
            "pays_up_to_rps": x.pays_up_to_rps,
            "summary": x.summary,
        }
        for x in a.crossovers
        if x.task_group == "*" and x.baseline_arm == a.plan.baseline
    ]
    return {"arms": arms, "crossover": cross}


def _candidates_pooled(a: PilotAnalysis) -> list[Any]:
    cands = set(a.plan.candidates)
    return [r for r in a.rounds_pooled if r.arm in cands and r.task_group != "*"]


def _acceptance_position(a: PilotAnalysis) -> dict[str, Any]:
    return {
        "series": [
            {
                "arm": r.arm,
                "task_group": r.task_group,
                "k": r.k,
                "per_position": list(r.acceptance_per_position),
            }
            for r in _candidates_pooled(a)
            if r.acceptance_per_position
        ]
    }


def _acceptance_group(a: PilotAnalysis) -> dict[str, Any]:
    return {
        "bars": [
            {
                "arm": r.arm,
                "task_group": r.task_group,
                "mean_acceptance_length": r.mean_acceptance_length,
                "acceptance_rate": r.acceptance_rate,
                "per_request_mean_acceptance_rate": r.per_request_mean_acceptance_rate,
                "per_request_hist": list(r.per_request_acceptance_hist),
                "requests": r.requests,
            }
            for r in _candidates_pooled(a)
        ]
    }


def _matrix(a: PilotAnalysis) -> dict[str, Any]:
    m = a.group_matrix or GroupMatrix(None, metrics=[])
    return {
        "candidate_arm": m.candidate_arm,
        "groups": m.groups,
        "metrics": m.metrics,
        "values": m.values,
    }


def _round_stack(a: PilotAnalysis) -> dict[str, Any]:
    return {
        "bars": [
            {
                "arm": t.arm,
                "role": _role(a, t.arm),
                "task_group": t.task_group,
                "draft_ms": t.draft_ms,
                "verify_ms": t.verify_ms,
                "overhead_ms": t.overhead_ms,
            }
            for t in a.time_per_token
        ]
    }


def _stages(a: PilotAnalysis) -> dict[str, Any]:
    return {
        "arm": a.plan.baseline,
        "groups": [
            {
                "task_group": s.task_group,
                "mean_stage_s": s.mean_stage_s,
                "decode_share": s.decode_share,
                "tasks": s.tasks,
            }
            for s in a.stages
        ],
    }


def _verify(a: PilotAnalysis) -> dict[str, Any]:
    return {
        "curves": [
            {
                "arm": c.arm,
                "source": c.source,
                "batch_size": c.batch_size,
                "points": [
                    {"tokens": p.tokens, "ratio": p.ratio} for p in c.points if p.ratio is not None
                ],
            }
            for c in a.curves
        ],
        "hardware": a.hardware,
    }


def _iv(p: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    return p["estimate"], p["low"], p["high"]


def forest_rows(doc: dict[str, Any]) -> dict[str, Any]:
    """Every candidate cell's change in task time with its deciding interval and outcome; then
    per load level the planted arm (expected at +f) and the A/A contrast (the planted arm less
    its f, expected at 0), so a reader sees at once what was decided and whether the pilot
    could have seen it."""
    rows: list[dict[str, Any]] = []
    planted = {p["arm"] for p in doc.get("planted") or []}
    control = (doc.get("aa_control") or {}).get("control_arm")
    margin = None
    for c in doc["comparisons"]:
        t = c["task_rel_change"]
        if c["candidate_arm"] in planted:
            continue
        margin = c.get("equivalence_margin", margin)
        aa = c["candidate_arm"] == control
        rows.append(
            {
                "kind": "aa" if aa else "candidate",
                "label": f"{c['candidate_arm']} | {c['phase']} | {c['task_group']}",
                "estimate": t["estimate"],
                "low": t["low"],
                "high": t["high"],
                "outcome": c["outcome"],
                "expected": 0.0 if aa else None,
            }
        )
    for p in doc.get("planted") or []:
        f = float(p["factor"])
        rows.append(
            {
                "kind": "planted",
                "label": f"planted +{f:.0%} | {p['phase']} | *",
                "estimate": p["estimate"],
                "low": p["low"],
                "high": p["high"],
                "outcome": p["outcome"],
                "expected": f,
            }
        )
        less = [None if x is None else (1.0 + x) / (1.0 + f) - 1.0 for x in _iv(p)]
        rows.append(
            {
                "kind": "aa",
                "label": f"A/A (planted less {f:.0%}) | {p['phase']} | *",
                "estimate": less[0],
                "low": less[1],
                "high": less[2],
                "outcome": "aa",
                "expected": 0.0,
            }
        )
    return {"rows": rows, "margin": margin}


# every figure but the two whose caption or data come from the document: title, caption, data
_STATIC: dict[str, tuple[str, str, Callable[[PilotAnalysis], Any]]] = {
    "load_curves": (
        "Goodput and p99 E2E vs offered load",
        "All groups pooled; the vertical line marks the crossover load from which speculation stops paying.",
        _load,
    ),
    "acceptance_position": (
        "Acceptance per draft position",
        "P(accepted >= i | proposed >= i) per candidate arm and task group, all phases.",
        _acceptance_position,
    ),
    "acceptance_group": (
        "Acceptance per task group",
        "Mean acceptance length (bonus token included) and the per-request acceptance distribution.",
        _acceptance_group,
    ),
    "group_matrix": (
        "Group x metric matrix",
        "Main candidate: mean acceptance length, decode speed-up (decode only), end-to-end speed-up of the task (worst load level), key-check pass rate.",
        _matrix,
    ),
    "round_time_stack": (
        "Decode time per committed token",
        "Draft, verify and overhead milliseconds per committed token, per arm and task group (each batched round's time shared over its rows).",
        _round_stack,
    ),
    "stage_decomposition": (
        "Where task time goes",
        "Mean seconds per stage for the baseline arm's completed requests: client stages, queue, prefill, decode, other.",
        _stages,
    ),
    "verify_cost": (
        "Verify-cost curve",
        "Target forward time for n new tokens / for one token, per arm, source and batch size; it depends on the hardware.",
        _verify,
    ),
}


def figure_data(doc: dict[str, Any], a: PilotAnalysis) -> list[dict[str, Any]]:
    """Every plot's title, caption and data (in ``FIGURE_IDS`` order)."""
    from specpilot.report.fmt import clean

    specs = {
        "forest": (
            "Every cell at a glance",
            "Change in task time (candidate / baseline - 1) per arm, load level and task group, "
            "with the interval that decides it; the shaded band is the equivalence margin. Filled: "
            "decided (green faster, red slower, blue no difference inside the margin); hollow: "
            "undecided. The planted rows must be found near their tick; the A/A rows must cover 0.",
            lambda _a: forest_rows(doc),
        ),
        "latency_cdf": (
            "Latency CDFs per arm",
            f"E2E and TTFT over every scheduled steady-state request ({a.scheduled} records); failed requests never finish, so a curve stops short of 1 by its failed fraction.",
            _latency,
        ),
        **_STATIC,
    }
    return [
        {
            "id": fid,
            "title": specs[fid][0],
            "caption": specs[fid][1],
            "data": clean(specs[fid][2](a)),
        }
        for fid in FIGURE_IDS
    ]
