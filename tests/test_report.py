"""The report: JSON against its schema, R9 order, honest wording, files and the CLI."""

from __future__ import annotations

import copy
import html
import json
import re

import pytest

import specpilot.store as store
from pilot_cases import Cell, case, full_case
from specpilot.analysis import AnalysisConfig
from specpilot.cli import main
from specpilot.records import PilotData, PilotRecord, level_of
from specpilot.report import build_report
from specpilot.report.page import SECTIONS
from specpilot.report.schema import validate

CFG = AnalysisConfig(bootstrap_resamples=200)


@pytest.fixture(scope="module")
def report():
    return build_report(full_case(), CFG, plots=False)


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_document_validates_and_a_broken_one_does_not(report) -> None:
    doc = json.loads(report.files()["report.json"])  # what is written, NaN-free
    assert validate(doc) == []
    bad = copy.deepcopy(doc)
    bad["verdicts"][0]["verdict"] = "MAYBE"
    del bad["load"]["cells"][0]["e2e"]["p99"]
    errs = validate(bad)
    assert any("/verdicts/0/verdict" in e for e in errs) and any("p99" in e for e in errs)
    empty = build_report(PilotData(PilotRecord("p", "empty", {}, "", "0", 0.0)), CFG, plots=False)
    assert validate(json.loads(empty.files()["report.json"])) == []


def test_sections_in_r9_order_with_the_verdict_on_top(report) -> None:
    positions = [report.html.index(f'<section id="{sid}">') for sid, _, _ in SECTIONS]
    assert positions == sorted(positions) and SECTIONS[0][0] == "verdict"
    first = report.html.index("<section")
    assert report.html.index('class="verdict-block verdict-ADOPT"') < report.html.index(
        'id="load-range"'
    )
    assert first == report.html.index('<section id="verdict">')
    # the hardware and its verify cost stand next to the verdict
    verdict = report.html[first : report.html.index('<section id="load-range">')]
    assert "Intel(R) Xeon(R) Processor" in verdict and "verify cost v(n)" in verdict


def test_wording_rules_hold_in_every_rendered_format(report) -> None:
    for name, body in (("html", text_of(report.html)), ("md", report.markdown)):
        low = body.lower()
        assert "accuracy" not in low, name  # acceptance rate is never answer quality
        for m in re.finditer(r"(\S+)\s+speed-up", body):  # every speed-up says what it is of
            assert m.group(1).lower() in ("decode", "end-to-end", "a"), (
                name,
                body[m.start() - 40 : m.end() + 20],
            )
        # latency improved, resources the same, no business value: never a saving
        assert "saving" not in low, name
    assert "latency change, no cost change" in report.markdown


def test_a_saving_is_named_only_when_resources_go_down() -> None:
    cs = {(g, p): Cell(spec=0.5) for g in ("code", "zh") for p in ("off_peak", "peak")}
    d = case(cs)
    for r in d.requests:
        if r.arm in ("base", "alt") and level_of(r.phase) == "peak" and r.done_t is not None:
            r.done_t += 5.0
    cfg = CFG.model_copy(
        update={
            "cost": CFG.cost.model_copy(update={"target_peak_rate": 4.0}),
            "verdict": CFG.verdict.model_copy(update={"slo_attainment": 0.9}),
        }
    )
    md = build_report(d, cfg, plots=False).markdown
    assert "saving: 1 device(s) instead of 4 at the target peak rate (resources go down)" in md


def test_quality_compat_and_drills_are_reported(report) -> None:
    t = text_of(report.html)
    assert "code: key checks passed 4/10 vs the baseline" in t and "significantly fewer" in t
    assert "compat: stop_in_round fails in both arms" in t  # a note, not a gate
    gates = report.document["quality"]["gates"]
    # zh passes 10/10 in both arms: too few outputs to show non-inferiority, said, not a gate
    assert {(g["task_group"], g["key_gate"]) for g in gates} == {
        ("code", "fail"),
        ("zh", "underpowered"),
    }
    matrix = {
        (m["feature"], m["arm"]): m["status"] for m in report.document["compatibility"]["matrix"]
    }
    assert (
        matrix[("stop_in_round", "spec")] == "fail"
        and matrix[("tool_call", "base")] == "unsupported"
    )
    assert "not_possible" in t and "arm given only by URL" in t
    d = full_case()
    d.drills = []
    doc = build_report(d, CFG, plots=False).document
    assert [(x["arm"], x["status"]) for x in doc["drills"]] == [("spec", "not_drilled")]


def test_every_number_table_states_its_n(report) -> None:
    for c in report.document["load"]["cells"]:
        assert c["e2e"]["n"] == c["scheduled"]  # every scheduled request counted
    assert "(n=40)" in text_of(report.html)


def test_files_written(tmp_path, report) -> None:
    paths = report.write(tmp_path / "out")
    assert sorted(p.name for p in paths) == [
        "report.html",
        "report.json",
        "report.md",
        "rollback-spec.rules.yml",
        "rollout",  # the folder, once (report.rollout: tests/test_rollout.py)
    ]
    assert json.loads((tmp_path / "out" / "report.json").read_text())["schema_version"] == 1


def test_report_command(tmp_path, monkeypatch, capsys) -> None:
    # The command reads through the store's typed reader (tested in test_store.py); here it is
    # handed a hand-built pilot whose verdict is known, in place of the file it would read.
    data = full_case()
    data.pilot.config = {
        **data.pilot.config,
        "analysis": {"bootstrap_resamples": 150, "verdict": {"slo_attainment": 0.9}},
    }
    seen = {}

    def read_pilot(path, **kw):
        seen["path"], seen["kw"] = str(path), kw
        return data

    monkeypatch.setattr(store, "read_pilot", read_pilot, raising=False)
    pilot = tmp_path / "p.duckdb"
    pilot.write_bytes(b"")
    cfg = tmp_path / "a.yaml"
    cfg.write_text("seed: 7\n")
    assert main(["report", str(pilot), "--no-plots", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ADOPT: spec vs base") and seen["path"] == str(pilot)
    assert seen["kw"] == {"columns": True}  # 1M requests arrive as numpy columns
    doc = json.loads((tmp_path / "p-report" / "report.json").read_text())
    assert (
        doc["analysis_config"]["seed"] == 7 and doc["analysis_config"]["bootstrap_resamples"] == 150
    )
    cfg.write_text("verdict: {slo_atainment: 0.9}\n")
    assert main(["report", str(pilot), "--no-plots", "--config", str(cfg)]) == 2
    assert "verdict.slo_atainment" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.duckdb")]) == 2


def test_the_group_matrix_and_time_per_token_are_analysis_results_the_report_only_draws():
    from pilot_cases import full_case
    from specpilot.analysis.pilot import analyze
    from specpilot.report import build_report

    a = analyze(full_case())
    m = a.group_matrix
    base, cand = a.plan.pairs[0]
    assert m is not None and m.candidate_arm == cand and "*" not in m.groups and m.groups
    for g, row in zip(m.groups, m.values, strict=True):
        worst = min(1 / (1 + c.task_rel_change.estimate) for c in a.comparisons
                    if (c.baseline_arm, c.candidate_arm, c.task_group) == (base, cand, g)
                    and c.task_rel_change.estimate is not None)  # fmt: skip
        assert row[2] == pytest.approx(worst)  # the worst load level, not the mean or best
        r = next(r for r in a.rounds_pooled if (r.arm, r.task_group) == (cand, g))
        assert row[0] == r.mean_acceptance_length and row[1] == r.decode_speedup
    pooled = [r for r in a.rounds_pooled if r.task_group != "*" and r.committed]
    assert len(a.time_per_token) == len(pooled)
    t, r = a.time_per_token[0], pooled[0]
    assert t.verify_ms == pytest.approx(1000 * r.verify_s / r.committed)
    figs = {f["id"]: f["data"] for f in build_report(full_case(), plots=False).document["figures"]}
    assert figs["group_matrix"]["values"] == m.values and figs["group_matrix"]["groups"] == m.groups
    assert [b["verify_ms"] for b in figs["round_time_stack"]["bars"]] == pytest.approx(
        [x.verify_ms for x in a.time_per_token]
    )


def test_the_verdict_block_shows_the_simulated_crossover_and_setting_labelled_as_simulated():
    from pilot_cases import full_case
    from specpilot.report import build_report
    from specpilot.simulate.section import pilot_simulation

    assert build_report(full_case(), plots=False).document["simulation"]["notes"] == [
        "not simulated: this report was built without the simulator"
    ]
    r = build_report(full_case(), plots=False, simulation=pilot_simulation)
    doc = r.document
    v = doc["verdicts"][0]
    sim = doc["simulation"]
    pair = (v["baseline_arm"], v["candidate_arm"])
    cross = [x for x in sim["crossovers"] if (x["baseline_arm"], x["candidate_arm"]) == pair]
    ks = [k for k in sim["k_schedules"] if (k["baseline_arm"], k["candidate_arm"]) == pair]
    assert cross and ks and ks[0]["check"]["text"].startswith("checked step by step")
    block = r.html.split(f'data-candidate="{v["candidate_arm"]}"', 1)[1].split("<h3>", 1)[0]
    assert f"Simulated crossover: {cross[0]['text']}" in html.unescape(block)
    label = "Simulated deployable setting" + (
        ":" if ks[0]["validated"] else " (not validated: no evidence):"
    )
    assert label in html.unescape(block) and ks[0]["check"]["text"] in html.unescape(block)
    if not ks[0]["validated"]:
        assert ks[0]["check"]["text"].endswith("missed its gate)")
    md = r.markdown.split(f"## {v['verdict']}: {v['candidate_arm']}", 1)[1].split("## ", 1)[0]
    assert f"- Simulated crossover: {cross[0]['text']}" in md


def test_the_forest_plot_heads_the_verdict_with_planted_and_aa_rows(report) -> None:
    """Every cell in one picture, first in the verdict section: candidates at their deciding
    interval, the planted arm with a tick at +f and its A/A contrast (the planted less f) with
    one at 0, so a planted +15% measured as +15.7% is an A/A of +0.6%."""
    from specpilot.report.figures import forest_rows
    from specpilot.report.plots import render_all

    doc = copy.deepcopy(report.document)
    cells = [c for c in doc["comparisons"] if c["task_rel_change"]["estimate"] is not None]
    doc["planted"] = [
        {"arm": "planted", "factor": 0.15, "phase": "peak", "estimate": 0.157, "low": 0.061,
         "high": 0.262, "outcome": "slower"}
    ]  # fmt: skip
    rows = forest_rows(doc)["rows"]
    ctl = doc["aa_control"]["control_arm"]  # the interleaved design's A/A arm: expected at 0
    kinds = [r["kind"] for r in rows[:-2]]
    assert kinds == ["aa" if c["candidate_arm"] == ctl else "candidate" for c in doc["comparisons"]]
    assert {r["expected"] for r in rows[:-2] if r["kind"] == "aa"} == {0.0} and cells
    planted, aa = rows[-2], rows[-1]
    assert planted["expected"] == 0.15 and aa["expected"] == 0.0
    assert aa["estimate"] == pytest.approx(1.157 / 1.15 - 1) and aa["low"] < 0 < aa["high"]
    svg = render_all([{"id": "forest", "data": forest_rows(doc)}])["forest"]
    assert svg and svg.count("<path") > len(rows)  # a mark per row at least
    assert render_all([{"id": "forest", "data": {"rows": [], "margin": 0.1}}])["forest"] is None
    verdict = report.html[report.html.index('<section id="verdict">') :]
    assert verdict.index('data-plot="forest"') < verdict.index('class="verdict-block')


def test_the_markdown_holds_every_r9_deliverable_the_html_holds(report) -> None:
    """Issue 51 item 5: memory, quality per group, the rounds' advance and time split, the drill
    records, each the same table as the HTML's (one row builder for both)."""
    md = report.markdown
    for head in (
        "## Per-round advance and time split",
        "## Quality per group",
        "### Gates",
        "## Memory budget of the draft",
        "## Rollback drills",
        "## Cost",
    ):
        assert head in md, head
    doc = report.document
    for m in doc["memory"]:
        assert f"| {m['candidate_arm']} |" in md.split("## Memory budget of the draft")[1]
    drills = md.split("## Rollback drills")[1]
    assert all(
        f"| {d['arm']} | {d.get('kind', '')} | {d['status']} |" in drills for d in doc["drills"]
    )
    rounds = md.split("## Per-round advance and time split")[1].split("\n## ")[0]
    assert len([ln for ln in rounds.splitlines() if ln.startswith("| ")]) == 1 + len(
        doc["rounds"]["pooled"]
    )
