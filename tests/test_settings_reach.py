"""Every threshold has one home (``AnalysisConfig``) and reaches every section that uses it:
``specpilot report FILE --config`` with other thresholds changes the cells' outcomes and the
rollback drill's parity alike (the parity was once computed while the pilot ran, with its own
hard-coded 8 pairs and 10% margin, and the report could not change it).

A real DuckDB pilot file (``store.Store``) holding a hand-built pilot (``pilot_cases.case``)
and a done drill whose rolled-back requests run 6% slower than the baseline's same prompts.
"""

from __future__ import annotations

import json

import numpy as np

from pilot_cases import Cell, case
from specpilot.cli import main
from specpilot.records import DRILL_PHASE, DrillRecord, RequestRecord, level_of
from specpilot.store import Store


def _pilot_file(path):
    d = case({("code", p): Cell(spec=1.0, n=40, noise=0.02) for p in ("off_peak", "peak")})
    base = [r for r in d.requests if r.arm == "base" and level_of(r.phase) == "peak"]
    rng = np.random.default_rng(1)
    drill = [
        RequestRecord(
            "run-spec",
            "spec",
            DRILL_PHASE,
            r.task_group,
            r.request_id.replace("peak", DRILL_PHASE),
            100.0 + r.scheduled_t,
            "ok",
            prompt_id=r.prompt_id,
            sent_t=100.0 + r.sent_t,
            done_t=100.0 + r.sent_t + (r.done_t - r.sent_t) * 1.06 * rng.lognormal(0, 0.01),
        )
        for r in base
        if r.done_t is not None and r.sent_t is not None
    ]
    drill_rec = DrillRecord(
        "run-spec", "spec", DRILL_PHASE, "runtime_switch", "done",
        requested_t=99.0, in_force_t=99.5, switch_in_force_s=0.5, detail={"source_phase": "peak"},
    )  # fmt: skip
    with Store(path) as st:
        st.add_pilot(d.pilot)
        for a in d.arms:
            st.add_arm(a)
        st.add_phases(d.phases)
        st.add_requests([*d.requests, *drill])
        st.add_drills([drill_rec])
    return len(drill)


def _report(tmp_path, pilot, name, cfg_text):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(cfg_text)
    assert (
        main(
            [
                "report",
                str(pilot),
                "--no-plots",
                "--config",
                str(cfg),
                "--out",
                str(tmp_path / name),
            ]
        )
        == 0
    )
    return json.loads((tmp_path / name / "report.json").read_text())


def test_report_config_changes_the_cells_and_the_drill_parity(tmp_path, capsys):
    pilot = tmp_path / "p.duckdb"
    n = _pilot_file(pilot)
    wide = _report(tmp_path, pilot, "wide", "verdict: {equivalence_margin: 0.10}\n")
    tight = _report(tmp_path, pilot, "tight", "verdict: {equivalence_margin: 0.03}\n")
    many = _report(tmp_path, pilot, "many", f"verdict: {{min_pairs: {n + 1}}}\n")
    capsys.readouterr()

    def parity(doc):
        (d,) = [x for x in doc["drills"] if x["arm"] == "spec"]
        return d["detail"]["post_rollback"]

    # rolled back 6% slower: back to the baseline within +-10%, not within +-3%
    assert parity(wide)["outcome"] == "parity" and parity(wide)["pairs"] == n
    assert parity(tight)["outcome"] == "differs"
    assert parity(many)["outcome"] == "insufficient" and f">= {n + 1}" in parity(many)["text"]

    def outcomes(doc):
        return {
            c["outcome"]
            for c in doc["comparisons"]
            if (c["baseline_arm"], c["candidate_arm"]) == ("base", "spec")
        }

    # the same thresholds reach the cells: no difference inside +-10%, undecided at 41 pairs
    assert outcomes(wide) == {"no_difference"}
    assert outcomes(many) == {"insufficient"}
