"""The first page in plain words (issue 51, item 2; ``report.firstpage``): the measured effect
leads each paragraph, an undecided group gets minutes and the command, and the checks line
says what lets the page say so. Seeded synthetic pilots (``pilot_cases``), reported whole."""

from __future__ import annotations

import re

from pilot_cases import full_case
from specpilot.analysis import AnalysisConfig
from specpilot.report import build_report
from specpilot.report.firstpage import first_page, minutes_for
from specpilot.report.schema import validate


def _report():  # type: ignore[no-untyped-def]
    return build_report(
        full_case(drill_status="done"), AnalysisConfig(bootstrap_resamples=200), plots=False
    )


def test_each_paragraph_leads_with_what_was_measured() -> None:
    rep = _report()
    doc = rep.document
    assert validate(doc) == []
    paras = {p["kind"]: p for p in doc["first_page"]["paragraphs"]}
    adopt, reject = paras["adopt"], paras["do_not_adopt"]
    assert adopt["groups"] == ["zh"] and adopt["text"].startswith("Switch spec on for zh tasks")
    # the effect with its interval, as the comparison cell has it
    cell = next(
        c
        for c in doc["comparisons"]
        if c["candidate_arm"] == "spec" and c["task_group"] == "zh" and c["phase"] == "peak"
    )
    low = f"{cell['task_rel_change']['low'] * 100:+.1f}%"
    assert low in adopt["text"] and "Cost: not priced" in adopt["text"]
    assert "Roll back when: zh: " in adopt["text"]
    # the slowdown measured comes before any reason
    assert re.match(
        r"Do not switch spec on for code: task time measured slower, \+\d", reject["text"]
    )
    for body in (rep.markdown, rep.html):
        assert "Switch spec on for zh tasks" in body
    assert rep.markdown.index("## The decision") < rep.markdown.index("## ADOPT")


def test_the_checks_line_names_each_check_and_links_its_section() -> None:
    doc = _report().document
    checks = {c["name"]: c for c in doc["first_page"]["checks"]}
    assert set(checks) == {"planted", "A/A", "quality"}
    assert checks["quality"]["ok"] is False and "code" in checks["quality"]["text"]
    assert checks["planted"]["ok"] is None  # this pilot planted nothing: said, not ticked
    broken = {**doc, "aa_control": {"cells": 4, "directional": ["x"]}}
    assert [c["ok"] for c in first_page(broken)["checks"] if c["name"] == "A/A"] == [False]


def test_an_undecided_group_gets_minutes_and_the_command() -> None:
    doc = _report().document
    undecided = {
        **doc,
        "pilot": {
            **doc["pilot"],
            "name": "svc",
            "created_unix": 0.0,
            "finished_unix": 600.0,
            "config": {"episodes": {"per_level": 10}},
        },
        "verdicts": [
            {
                **doc["verdicts"][0],
                "groups": [{"task_group": "zh", "verdict": "UNDECIDED", "windows": []}],
            }
        ],
        "comparisons": [
            {**c, "outcome": "insufficient", "episodes_needed": 25} for c in doc["comparisons"]
        ],
    }
    (p,) = first_page(undecided)["paragraphs"]
    assert p["kind"] == "undecided"
    assert "run it again for about 25 minutes on this machine" in p["text"]
    assert "`specpilot pilot PILOT.yaml --episodes 25`" in p["text"]
    assert minutes_for(25, 10, 10.0) == 25 and minutes_for(11, 10, 9.5) == 11
