"""R8: each verdict from a hand-built pilot, the hypothesis flag, rollback rules and cost lines."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from pilot_cases import SYNTHETIC_CONFIG, Cell, case, key_checks
from specpilot.analysis import AnalysisConfig, analyze
from specpilot.analysis.verdicts.decision import Verdict
from specpilot.records import ConsistencyRecord, PilotData, level_of

CFG = AnalysisConfig(bootstrap_resamples=300)
GROUPS = ("code", "zh")
PHASES = ("off_peak", "peak")


def cells(spec=0.7, alt=1.0, n=60, **kw) -> dict:
    return {(g, p): Cell(spec=spec, alt=alt, n=n, **kw) for g in GROUPS for p in PHASES}


def verdict(data, cfg=CFG) -> Verdict:
    a = analyze(data, cfg)
    assert [v.candidate_arm for v in a.verdicts] == ["spec"]
    return a.verdicts[0]


def group(v: Verdict, name: str):
    return next(g for g in v.groups if g.task_group == name)


def test_adopt_with_groups_and_the_load_range_as_conditions() -> None:
    v = verdict(case(cells(0.7)))
    assert v.verdict == "ADOPT" and not v.pilot_hypothesis, v.hypothesis_reasons
    assert v.groups_adopted == ("code", "zh") and v.load_range_rps == (1.0, 4.0)
    e2e = [c for c in v.conditions if c.kind == "e2e_change"]
    assert len(e2e) == 4 and all(c.holds and c.value < 0 for c in e2e)
    assert {c.subject["phase"] for c in e2e} == set(PHASES)


def test_adopt_in_windows_below_the_load_where_it_stops_paying() -> None:
    cs = {(g, "off_peak"): Cell(spec=0.7) for g in GROUPS} | {
        (g, "peak"): Cell(spec=1.3) for g in GROUPS
    }
    v = verdict(case(cs))
    assert v.verdict == "ADOPT_IN_WINDOWS"
    assert v.groups_in_windows == ("code", "zh")
    g = group(v, "code")
    assert (g.below_rps, g.windows) == (4.0, ("off_peak",))
    assert g.bottleneck == "load: speculation does not pay at peak (4 req/s)"
    assert (g.pays_up_to_rps, g.below_rps) == (1.0, 4.0)
    assert "code: pays at 1 req/s, not at 4; not measured between" in v.summary


THREE = {"off_peak": 1.0, "mid": 2.0, "peak": 4.0}


def three_levels(mid: Cell, peak: Cell, low: Cell | None = None) -> PilotData:
    cs = {
        ("code", p): c
        for p, c in (("off_peak", low or Cell(spec=0.7)), ("mid", mid), ("peak", peak))
    }
    d = case(cs)
    for ph in d.phases:
        ph.offered_rate = THREE[level_of(ph.phase)]
    return d


def test_a_one_pair_level_between_paying_levels_does_not_break_the_window() -> None:
    v = verdict(three_levels(Cell(spec=0.7, n=1), Cell(spec=0.7)))
    g = group(v, "code")
    levels = {c.subject["phase"]: c for c in g.conditions if c.kind == "e2e_change"}
    mid = levels["mid"].text
    assert "undecided" in mid and "1 both-ok pairs in 1 episodes" in mid
    assert "-> undecided (1 both-ok pairs in 1 episodes; a direction needs 8 pairs)" in mid
    # pays at 1 and 4 req/s, not measured at 2: a window over the paying levels, never ADOPT
    assert g.verdict == "ADOPT_IN_WINDOWS" and g.windows == ("off_peak", "peak")
    assert g.below_rps is None


def test_the_crossover_is_a_bracket_over_the_measured_levels() -> None:
    # pays at 1 req/s, not measured at 2, does not pay at 4: "pays at 1, not at 4"
    v = verdict(three_levels(Cell(spec=0.7, n=3), Cell(spec=1.3)))
    g = group(v, "code")
    assert (g.verdict, g.pays_up_to_rps, g.below_rps) == ("ADOPT_IN_WINDOWS", 1.0, 4.0)
    assert "pays at 1 req/s, not at 4; not measured between" in v.summary


def test_every_level_insufficient_is_undecided_not_a_negative_verdict() -> None:
    """The pilot could not tell: UNDECIDED with what a decision would take, never the
    DO_NOT_ADOPT that a measured reason gives."""
    cs = {("code", p): Cell(spec=0.5, n=5) for p in PHASES}
    v = verdict(case(cs))
    g = group(v, "code")
    assert (g.verdict, g.evidence) == ("UNDECIDED", "insufficient")
    assert g.bottleneck is not None and g.bottleneck.startswith("undecided: the pilot could not")
    assert v.verdict == "UNDECIDED" and v.summary.startswith("undecided: the pilot could not tell")
    assert "at least 7 episodes per level would give the closest level an estimate" in v.summary
    assert v.pilot_hypothesis
    assert any(
        r.startswith("2 of 2 cells (group x load level) undecided; at least 7 episodes")
        for r in v.hypothesis_reasons
    ), v.hypothesis_reasons


def test_every_group_failing_quality_is_the_headline_even_with_a_speed_win() -> None:
    q = key_checks("base", "code", 10, 0) + key_checks("spec", "code", 4, 6)
    q += key_checks("base", "zh", 10, 0) + key_checks("spec", "zh", 3, 7)
    v = verdict(case(cells(0.5), quality=q))
    assert v.verdict == "DO_NOT_ADOPT"
    assert v.summary.startswith("do not adopt now; fix first: quality gate failed for every group")
    assert v.bottleneck is not None and "speed" not in v.bottleneck


def test_a_phase_measured_beside_other_load_keeps_the_verdict_a_hypothesis() -> None:
    """The episodes' balanced order spreads drift over the arms; load that hit one arm's run of a phase (and
    not the other arms' runs of it) is named. Load on every arm alike is not."""
    import dataclasses

    d = case(cells(0.7))
    d.phases = [dataclasses.replace(p, other_cpu_cores=0.6, steal_fraction=0.0) for p in d.phases]
    assert not verdict(d).pilot_hypothesis  # evenly loaded: the A/A control's business
    d.phases = [
        dataclasses.replace(p, other_cpu_cores=1.5)
        if (p.arm, level_of(p.phase)) == ("spec", "peak")
        else p
        for p in d.phases
    ]
    d.phases += [
        dataclasses.replace(d.phases[0], run_id="run-x", arm="extra-arm", steal_fraction=0.5)
    ]
    v = verdict(d)
    assert v.pilot_hypothesis and v.verdict == "ADOPT"
    shared = [r for r in v.hypothesis_reasons if "shared unevenly" in r]
    assert shared == [
        "measured on a machine shared unevenly: spec/peak: 1.50 cores used outside the pilot "
        "(0.60 beside base/peak) (load that hit one arm's run of a phase and not the others': "
        "drift the episodes' balanced order did not spread; rerun on an idle machine)"
    ], v.hypothesis_reasons  # the arm outside the comparison is not named


def test_an_unstable_a_a_control_keeps_the_verdict_a_hypothesis() -> None:
    # the control's peak run was 15% slower than the baseline's: the machine drifted
    d = case(cells(0.7), drift={("ctl", "peak"): 1.15})
    v = verdict(d)
    assert v.pilot_hypothesis
    assert any(r.startswith("measurement unstable: A/A control") for r in v.hypothesis_reasons)
    assert "directional" in v.aa_control and "unstable" in v.aa_control
    assert "the same sign at every level" not in v.aa_control  # one level moved


def test_a_control_that_differs_the_same_way_in_every_phase_is_named_an_engine_difference():
    """A control 15% faster at every level is engine processes that differ for their whole
    life (seen on the AMD EPYC AVX-512 BF16 kind), and the text says what draws it again:
    more processes per arm."""
    phases = {("ctl", ph): 0.85 for ph in ("off_peak", "peak")}
    v = verdict(case(cells(0.7), drift=phases))
    assert v.pilot_hypothesis and "unstable" in v.aa_control
    assert "the same sign at every level: engines of one config" in v.aa_control
    assert "with more episodes.processes each arm runs on more engines" in v.aa_control


def test_do_not_adopt_names_the_verify_cost_on_this_hardware() -> None:
    v = verdict(case(cells(1.3), verify_ratio=2.2))
    assert v.verdict == "DO_NOT_ADOPT" and v.groups_rejected == ("code", "zh")
    assert v.bottleneck is not None and v.bottleneck.startswith(
        "verification of 4 tokens costs 2.2x one"
    )
    assert "Intel(R) Xeon(R) Processor" in v.bottleneck
    # the same slowdown with cheap verification is blamed on the draft side instead
    v2 = verdict(case(cells(1.3), verify_ratio=1.05))
    assert v2.verdict == "DO_NOT_ADOPT" and "verification" not in (v2.bottleneck or "")


def test_a_group_that_collapses_while_the_mean_looks_fine() -> None:
    cs = {(g, p): Cell(spec=0.6, n=120) for g in ("zh", "structured", "longform") for p in PHASES}
    cs |= {("code", p): Cell(spec=1.4, n=40) for p in PHASES}
    a = analyze(case(cs), CFG)
    pooled = [
        c
        for c in a.comparisons
        if c.task_group == "*" and (c.baseline_arm, c.candidate_arm) == ("base", "spec")
    ]
    assert pooled and all(c.outcome == "faster" for c in pooled)  # the mean looks fine
    v = a.verdicts[0]
    assert group(v, "code").verdict == "DO_NOT_ADOPT"
    assert (
        v.verdict == "ADOPT" and "code" not in v.groups_adopted and v.groups_rejected == ("code",)
    )
    assert "not for code" in v.summary
    slow = [
        c for c in v.conditions if c.subject.get("task_group") == "code" and c.kind == "e2e_change"
    ]
    assert slow and all(not c.holds and c.value > 0 for c in slow)


def test_a_retrieval_dominated_workload_fixes_retrieval_first() -> None:
    # Decode twice as fast, but retrieval is 8 s of a ~10 s task (E2E ~2.06 s, 80% decode):
    # decode is 16% of it, retrieval 79%.
    v = verdict(case(cells(0.5, retrieval_s=8.0)))
    assert v.verdict == "DO_NOT_ADOPT"
    assert v.bottleneck == "fix retrieval first: it is 79% of task time and decode only 16%"
    share = [c for c in group(v, "code").conditions if c.kind == "decode_share"]
    assert share[0].value == pytest.approx(0.164, abs=0.005) and not share[0].holds
    gains = [c for c in group(v, "code").conditions if c.kind == "e2e_change"]
    assert all(c.holds for c in gains)  # the measured gain is kept as data, not hidden


def test_a_quality_failure_with_a_speed_win() -> None:
    q = key_checks("base", "code", 20, 0) + key_checks("spec", "code", 17, 3)
    q += key_checks("base", "zh", 20, 0) + key_checks("spec", "zh", 20, 0)
    a = analyze(case(cells(0.6), quality=q), CFG)
    v = a.verdicts[0]
    code = group(v, "code")
    assert code.verdict == "DO_NOT_ADOPT"
    assert code.bottleneck == (
        "quality: code: key checks passed 17/20 vs the baseline's 20/20, significantly fewer "
        "(upper bound of the difference -0.002 < 0): amount field missing"
    )
    assert v.verdict == "ADOPT" and v.groups_adopted == ("zh",)
    # cost is compared at equal quality where speculation would be on (zh): comparable
    assert a.cost_lines[0].kind == "latency_change_no_cost_change"
    # one answer of 20 lost is no evidence of harm: underpowered, said, and not a gate
    q2 = key_checks("base", "zh", 20, 0) + key_checks("spec", "zh", 19, 1)
    a2 = analyze(case(cells(0.6), quality=q2), CFG)
    zh = next(g for g in a2.gates if g.task_group == "zh")
    assert zh.key_gate == "underpowered" and not zh.failed
    assert any("per arm needed" in n for n in zh.notes)
    assert a2.verdicts[0].verdict == "ADOPT" and a2.verdicts[0].groups_adopted == ("code", "zh")
    q3 = q[:40] + key_checks("base", "zh", 20, 0) + key_checks("spec", "zh", 8, 12)
    a3 = analyze(case(cells(0.6), quality=q3), CFG)  # both groups fail: nothing is comparable
    assert a3.verdicts[0].verdict == "DO_NOT_ADOPT" and a3.cost_lines[0].kind == "not_comparable"


def test_a_consistency_defect_fails_the_group() -> None:
    cons = [
        ConsistencyRecord(
            "p",
            "zh",
            f"zh-{i}",
            "base",
            "spec",
            identical=i > 0,
            divergence_index=3 if i == 0 else None,
            margin=2.5 if i == 0 else None,
            margin_threshold=0.5,
            defect=i == 0,
        )
        for i in range(5)
    ]
    cons.append(
        ConsistencyRecord(
            "p",
            "code",
            "code-0",
            "base",
            "spec",
            identical=False,
            margin=0.01,
            margin_threshold=0.5,
            defect=False,
        )
    )  # a near-tie flip: recorded only
    v = verdict(case(cells(0.7), consistency=cons))
    assert group(v, "zh").verdict == "DO_NOT_ADOPT" and group(v, "code").verdict == "ADOPT"
    assert "zh: greedy defect on zh-0 at token 3" in (group(v, "zh").bottleneck or "")


def test_the_equal_budget_alternative_beating_speculation() -> None:
    v = verdict(case(cells(0.8, alt=0.6)))
    assert v.verdict == "DO_NOT_ADOPT"
    assert v.bottleneck is not None and "equal-budget alternative alt is faster" in v.bottleneck


def test_pilot_hypothesis_reasons() -> None:
    cs = {("code", p): Cell(spec=0.7, n=12) for p in PHASES}
    d = case(cs, config=SYNTHETIC_CONFIG)
    d.requests = [r for r in d.requests if not (r.arm == "spec" and level_of(r.phase) == "peak")]
    d.requests += [r for r in case({("longform", "peak"): Cell(n=3)}).requests if r.arm == "base"]
    v = verdict(d)
    text = " | ".join(v.hypothesis_reasons)
    assert v.pilot_hypothesis and v.summary.endswith("(PILOT_HYPOTHESIS)")
    assert "traffic not representative" in text
    assert "1 decided cells have fewer than 30 paired requests" in text
    assert "group longform has no paired requests" in text
    assert "A/A" not in text  # the control ran and agreed with the baseline


def test_rollback_rules_are_valid_prometheus_rules(tmp_path) -> None:
    cfg = CFG.model_copy(
        update={
            "rollback": CFG.rollback.model_copy(
                update={"group_selectors": {"code": 'model_name="svc-code"'}}
            )
        }
    )
    a = analyze(case(cells(0.7)), cfg)
    doc = yaml.safe_load(a.rollback_yaml["spec"])
    rules = doc["groups"][0]["rules"]
    kinds = {r["labels"]["specpilot_trigger"] for r in rules}
    assert kinds == {
        "key_business_regression",
        "tail_latency",
        "memory_pressure",
        "group_net_slower",
    }
    code = [
        r
        for r in rules
        if r["labels"]["task_group"] == "code"
        and r["labels"]["specpilot_trigger"] == "tail_latency"
    ]
    assert any(
        'model_name="svc-code"' in r["expr"] and r["expr"].endswith("> 3") for r in code
    )  # deadline 3 s
    for r in rules:  # the schema promtool enforces, checked here too
        assert set(r) == {"alert", "expr", "for", "labels", "annotations"}
        assert r["alert"].isidentifier() and r["for"] == "10m"
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus); schema checked above")
    f = tmp_path / "rules.yml"
    f.write_text(a.rollback_yaml["spec"])
    out = subprocess.run(
        [promtool, "check", "rules", str(f)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    f.write_text(a.rollback_yaml["spec"].replace("histogram_quantile(", "histogram_quantile((", 1))
    bad = subprocess.run(
        [promtool, "check", "rules", str(f)], capture_output=True, text=True, check=False
    )
    assert bad.returncode != 0  # promtool does parse the expressions


def test_cost_says_saving_only_when_resources_go_down() -> None:
    # Capacity: the candidate meets the SLO at 4 req/s, the baseline only at 1 req/s.
    cs = {(g, p): Cell(spec=0.5, base_e2e=2.0) for g in GROUPS for p in PHASES}
    d = case(cs)
    for r in d.requests:  # the baseline misses its deadline at peak
        if r.arm in ("base", "alt", "ctl") and level_of(r.phase) == "peak" and r.done_t is not None:
            r.done_t += 5.0
    cfg = CFG.model_copy(
        update={
            "cost": CFG.cost.model_copy(update={"target_peak_rate": 4.0}),
            "verdict": CFG.verdict.model_copy(update={"slo_attainment": 0.9}),
        }
    )
    a = analyze(d, cfg)
    caps = {c.arm: c.capacity_rps for c in a.capacities if c.task_group == "*"}
    assert caps == {"base": 1.0, "spec": 4.0, "alt": 1.0, "ctl": 1.0}
    line = next(c for c in a.cost_lines if c.candidate_arm == "spec")
    assert line.kind == "saving" and "1 device(s) instead of 4" in line.text
    # The same latency win with no capacity difference: no saving, unless a value is configured.
    a2 = analyze(case(cells(0.7)), CFG)
    assert a2.cost_lines[0].kind == "latency_change_no_cost_change"
    assert "saving" not in a2.cost_lines[0].text
    valued = CFG.model_copy(
        update={"cost": CFG.cost.model_copy(update={"business_value_per_on_time_task": 0.5})}
    )
    line3 = analyze(case(cells(0.7)), valued).cost_lines[0]
    # the candidate finishes more requests within the deadline (0.7x of a 1.5x-median deadline)
    assert line3.kind == "business_value" and "(configured value)" in line3.text


def test_cold_start_only_is_a_pilot_hypothesis_with_no_decision() -> None:
    d = case(cells(0.7))
    for r in d.requests:
        r.cold_start = True
    v = verdict(d)
    assert v.verdict == "UNDECIDED" and v.pilot_hypothesis
    assert "only cold-start requests were measured: no steady state" in v.hypothesis_reasons


def test_adopt_in_windows_in_named_phases_when_the_low_load_does_not_pay() -> None:
    cs = {(g, "off_peak"): Cell(spec=1.3) for g in GROUPS} | {
        (g, "peak"): Cell(spec=0.7) for g in GROUPS
    }
    v = verdict(case(cs))
    g = group(v, "zh")
    assert (v.verdict, g.verdict, g.below_rps, g.windows) == (
        "ADOPT_IN_WINDOWS",
        "ADOPT_IN_WINDOWS",
        None,
        ("peak",),
    )
    assert "zh in peak" in v.summary


def test_arm_plan_pairs_candidates_with_plain_arms_on_their_engine() -> None:
    from specpilot.analysis.plan import pair_arms, representative
    from specpilot.records import ArmRecord, StrategySpec

    arms = [
        ArmRecord("p", "r1", "base", "baseline", "builtin"),
        ArmRecord(
            "p",
            "r2",
            "spec",
            "speculative",
            "builtin",
            strategy=StrategySpec("draft", k=3),
            run_order=1,
        ),
        ArmRecord("p", "r3", "alt", "alternative", "builtin", run_order=2),
        ArmRecord("p", "r4", "lc", "extra", "llamacpp", run_order=3),
        ArmRecord(
            "p",
            "r5",
            "lc-ngram",
            "extra",
            "llamacpp",
            strategy=StrategySpec("ngram", ngram_type="ngram-mod"),
            run_order=4,
        ),
        ArmRecord(
            "p",
            "r6",
            "vllm-draft",
            "extra",
            "vllm",
            strategy=StrategySpec("draft", k=4),
            run_order=5,
        ),
    ]
    p = pair_arms(arms, ["base", "spec", "ghost"])
    assert p.baseline == "base" and p.alternative == "alt"
    # same engine first (llama.cpp's plain arm), the pilot's baseline otherwise; never the alternative
    assert p.pairs == (("base", "spec"), ("lc", "lc-ngram"), ("base", "vllm-draft"))
    assert any("ghost" in n for n in p.notes)
    assert representative(
        {"phases": [{"arrival": {"kind": "trace"}}, {"arrival": {"kind": "trace"}}]}
    )
    assert not representative(
        {"phases": [{"arrival": {"kind": "trace"}}, {"arrival": {"kind": "gamma"}}]}
    )
    assert not representative({})


def test_the_alternative_answers_only_for_the_baselines_engine() -> None:
    """An extra pair on another engine (llama.cpp plain vs n-gram) is judged against its own
    plain arm; the builtin equal-budget alternative is not compared with it."""
    import dataclasses

    from specpilot.records import ArmRecord, StrategySpec

    data = case(cells(0.8, alt=0.6))
    rename = {"base": ("lc", "run-lc"), "spec": ("lc-ngram", "run-lcn")}
    data.requests += [
        dataclasses.replace(r, arm=rename[r.arm][0], run_id=rename[r.arm][1])
        for r in data.requests
        if r.arm in rename
    ]
    data.phases += [
        dataclasses.replace(p, arm=rename[p.arm][0], run_id=rename[p.arm][1])
        for p in data.phases
        if p.arm in rename
    ]
    data.arms += [
        ArmRecord("p", "run-lc", "lc", "extra", "llamacpp", run_order=3),
        ArmRecord(
            "p",
            "run-lcn",
            "lc-ngram",
            "extra",
            "llamacpp",
            strategy=StrategySpec("ngram", ngram_type="ngram-mod"),
            run_order=4,
        ),
    ]
    a = analyze(data, CFG)
    by = {v.candidate_arm: v for v in a.verdicts}
    assert set(by) == {"spec", "lc-ngram"}
    assert "equal-budget alternative alt is faster" in (by["spec"].bottleneck or "")
    assert "alternative" not in (by["lc-ngram"].bottleneck or "")
    assert not any(c.baseline_arm == "alt" and c.candidate_arm == "lc-ngram" for c in a.comparisons)


def test_net_slower_without_round_data_says_so() -> None:
    """An engine without per-round timings (llama.cpp) that is clearly slower end to end is
    called net slower with the size of the loss, not "a gain too small to show"."""
    v = verdict(case(cells(1.5), rounds=False))
    assert v.verdict == "DO_NOT_ADOPT"
    assert v.bottleneck is not None and v.bottleneck.startswith(
        "net slower end to end: task time +"
    )
    assert "no per-round timings" in v.bottleneck


def test_groups_too_small_but_pooled_slower_names_the_pooled_bottleneck() -> None:
    cs = {(g, p): Cell(spec=1.6, n=5) for g in GROUPS for p in PHASES}
    v = verdict(case(cs))
    assert all(group(v, g).evidence == "insufficient" for g in GROUPS)
    assert group(v, "*").verdict == "DO_NOT_ADOPT" and group(v, "*").evidence == "decided"
    assert v.verdict == "DO_NOT_ADOPT"
    assert "(all groups pooled; per group: undecided)" in v.summary


def test_a_baseline_that_misses_its_own_slos_at_the_lowest_load_is_named() -> None:
    d = case(cells(0.7))
    for r in d.requests:  # every request of every arm is late at off-peak
        if level_of(r.phase) == "off_peak" and r.done_t is not None:
            r.done_t += 10.0
    v = verdict(d)
    assert v.pilot_hypothesis
    assert any(
        r.startswith("the baseline itself is on time for only 0% of requests at off_peak")
        for r in v.hypothesis_reasons
    )


def test_a_failed_or_cut_arm_gets_no_verdict_and_no_rollback_rules() -> None:
    d = case(cells(0.7))
    spec = next(r for r in d.arms if r.arm == "spec")
    spec.status, spec.error = "failed", "AttributeError: no attribute 'speculative.synth_rates'"
    a = analyze(d, CFG)
    assert [v.candidate_arm for v in a.verdicts] == [] and "spec" not in a.rollback_yaml
    assert any(
        n.startswith("spec against base: not measured, no verdict (spec: failed: AttributeError")
        for n in a.notes
    )
    d2 = case(cells(0.7))  # killed: still "running", one of its phases never finished
    spec2 = next(r for r in d2.arms if r.arm == "spec")
    spec2.status = "running"
    for p in d2.phases:
        if p.arm == "spec" and level_of(p.phase) == "peak":
            p.status = "interrupted"
    a2 = analyze(d2, CFG)
    assert not a2.verdicts
    assert any("phases not complete: peak" in n for n in a2.notes)


def test_an_engine_without_round_rows_names_its_counter_acceptance_as_the_bottleneck() -> None:
    from specpilot.records import MetricSnapshot

    d = case(cells(1.3), rounds=False)  # slower, and no per-round rows: like llama.cpp
    m0 = {"spec_rounds": 0.0, "spec_proposed_tokens": 0.0, "spec_accepted_tokens": 0.0}
    for ph in PHASES:
        m1 = {"spec_rounds": 400.0, "spec_proposed_tokens": 1200.0, "spec_accepted_tokens": 5.0}
        d.snapshots += [
            MetricSnapshot("run-spec", "spec", ph, "before", 0.0, "llamacpp", dict(m0)),
            MetricSnapshot("run-spec", "spec", ph, "after", 1.0, "llamacpp", m1),
        ]
    v = verdict(d)
    assert v.verdict == "DO_NOT_ADOPT"
    assert (
        v.bottleneck is not None
        and "acceptance 0.4% (10 of 2400 drafted tokens over 800 drafts" in v.bottleneck
    )
    assert "the draft is rejected almost always" in v.bottleneck


def test_groups_too_small_but_pooled_faster_is_not_switched_on_for_any_group() -> None:
    cs = {(g, p): Cell(spec=0.5, n=5) for g in GROUPS for p in ("off_peak", "peak")}
    v = verdict(case(cs))
    assert all(group(v, g).evidence == "insufficient" for g in GROUPS)
    assert group(v, "*").verdict == "ADOPT"
    assert v.verdict == "UNDECIDED"
    assert "pooled over groups speculation pays at every measured load" in v.summary
    assert "measure per group before switching it on" in v.summary


def test_a_synthetic_acceptance_arm_is_never_adopted_however_fast() -> None:
    """The same data that gives ADOPT, with the candidate marked as a synthetic-acceptance
    (validation) arm: DO_NOT_ADOPT, and the headline says why first."""
    import dataclasses

    data = case(cells(0.7))
    assert verdict(data).verdict == "ADOPT"
    arms = [
        dataclasses.replace(
            a, strategy=dataclasses.replace(a.strategy, params={"synth_rates": [1.0, 1.0]})
        )
        if a.arm == "spec"
        else a
        for a in data.arms
    ]
    v = verdict(dataclasses.replace(data, arms=arms))
    assert v.verdict == "DO_NOT_ADOPT" and v.groups_adopted == () and v.load_range_rps is None
    assert v.bottleneck.startswith("validation arm: synthetic acceptance [1.0, 1.0]")
    assert v.summary.startswith("never adopted")
