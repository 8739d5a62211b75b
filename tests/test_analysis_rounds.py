"""R2 from per-request round aggregates: hand-computed cells, the verify-cost curve, the
Leviathan gap chain and vLLM's k choice."""

from __future__ import annotations

import numpy as np
import pytest

from specpilot.analysis.config import TuneKConfig
from specpilot.analysis.mechanism.leviathan import compare
from specpilot.analysis.mechanism.round_summary import summarize_rounds, with_plain
from specpilot.analysis.mechanism.tune_k import KRun, choose_k
from specpilot.analysis.mechanism.verify_cost import curve_for, verify_curves
from specpilot.records import RequestRounds, VerifyCostPoint


def rr(arm, rid, rounds, k, accepted, committed, d, v, o, pos_acc=None, group="code", phase="peak"):
    spec = rounds if k else 0
    return RequestRounds(
        f"run-{arm}",
        arm,
        phase,
        group,
        rid,
        rounds,
        spec,
        k * rounds,
        accepted,
        committed,
        d,
        v,
        o,
        pos_proposed=[rounds] * k,
        pos_accepted=pos_acc or [],
        accepted_hist=[],
    )


def test_pooled_figures_and_the_per_request_distribution() -> None:
    # A long request accepting 90% and a short one accepting 10% (k=4). Pooled acceptance is
    # 110/140 = 0.786, but the average request sees 0.5: the pooled figure leans long.
    long = rr("spec", "a", 30, 4, 108, 138, 0.3, 0.6, 0.1, pos_acc=[30, 30, 27, 21])
    short = rr("spec", "b", 5, 4, 2, 7, 0.05, 0.1, 0.05, pos_acc=[2, 0, 0, 0])
    s = summarize_rounds([long, short])[0]
    assert (s.rounds, s.proposed, s.accepted, s.committed) == (35, 140, 110, 145)
    assert s.acceptance_rate == pytest.approx(110 / 140)
    assert s.mean_acceptance_length == pytest.approx(145 / 35)
    assert s.acceptance_per_position == pytest.approx((32 / 35, 30 / 35, 27 / 35, 21 / 35))
    assert s.per_request_mean_acceptance_rate == pytest.approx(0.5)
    assert s.per_request_acceptance_hist == (0, 1, 0, 0, 0, 0, 0, 0, 0, 1)
    assert s.per_request_mal_p10_p50_p90[1] == pytest.approx((4.6 + 1.4) / 2)
    assert s.cost_per_token_s == pytest.approx(1.2 / 145)
    assert s.shares["draft"] == pytest.approx(0.35 / 1.2)
    # alpha: full accepts 21 (+0), rejecting rounds 35 - 21 = 14 -> 110 / 124
    assert s.alpha == pytest.approx(110 / 124)


def test_decode_speedup_against_the_baseline_cell_and_the_missions_example() -> None:
    # MISSION: plain 40 ms/token; A 60 ms/round x 3 tokens; B 100 ms x 4; A at 1.2 tokens.
    cells = [
        rr("base", "p", 10, 0, 0, 10, 0.0, 0.4, 0.0),
        rr("A", "p", 10, 4, 20, 30, 0.2, 0.4, 0.0, pos_acc=[10, 10, 0, 0]),
        rr("B", "p", 10, 6, 30, 40, 0.4, 0.6, 0.0, pos_acc=[10, 10, 10, 0, 0, 0]),
        rr("Abad", "p", 10, 4, 2, 12, 0.2, 0.4, 0.0, pos_acc=[2, 0, 0, 0]),
    ]
    out = {c.arm: c for c in with_plain(summarize_rounds(cells), "base")}
    assert [round(out[a].cost_per_token_s * 1000, 9) for a in ("base", "A", "B", "Abad")] == [
        40,
        20,
        25,
        50,
    ]
    assert out["A"].decode_speedup == pytest.approx(2.0)
    assert out["B"].decode_speedup == pytest.approx(1.6)  # advances more, yet slower than A
    assert out["Abad"].decode_speedup == pytest.approx(0.8)  # slower than plain
    assert out["base"].decode_speedup is None


def test_alpha_is_undefined_when_k_varies_in_a_cell() -> None:
    a = rr("spec", "a", 10, 3, 15, 25, 0.1, 0.2, 0.0, pos_acc=[8, 5, 2])
    b = rr("spec", "b", 10, 2, 10, 20, 0.1, 0.2, 0.0, pos_acc=[6, 4])
    assert summarize_rounds([a])[0].alpha == pytest.approx(15 / (15 + 8))
    assert summarize_rounds([a, b])[0].alpha is None  # a constant-k estimate would be wrong


def test_verify_cost_curve_with_a_reference_from_the_plain_arm() -> None:
    pts = [
        VerifyCostPoint("spec", "calibration", 1, 1, 30, 0.010),
        VerifyCostPoint("spec", "calibration", 2, 1, 30, 0.014),
        VerifyCostPoint("spec", "calibration", 4, 1, 30, 0.022),
        VerifyCostPoint("spec", "rounds", 4, 2, 500, 0.030),
        VerifyCostPoint("base", "rounds", 1, 2, 900, 0.020),
    ]
    curves = {(c.arm, c.source): c for c in verify_curves(pts, reference_arm="base")}
    cal = curves[("spec", "calibration")]
    assert [p.ratio for p in cal.points] == pytest.approx([1.0, 1.4, 2.2])  # the AVX2 machine
    rounds = curves[("spec", "rounds")]
    assert rounds.reference == "base (rounds)" and rounds.ratio_at(4) == pytest.approx(1.5)
    v, src = curve_for(list(curves.values()), "spec", 4)
    assert (v, src) == (pytest.approx(2.2), "calibration, batch 1")


def test_verify_cost_is_the_median_of_the_arms_calibrations_in_one_format() -> None:
    def cal(arm: str, v4: float, dtype: str = "int8-bf16") -> list[VerifyCostPoint]:
        return [
            VerifyCostPoint(arm, "calibration", 1, 4, 3, 0.010, dtype=dtype),
            VerifyCostPoint(arm, "calibration", 4, 4, 3, 0.010 * v4, dtype=dtype),
        ]

    pts = cal("base", 2.6) + cal("spec", 3.7) + cal("alt", 3.0) + cal("other", 9.0, "bf16")
    v, src = curve_for(verify_curves(pts), "spec", 4, batch_size=4)
    assert v == pytest.approx(3.0)  # not the speculative arm's own 3.7, not the bf16 arm's 9
    assert src == "calibration, batch 4, median of 3 arms' calibrations in int8-bf16"


def test_leviathan_gap_chain_hand_computed() -> None:
    plain = rr("base", "p", 100, 0, 0, 100, 0.0, 1.8, 0.2)
    spec = rr("spec", "p", 40, 3, 60, 100, 0.24, 0.8, 0.16, pos_acc=[30, 20, 10])
    cells = {c.arm: c for c in summarize_rounds([plain, spec])}
    g = compare(cells["spec"], cells["base"], v_next=1.05, v_source="calibration")
    assert g is not None
    assert g.alpha == pytest.approx(2 / 3)  # 60 accepted, 40 - 10 = 30 rejecting rounds
    assert g.expected_committed == pytest.approx(65 / 27)
    assert g.c_ratio == pytest.approx(6 / 3 / 18)  # 6 ms draft per round, 3 drafts, 18 ms step
    assert g.bound == pytest.approx(1.740294, abs=1e-6)
    assert g.bound_free_verify == pytest.approx(1.805556, abs=1e-6)
    assert [s.prediction for s in g.steps] == pytest.approx(
        [1.807229, 45 / 26, 1.5, 5 / 3], abs=1e-6
    )
    assert g.measured_speedup == pytest.approx(0.020 / 0.012)  # plain 20 ms / 12 ms per token
    # Without a curve, the in-window verify time stands in for v(k+1) and says so.
    g2 = compare(cells["spec"], cells["base"], v_next=None, v_source="")
    assert g2 is not None and g2.v_next == pytest.approx(20 / 18) and "in-window" in g2.v_source


def runs(spec: dict[int, list[float]], failed: dict[str, int] | None = None) -> list[KRun]:
    failed = failed or {}
    return [
        KRun(k, f"k{k}-{i}", v, failed.get(f"k{k}-{i}", 0))
        for k, vals in spec.items()
        for i, v in enumerate(vals)
    ]


def test_choose_k_penalises_spread_and_prefers_the_smaller_k_within_one_percent() -> None:
    cfg = TuneKConfig()
    # k=4 has the best median (13) but MAD 1: 13 - 1.4826 = 11.52 < k=3's 12.2 (MAD 0).
    c = choose_k(runs({0: [10, 10, 10], 3: [12.2, 12.2, 12.3], 4: [12, 13, 14]}), cfg)
    assert c.chosen_k == 3
    k4 = next(x for x in c.candidates if x.k == 4)
    assert k4.score == pytest.approx(13 - 1.4826)
    # 12.1 is within 1% of 12.2 (0.992): tied, the smaller k wins.
    c = choose_k(runs({2: [12.1, 12.1, 12.1], 3: [12.2, 12.2, 12.2]}), cfg)
    assert c.chosen_k == 2 and "tied" in c.reason
    # 12.0 is not (0.984): k=3 wins.
    assert choose_k(runs({2: [12.0, 12.0, 12.0], 3: [12.2, 12.2, 12.2]}), cfg).chosen_k == 3


def test_runs_with_failed_requests_are_rejected_and_too_few_runs_disqualify() -> None:
    r = runs({1: [11, 11, 11], 2: [15, 15, 15]}, failed={"k2-0": 3})
    c = choose_k(r, TuneKConfig())
    k2 = next(x for x in c.candidates if x.k == 2)
    assert (k2.status, k2.rejected_runs, k2.runs) == ("too_few_runs", ("k2-0",), 2)
    assert c.chosen_k == 1
    # unstable: relative MAD 0.2 > 0.1
    c = choose_k(runs({1: [10, 12, 8], 2: [9, 9, 9]}), TuneKConfig())
    assert next(x for x in c.candidates if x.k == 1).status == "unstable" and c.chosen_k == 2
    assert choose_k(runs({1: [1, 1]}), TuneKConfig()).chosen_k is None


def test_choose_k_minimising_a_latency() -> None:
    c = choose_k(
        runs({0: [30, 30, 30], 2: [20, 21, 20], 4: [19, 25, 19]}),
        TuneKConfig(),
        direction="minimize",
    )
    # k=4: 19 + 1.4826 x 0 (MAD of |0|, |6|, |0| is 0) = 19 vs k=2's 20: k=4, 5% better.
    assert c.chosen_k == 4
    assert c.vs_k0_percent == pytest.approx((30 / 19 - 1) * 100)


def _k_pilot(error_in_k4: bool):
    from specpilot.analysis import AnalysisConfig, analyze
    from specpilot.records import (
        ArmRecord,
        PhaseRecord,
        PilotData,
        PilotRecord,
        RequestRecord,
        StrategySpec,
    )

    arms, phases, reqs = [], [], []
    on_time = {"base": 6, "spec2": 9, "spec4": 10}
    for name, k in (("base", None), ("spec2", 2), ("spec4", 4)):
        strat = StrategySpec("draft", k=k) if k else StrategySpec()
        for rep in range(3):
            run = f"run-{name}-{rep}"
            role = "baseline" if name == "base" else "speculative"
            arms.append(ArmRecord("p", run, name, role, "builtin", strategy=strat, repetition=rep))
            episode = f"peak~{rep + 1:02d}"  # each process serves one episode of the level
            phases.append(
                PhaseRecord(
                    run, name, episode, 0.0, 10.0, 1.0, 10, actual_start_t=0.0, actual_end_t=10.0
                )
            )
            for i in range(10):
                late = i >= on_time[name]
                status = (
                    "error" if (error_in_k4 and name == "spec4" and rep == 0 and i == 0) else "ok"
                )
                reqs.append(
                    RequestRecord(
                        run,
                        name,
                        episode,
                        "code",
                        f"{episode}-{i:06d}",
                        float(i),
                        status,
                        sent_t=float(i),
                        first_content_t=i + 0.1,
                        done_t=None if status != "ok" else i + (5.0 if late else 1.0),
                        output_tokens=50,
                        deadline_s=2.0,
                    )
                )
    data = PilotData(
        PilotRecord("p", "k", {}, "", "0", 0.0), arms=arms, phases=phases, requests=reqs
    )
    return analyze(data, AnalysisConfig(bootstrap_resamples=100))


def test_k_is_chosen_from_the_pilots_runs_and_a_run_with_a_failure_is_rejected() -> None:
    a = _k_pilot(error_in_k4=False)
    c = next(x for x in a.k_choices if x.task_group == "code")
    assert c.chosen_k == 4 and c.vs_k0_percent == pytest.approx(100 * (1.0 / 0.6 - 1))
    assert [(x.k, x.runs, x.median) for x in c.candidates] == [
        (0, 3, 0.6),
        (2, 3, 0.9),
        (4, 3, 1.0),
    ]
    a = _k_pilot(error_in_k4=True)
    c = next(x for x in a.k_choices if x.task_group == "code")
    k4 = next(x for x in c.candidates if x.k == 4)
    assert (k4.status, k4.rejected_runs) == ("too_few_runs", ("run-spec4-0",))
    assert c.chosen_k == 2


def test_round_columns_from_a_reader_give_the_same_summary_as_records() -> None:
    import numpy as np

    from specpilot.analysis.mechanism.round_summary import (
        FLOAT_FIELDS,
        INT_FIELDS,
        KEYS,
        RoundsTable,
    )

    recs = [
        rr("spec", "a", 30, 4, 108, 138, 0.3, 0.6, 0.1, pos_acc=[30, 30, 27, 21]),
        rr("spec", "b", 5, 4, 2, 7, 0.05, 0.1, 0.05, pos_acc=[2, 0, 0, 0]),
        rr("base", "a", 100, 0, 0, 100, 0.0, 1.8, 0.2),
    ]
    cols = {k: np.array([getattr(r, k) for r in recs], dtype=object) for k in KEYS}
    cols |= {k: np.array([getattr(r, k) for r in recs], dtype=float) for k in FLOAT_FIELDS}
    cols |= {k: np.array([getattr(r, k) for r in recs]) for k in INT_FIELDS}
    cols["pos_proposed"] = np.array([[30] * 4, [5] * 4, [0] * 4])
    cols["pos_accepted"] = np.array([[30, 30, 27, 21], [2, 0, 0, 0], [0] * 4])
    assert summarize_rounds(RoundsTable.from_columns(cols)) == summarize_rounds(recs)


def test_decode_speedup_interval_resamples_episodes_not_requests() -> None:
    """The requests of one episode share the machine's moment: the interval resamples
    episodes, and is wider than one that took the same requests as independent."""
    import dataclasses

    from specpilot.analysis.mechanism.round_summary import RoundsTable, speedup_intervals
    from specpilot.records import RequestRounds

    rng = np.random.default_rng(0)
    shock = {arm: rng.lognormal(0, 0.1, 16) for arm in ("base", "spec")}  # per episode
    rr = []
    for i in range(160):  # plain 20 ms/token, speculative ~12.5 ms/token, both noisy per request
        k = i % 16
        rid = f"peak~{k + 1:02d}-{i:06d}"
        t_plain = 2.0 * rng.lognormal(0, 0.1) * shock["base"][k]
        t_spec = 1.25 * rng.lognormal(0, 0.1) * shock["spec"][k]
        rr.append(
            RequestRounds("b", "base", "peak", "code", rid, 100, 0, 0, 0, 100, 0.0, t_plain, 0.0)
        )
        rr.append(
            RequestRounds(
                "s", "spec", "peak", "code", rid, 40, 40, 120, 60, 100,
                0.2 * t_spec, 0.7 * t_spec, 0.1 * t_spec,
            )
        )  # fmt: skip
    ep = speedup_intervals(RoundsTable.build(rr), "base", ["spec"], level=0.95, seed=0)
    lo, hi = ep[("spec", "code", "peak")]
    assert lo < 1.6 < hi and lo > 1.1  # the true speed-up 1.6 inside, clearly > 1
    alone = [dataclasses.replace(r, request_id=r.request_id.split("-")[1]) for r in rr]
    req = speedup_intervals(RoundsTable.build(alone), "base", ["spec"], level=0.95, seed=0)
    r_lo, r_hi = req[("spec", "code", "peak")]
    assert (hi - lo) > 1.5 * (r_hi - r_lo), ((lo, hi), (r_lo, r_hi))
    assert ("spec", "*", "*") in ep


def test_a_file_where_nothing_drafted_summarises_without_positions() -> None:
    # `specpilot load --start --engine builtin` files (no draft): rounds, but not one proposal
    from specpilot.analysis.mechanism.round_summary import summarize_rounds
    from specpilot.records import RequestRounds

    rr = [RequestRounds("r", "base", "peak", "code", "q1", 10, 0, 0, 0, 10, 0.0, 0.5, 0.01)]
    s = summarize_rounds(rr)[0]
    assert s.acceptance_rate is None and s.acceptance_per_position == ()
    assert s.cost_per_token_s == pytest.approx(0.051)
