"""Every comparison cell and verdict of a fixed pilot stays as it was across refactors.

The pilot is ``pilot_cases.full_case()`` (seeded; every kind of record), analysed through the
report's own path (``build_report``); what is compared is each cell's outcome, pairs, episodes
and task-time interval (to 6 decimals) and each verdict's decision, summary and hypothesis
reasons. A change that moves any of them fails here and must say why in its commit; after such
a change, regenerate the file with

    SPECPILOT_REGOLD=1 .venv/bin/python -m pytest tests/test_report_cells_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pilot_cases import full_case
from specpilot.report import build_report

GOLDEN = Path(__file__).parent / "data" / "report_cells.json"


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def cells_and_verdicts(doc: dict[str, Any]) -> dict[str, Any]:
    cells = [
        {
            "cell": f"{c['baseline_arm']} -> {c['candidate_arm']} / {c['phase']} / {c['task_group']}",
            "outcome": c["outcome"],
            "pairs": c["pairs"],
            "both_ok": c["both_ok"],
            "episodes": c["clusters"],
            "task": [_round(c["task_rel_change"][k]) for k in ("estimate", "low", "high")],
            "undecided_because": c.get("undecided_because"),
            "episodes_needed": c.get("episodes_needed"),
        }
        for c in doc["comparisons"]
    ]
    verdicts = [
        {
            "candidate": v["candidate_arm"],
            "verdict": v["verdict"],
            "summary": v["summary"],
            "hypothesis_reasons": v["hypothesis_reasons"],
        }
        for v in doc["verdicts"]
    ]
    return {"cells": sorted(cells, key=lambda c: c["cell"]), "verdicts": verdicts}


def test_every_cell_and_verdict_of_the_fixed_pilot_is_as_stored() -> None:
    now = cells_and_verdicts(build_report(full_case(), plots=False).document)
    if os.environ.get("SPECPILOT_REGOLD"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(now, indent=1, ensure_ascii=False) + "\n")
    stored = json.loads(GOLDEN.read_text())
    assert len(now["cells"]) == len(stored["cells"]) > 0
    for got, want in zip(now["cells"], stored["cells"], strict=True):
        assert got == want, f"{want['cell']} moved"
    assert now["verdicts"] == stored["verdicts"]
