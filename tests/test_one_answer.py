"""One answer per question: for every (candidate, group, load level) the terminal summary,
``report.md``, ``report.html`` and ``report.json`` say the same thing, and the capacity
section's crossover is the verdict's own window.

Hand-built pilots (``pilot_cases``) with every outcome a cell can have: faster, slower, no
difference inside the margin, undecided for too few pairs, and a window that stops paying.
"""

from __future__ import annotations

import html
import re

import pytest

from pilot_cases import Cell, case, full_case
from specpilot.analysis import AnalysisConfig
from specpilot.pilot.run.finish import summary
from specpilot.report import build_report

CFG = AnalysisConfig(bootstrap_resamples=150)
WORDS = {"insufficient": "undecided", "no_difference": "no difference"}

CASES = {
    "windows": {("code", "off_peak"): Cell(spec=0.7), ("code", "peak"): Cell(spec=1.3)},
    "mixed": {
        ("code", "off_peak"): Cell(spec=0.7),
        ("code", "peak"): Cell(spec=1.0, n=80),
        ("zh", "off_peak"): Cell(spec=0.7, n=5),
        ("zh", "peak"): Cell(spec=1.2, n=6),
    },
    "undecided": {
        (g, p): Cell(spec=0.6, n=5) for g in ("code", "zh") for p in ("off_peak", "peak")
    },
}


def _outcome_word(text: str) -> str:
    tail = text.rsplit("-> ", 1)[1]
    return next(w for w in ("faster", "slower", "no difference", "undecided") if tail.startswith(w))


def check_one_answer(doc: dict, markdown: str, page_html: str, terminal: str) -> int:
    """Every (candidate, group, level) reads the same in the four outputs; the capacity
    crossover is the verdict's window. Returns the cells checked (also used by the end-to-end
    test on a real pilot's files)."""
    page = html.unescape(re.sub(r"\s+", " ", page_html))
    outcome = {
        (c["candidate_arm"], c["task_group"], c["phase"]): c["outcome"] for c in doc["comparisons"]
    }
    seen = 0
    for v in doc["verdicts"]:
        for c in v["conditions"]:
            if c["kind"] != "e2e_change":
                continue
            s = c["subject"]
            want = outcome[(v["candidate_arm"], s["task_group"], s["phase"])]
            assert _outcome_word(c["text"]) == WORDS.get(want, want), c["text"]
            assert c["text"] in markdown and re.sub(r"\s+", " ", c["text"]) in page
            seen += 1
        for g in v["groups"]:  # the terminal's group line: the JSON's group verdict
            assert re.search(rf"^ +{re.escape(g['task_group'])} +{g['verdict']}\b", terminal, re.M)
        assert v["verdict"] in terminal and v["verdict"] in markdown
        assert f'class="verdict-block verdict-{v["verdict"]}"' in page_html
    windows = {
        (v["candidate_arm"], g["task_group"]): g["window"]
        for v in doc["verdicts"]
        for g in v["groups"]
    }
    for x in doc["capacity"]["crossover"]:
        assert x["summary"] == windows[(x["candidate_arm"], x["task_group"])]
    return seen


@pytest.mark.parametrize("name", [*CASES, "full"])
def test_every_format_gives_one_answer_per_cell(name):
    data = full_case() if name == "full" else case(CASES[name])
    rep = build_report(data, CFG, plots=False)
    assert check_one_answer(rep.document, rep.markdown, rep.html, summary(rep.document, [], 1.0))


def test_an_undecided_cell_never_shows_a_deciding_interval_off_zero():
    rep = build_report(case(CASES["undecided"]), CFG, plots=False)
    for c in rep.document["comparisons"]:
        e = c["task_rel_change"]
        off = e["low"] is not None and (e["low"] > 0 or e["high"] < 0)
        if c["outcome"] == "insufficient" and off:
            v = rep.document["verdicts"][0]
            texts = [
                x["text"]
                for x in v["conditions"]
                if x["kind"] == "e2e_change"
                and (x["subject"]["task_group"], x["subject"]["phase"])
                == (c["task_group"], c["phase"])
            ]
            assert all("not deciding" in t for t in texts), texts
