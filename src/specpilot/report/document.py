"""The report as one JSON document (schema: ``report.schema.json``), sections in R9 order.

Everything the HTML and Markdown show comes from this document, so the JSON holds every figure:
the numbers of every table and the data series of every plot (``figures``).

    >>> from specpilot.analysis import analyze
    >>> from specpilot.records import PilotData, PilotRecord
    >>> doc = to_document(analyze(PilotData(PilotRecord("p", "empty", {}, "", "0", 0.0))))
    >>> list(doc)[:4], doc["verdicts"]
    (['schema_version', 'generated_by', 'pilot', 'verdicts'], [])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specpilot import __version__
from specpilot.analysis.pilot import PilotAnalysis
from specpilot.analysis.service.utilization import capacity_rps, levels, utilization
from specpilot.records import PilotData, PilotRecord
from specpilot.report.compare import previous_run, schedule_fingerprint
from specpilot.report.definitions import DEFINITIONS
from specpilot.report.figures import figure_data
from specpilot.report.firstpage import first_page
from specpilot.report.fmt import clean

# a document built without the simulator (``build_report(..., simulation=None)``)
NOT_SIMULATED: dict[str, Any] = {
    "validations": [],
    "crossovers": [],
    "k_schedules": [],
    "notes": ["not simulated: this report was built without the simulator"],
}

SCHEMA_VERSION = 1


def _phases(data: PilotData) -> list[dict[str, Any]]:
    cap = capacity_rps(data.pilot.schedule)
    out = []
    for p in sorted(data.phases, key=lambda p: (p.arm, p.planned_start_s, p.phase)):
        actual = None
        if p.actual_start_t is not None and p.actual_end_t is not None:
            actual = p.actual_end_t - p.actual_start_t
        out.append(
            {
                "arm": p.arm,
                "run_id": p.run_id,
                "phase": p.phase,
                "offered_rps": p.offered_rate,
                "utilization": utilization(p.offered_rate, cap),
                "scheduled": p.scheduled,
                "planned_s": p.planned_end_s - p.planned_start_s,
                "actual_s": actual,
                "status": p.status,
                "warmup": p.warmup,
            }
        )
    return out


def _arms(a: PilotAnalysis) -> list[dict[str, Any]]:
    runs: dict[str, list[str]] = {}
    for r in a.data.arms:
        runs.setdefault(r.arm, []).append(r.run_id)
    out = []
    for r in a.plan.arms:
        out.append(
            {
                "arm": r.arm,
                "role": r.role,
                "engine": r.engine,
                "strategy": r.strategy.to_dict(),
                "budget": r.budget.to_dict(),
                "manifest": r.manifest,
                "manifest_sha256": r.manifest_sha256,
                "cold_start_s": r.cold_start_s,
                "status": r.status,
                "runs": runs.get(r.arm, []),
                "compared_with": next((b for b, c in a.plan.pairs if c == r.arm), None),
            }
        )
    return out


def _compat(a: PilotAnalysis) -> dict[str, Any]:
    features = sorted({c.feature for c in a.data.compat})
    arms = [r.arm for r in a.plan.arms]
    cells = {(c.feature, c.arm): c for c in a.data.compat}
    matrix = [
        {
            "feature": f,
            "arm": arm,
            "status": cells[(f, arm)].status if (f, arm) in cells else "not_run",
            "evidence": cells[(f, arm)].evidence if (f, arm) in cells else "",
        }
        for f in features
        for arm in arms
    ]
    return {"features": features, "arms": arms, "matrix": matrix}


def to_document(a: PilotAnalysis, simulation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole report of ``a`` as JSON-able data (sections in R9 order, then definitions and
    figures); ``simulation``: the simulator's section (``simulate.section``), computed by the
    caller (the report renders, it runs nothing)."""
    p = a.data.pilot
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generated_by": f"specpilot {__version__}",
        "pilot": _pilot_section(p),
        "verdicts": [clean(v) for v in a.verdicts],
        "load_range": {"phases": _phases(a.data)},
        "hardware": {"summary": a.hardware, **clean(p.hardware)},
        "arms": _arms(a),
        "rounds": _rounds(a),
        "verify_cost": {"curves": [clean(c) for c in a.curves]},
        "quality": {
            "cells": [clean(c) for c in a.quality_cells],
            "gates": [clean(g) for g in a.gates],
        },
        "load": {"cells": [clean(c) for c in a.load_cells]},
        "comparisons": [clean(c) for c in a.comparisons],
        "aa_control": clean(a.aa) if a.aa is not None else None,
        "planted": [r.to_dict() for r in a.planted],
        "prediction": [r.to_dict() for r in a.predicted],
        "sequential": clean(a.sequential) if a.sequential is not None else None,
        "end_to_end": {
            "stages": [clean(s) for s in a.stages],
            "recommendations": [clean(r) for r in a.recommendations],
            "amdahl_checks": clean(a.amdahl_checks),
        },
        "capacity": _capacity(a),
        # simulated, and labelled so: validated on the pilot's own phases or not used
        "simulation": clean(simulation) if simulation is not None else NOT_SIMULATED,
        "memory": [clean(m) for m in a.memory],
        "cold_start": [clean(c) for c in a.cold_starts],  # R6: starts apart from the steady state
        "cost": _cost(a),
        "compatibility": _compat(a),
        "drills": [clean(d) for d in a.drills],
        "rollback_rules": dict(a.rollback_yaml),
        "analysis_config": a.config.model_dump(mode="json"),  # as run (analysis.settings)
        # what the design changed in the given config, and why (empty: nothing)
        "analysis_settings": list(a.settings.lines) if a.settings is not None else [],
        "definitions": [{"name": n, "definition": d} for n, d in DEFINITIONS],
        "notes": list(a.notes),
    }
    # a rerun (``specpilot rerun``): each cell beside the previous run's (``report.compare``)
    doc["previous_run"] = previous_run(p.schedule, doc)
    doc["figures"] = figure_data(doc, a)
    doc["first_page"] = first_page(doc)  # the decision in plain words, from the figures above
    return doc


def _rounds(a: PilotAnalysis) -> dict[str, Any]:
    return {
        "cells": [clean(r) for r in a.rounds],
        "pooled": [clean(r) for r in a.rounds_pooled],
        "leviathan": [clean(g) for g in a.gaps],
        "k_choice": [clean(k) for k in a.k_choices],
        "engine_counters": [clean(c) for c in a.counters.values()],
    }


def _capacity(a: PilotAnalysis) -> dict[str, Any]:
    p = a.data.pilot
    return {
        # what the baseline sustains on this machine (pilot.run.capacity), None: not probed
        "probe": clean(probe) if (probe := (p.schedule or {}).get("capacity")) else None,
        "levels": levels(p.schedule),
        "arms": [clean(c) for c in a.capacities],
        "crossover": [clean(c) for c in a.crossovers],
        # the engines' own figures during the phases (analysis.service.fleet)
        "fleet": {
            "cells": [clean(c) for c in a.fleet],
            "admissible": [clean(x) for x in a.admissible],
            "draft_concurrency": [clean(d) for d in a.draft_concurrency],
        },
    }


def _cost(a: PilotAnalysis) -> dict[str, Any]:
    """Per arm, the one-line verdict on each candidate's cost, and its whole first year (every
    R8 item, priced or not: ``analysis.service.ledger``)."""
    return {
        "arms": [clean(c) for c in a.costs],
        "lines": [clean(c) for c in a.cost_lines],
        "ledgers": [clean(x) for x in a.ledgers],
    }


def _pilot_section(p: PilotRecord) -> dict[str, Any]:
    return {
        "pilot_id": p.pilot_id,
        "name": p.name,
        "status": p.status,
        "created_unix": p.created_unix,
        "finished_unix": p.finished_unix,
        "config_sha256": p.config_sha256,
        "specpilot_version": p.specpilot_version,
        "notes": p.notes,
        "config": clean(p.config),  # the pilot as given: re-run it after a model upgrade
        # which traffic it replayed: two reports of one schedule can be compared (specpilot diff)
        "schedule": schedule_fingerprint(p.schedule),
    }
