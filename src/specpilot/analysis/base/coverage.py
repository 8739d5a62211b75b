"""What a pilot file covers: phases a killed run left incomplete, arms that cannot be judged,
and each arm's latency distribution over every steady request (the report's CDFs).

    >>> from specpilot.records import PilotData, PilotRecord
    >>> cut_phases(PilotData(PilotRecord("p", "demo", {}, "", "0", 0.0)))
    []
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specpilot.analysis.base.columns import quantiles
from specpilot.analysis.base.requests import RequestTable
from specpilot.records import PilotData


def latency_cdf(table: RequestTable, points: int = 101) -> dict[str, dict[str, list[Any]]]:
    """Per arm: E2E and TTFT quantiles at ``points`` levels over all steady requests; a level
    only failed requests reach is None (the curve stops short of 1 by the failed fraction)."""
    out: dict[str, dict[str, list[Any]]] = {}
    qs = np.linspace(0, 1, points).tolist()
    for arm in sorted(set(table.arm.tolist())):
        m = (table.arm == arm) & ~table.cold_start
        out[arm] = {
            "q": qs,
            "e2e": quantiles(table.e2e[m], qs),
            "ttft": quantiles(table.ttft[m], qs),
        }
    return out


def cut_phases(data: PilotData) -> list[str]:
    """One note per measured phase that did not complete (a killed or interrupted run): how
    many of its scheduled requests have a record. Its cells are shown, and marked here."""
    got: dict[tuple[str, str], int] = {}
    for r in data.requests:
        got[(r.run_id, r.phase)] = got.get((r.run_id, r.phase), 0) + 1
    cols = data.request_columns
    if cols is not None:
        for run_id, phase in zip(cols["run_id"], cols["phase"], strict=True):
            got[(str(run_id), str(phase))] = got.get((str(run_id), str(phase)), 0) + 1
    return [
        f"{p.arm} phase {p.phase} is not complete ({p.status}): {got.get((p.run_id, p.phase), 0)} "
        f"of its {p.scheduled} scheduled requests have a record; the run ended before the phase "
        "did, and its cells measure only that part"
        for p in data.phases
        if p.status != "complete" and not p.warmup
    ]


def not_measured(data: PilotData) -> dict[str, str]:
    """Arms that cannot be judged, with why: failed or interrupted in any run, or never
    finished (still "running" or "planned" in the file) with a measured phase not complete."""
    out: dict[str, str] = {}
    complete = {(p.run_id, p.phase) for p in data.phases if p.status == "complete"}
    measured = {p.phase for p in data.phases if not p.warmup}
    for r in data.arms:
        if r.status in ("failed", "interrupted"):
            out[r.arm] = f"{r.status}" + (f": {r.error}" if r.error else "")
        elif r.status != "complete":
            left = sorted(ph for ph in measured if (r.run_id, ph) not in complete)
            if left or not measured:
                out[r.arm] = f"{r.status}, phases not complete: {', '.join(left) or 'none ran'}"
    return out
