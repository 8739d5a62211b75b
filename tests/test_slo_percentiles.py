"""SLOs as users write them (issue 50 item 3): percentile conditions per group, checked on each
load cell and shown in the report (the rollback rules: ``test_rollback_engines``).

A per-request condition (``slo.ttft_s``, the deadline) decides whether a request is on time; a
percentile condition (``slo.conditions``) passes or fails an (arm, group, load level) cell.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from pilot_cases import PHASES, decode_stalled
from specpilot.analysis import AnalysisConfig, analyze
from specpilot.analysis.service.slo import conditions_of
from specpilot.definitions import SLO_METRICS, SLO_PERCENTILES, SLOCondition
from specpilot.report import build_report
from specpilot.report.schema import load_schema, validate
from specpilot.workload.config import WorkloadError, parse_workload
from specpilot.workload.schedule import build_schedule

CFG = AnalysisConfig(bootstrap_resamples=200)
P50 = {"metric": "tpot_ms", "percentile": 50, "max": 12}
P99 = {"metric": "tpot_ms", "percentile": 99, "max": 20}


def workload(slo: dict) -> dict:
    return {
        "seed": 1,
        "groups": {"code": {"slo": slo}},
        "phases": [{"name": "peak", "duration_s": 4, "arrival": {"kind": "poisson", "rate": 1}}],
    }


def cell(a, arm: str, phase: str, group: str = "code"):
    return next(c for c in a.load_cells if (c.arm, c.phase, c.task_group) == (arm, phase, group))


# -- the form -----------------------------------------------------------------------------


def test_conditions_parse_and_reach_the_schedule_and_back() -> None:
    cfg = parse_workload(workload({"ttft_s": 1, "deadline_s": 20, "conditions": [P50, P99]}))
    sched = build_schedule(cfg)
    stored = sched.to_dict()["groups"]["code"]["slo"]
    assert stored == {
        "ttft_s": 1.0,
        "deadline_s": 20.0,
        "conditions": [
            {"metric": "tpot_ms", "percentile": 50, "max": 12.0},
            {"metric": "tpot_ms", "percentile": 99, "max": 20.0},
        ],
    }
    assert conditions_of(sched.to_dict()) == {
        "code": (SLOCondition("tpot_ms", 50, 12.0), SLOCondition("tpot_ms", 99, 20.0))
    }
    # per request nothing changes: the schedule's requests carry TTFT SLO and deadline only
    assert {(r.ttft_slo_s, r.deadline_s) for r in sched.requests} == {(1.0, 20.0)}


def test_a_file_without_conditions_dumps_hashes_and_schedules_as_before() -> None:
    """No ``conditions`` key anywhere, so a pilot started before they existed resumes."""
    cfg = parse_workload(workload({"ttft_s": 1, "deadline_s": 20}))
    assert "conditions" not in json.dumps(cfg.model_dump(mode="json"))
    assert "conditions" not in json.dumps(build_schedule(cfg).to_dict()["groups"])
    assert conditions_of(build_schedule(cfg).to_dict()) == {}
    with_them = parse_workload(workload({"ttft_s": 1, "deadline_s": 20, "conditions": [P99]}))
    assert with_them.sha256() != cfg.sha256()


@pytest.mark.parametrize(
    ("condition", "said"),
    [
        ({"metric": "tpot", "percentile": 99, "max": 80}, "conditions[0].metric"),
        ({"metric": "tpot_ms", "percentile": 95, "max": 80}, "50, 90 or 99"),
        ({"metric": "tpot_ms", "percentile": 99, "max": 0}, "conditions[0].max"),
        ({"metric": "tpot_ms", "p": 99, "max": 80}, "conditions[0]"),
    ],
)
def test_a_bad_condition_is_refused_with_its_field(condition: dict, said: str) -> None:
    with pytest.raises(WorkloadError, match=r"(?s)" + said.replace("[", r"\[").replace(".", r"\.")):
        parse_workload(workload({"ttft_s": 1, "deadline_s": 20, "conditions": [condition]}))


def test_one_threshold_per_quantity_and_percentile() -> None:
    twice = [P99, {"metric": "tpot_s", "percentile": 99, "max": 0.02}]
    with pytest.raises(WorkloadError, match="p99 tpot given twice"):
        parse_workload(workload({"ttft_s": 1, "deadline_s": 20, "conditions": twice}))


# -- the cells ----------------------------------------------------------------------------


def test_p99_tpot_fails_where_the_decode_stalls_and_p50_passes() -> None:
    a = analyze(decode_stalled([P50, P99]), CFG)
    spec = cell(a, "spec", "peak")
    p50, p99 = spec.slo_checks
    assert (p50.metric, p50.percentile, p50.threshold, p50.passed) == ("tpot_ms", 50, 12.0, True)
    assert (p99.metric, p99.percentile, p99.threshold, p99.passed) == ("tpot_ms", 99, 20.0, False)
    # observed is the cell's own percentile in the load table, in the metric's unit
    assert p50.observed == pytest.approx(spec.tpot.p50 * 1000)
    assert p99.observed == pytest.approx(spec.tpot.p99 * 1000) and p99.observed > 20
    assert p50.n == p99.n == spec.tpot.n == 60
    # the same arm off-peak, and the baseline at peak, pass both
    for other in (cell(a, "spec", "off_peak"), cell(a, "base", "peak")):
        assert [k.passed for k in other.slo_checks] == [True, True], other.slo_checks
    # the pooled cell mixes groups whose thresholds differ: it is checked per group only
    assert cell(a, "spec", "peak", "*").slo_checks == ()


def test_a_percentile_among_requests_that_never_finished_fails_as_not_reached() -> None:
    d = decode_stalled([P50, P99])
    n = 0
    for i, r in enumerate(d.requests):  # two of the spec arm's peak requests time out
        if r.arm == "spec" and r.phase.startswith("peak") and n < 2:
            d.requests[i] = dataclasses.replace(r, status="timeout", done_t=None)
            n += 1
    k = cell(analyze(d, CFG), "spec", "peak").slo_checks[1]
    assert (k.observed, k.passed) == (None, False)


def test_a_check_without_rows_is_not_evaluated() -> None:
    """ITL needs chunk records: a pilot without them has nothing to take p90 over."""
    itl = {"metric": "itl_ms", "percentile": 90, "max": 30}
    k = cell(analyze(decode_stalled([itl]), CFG), "base", "peak").slo_checks[0]
    assert (k.n, k.observed, k.passed) == (0, None, None)


def test_capacity_stops_at_the_level_whose_percentile_condition_failed() -> None:
    a = analyze(decode_stalled([P50, P99]), CFG)
    spec = next(c for c in a.capacities if (c.arm, c.task_group) == ("spec", "code"))
    assert spec.capacity_rps == PHASES["off_peak"]
    assert spec.limited_at is not None and spec.limited_at.startswith(
        "peak at 4 req/s: p99 tpot_ms"
    )
    assert "on time" not in spec.limited_at  # on time held: the percentile condition stopped it
    assert [p.slo_failed for p in spec.points] == [(), (f"p99 tpot_ms {spec_p99(a):.4g} > 20",)]
    # without the conditions the same pilot's speculative arm sustains the peak
    plain = analyze(decode_stalled([]), CFG)
    again = next(c for c in plain.capacities if (c.arm, c.task_group) == ("spec", "code"))
    assert (again.capacity_rps, again.limited_at) == (PHASES["peak"], None)


def spec_p99(a) -> float:
    return cell(a, "spec", "peak").slo_checks[-1].observed


# -- the report ---------------------------------------------------------------------------


def test_report_cells_carry_slo_checks_that_the_schema_validates() -> None:
    r = build_report(decode_stalled([P50, P99]), CFG, plots=False)
    doc = json.loads(r.files()["report.json"])
    assert validate(doc) == []
    cells = {(c["arm"], c["phase"], c["task_group"]): c for c in doc["load"]["cells"]}
    assert all("slo_checks" in c for c in cells.values())
    got = cells[("spec", "peak", "code")]["slo_checks"]
    assert [(k["metric"], k["percentile"], k["threshold"], k["pass"]) for k in got] == [
        ("tpot_ms", 50, 12.0, True),
        ("tpot_ms", 99, 20.0, False),
    ]
    assert got[1]["observed"] > 20 and got[1]["n"] == 60
    assert cells[("spec", "peak", "*")]["slo_checks"] == []
    bad = json.loads(json.dumps(doc))
    bad["load"]["cells"][0]["slo_checks"] = [{**got[1], "pass": "no"}]
    bad["load"]["cells"][1]["slo_checks"] = [{**got[1], "p99": 1.0}]
    errs = validate(bad)
    assert any("/load/cells/0/slo_checks/0/pass" in e for e in errs), errs
    assert any("/load/cells/1/slo_checks/0" in e and "p99" in e for e in errs), errs
    # the failed check is shown in both formats, the passed ones only in the HTML table
    md = r.markdown[r.markdown.index("## SLO percentile conditions") :]
    assert md.startswith("## SLO percentile conditions: 1 of 16 checks failed")
    assert "| peak | code | spec | p99 tpot_ms <= 20 |" in md and "| FAIL |" in md
    assert "p50 tpot_ms" not in md.split("## Paired")[0]
    assert "SLO percentile conditions" in r.html and "1 of 16 failed" in r.html


def test_the_schema_names_the_metrics_and_percentiles_the_config_accepts() -> None:
    check = load_schema()["$defs"]["slo_check"]["properties"]
    assert tuple(check["metric"]["enum"]) == SLO_METRICS
    assert tuple(check["percentile"]["enum"]) == SLO_PERCENTILES
