"""R5/R6 load figures with every scheduled request counted, paired comparisons, capacity."""

from __future__ import annotations

import numpy as np
import pytest

from pilot_cases import Cell, Slot, case, compare, table
from specpilot.analysis import AnalysisConfig, analyze
from specpilot.analysis.base.fold import fold
from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.service.capacity import capacity, memory_budget
from specpilot.analysis.service.load import load_cells
from specpilot.analysis.verdicts.verdict import crossover
from specpilot.records import ChunkGaps, PhaseRecord, QualityRecord, RequestRecord


def ok(i: int, e2e: float, **kw) -> RequestRecord:
    return RequestRecord(
        "r",
        "a",
        "peak",
        "code",
        f"peak-{i:06d}",
        float(i),
        kw.pop("status", "ok"),
        sent_t=float(i),
        first_content_t=i + 0.5,
        done_t=i + e2e,
        output_tokens=11,
        deadline_s=6.0,
        ttft_slo_s=1.0,
        **kw,
    )


def cell_requests() -> list[RequestRecord]:
    reqs = [ok(i, float(i + 1)) for i in range(8)]  # E2E 1..8 s, TTFT 0.5 s
    reqs.append(
        RequestRecord(
            "r",
            "a",
            "peak",
            "code",
            "peak-000008",
            8.0,
            "timeout",
            sent_t=8.0,
            first_content_t=8.5,
            deadline_s=6.0,
        )
    )
    reqs.append(
        RequestRecord("r", "a", "peak", "code", "peak-000009", 9.0, "not_sent", deadline_s=6.0)
    )
    reqs.append(ok(10, 1.0, cold_start=True))
    reqs.append(ok(11, 1.0, warmup=True))
    return reqs


def test_every_scheduled_request_is_in_the_denominators() -> None:
    t = RequestTable.build(cell_requests())
    assert len(t) == 11  # the warm-up request is dropped
    phases = [
        PhaseRecord("r", "a", "peak", 0.0, 20.0, 0.5, 10, actual_start_t=0.0, actual_end_t=20.0)
    ]
    c = next(x for x in load_cells(t, phases) if x.task_group == "code")
    assert (c.scheduled, c.cold_start_excluded) == (10, 1)
    assert c.ratios["timeout"] == 0.1 and c.ratios["not_sent"] == 0.1 and c.ratios["ok"] == 0.8
    # E2E over all 10: sorted [1..8, inf, inf]; p50 at position 4.5 -> 5.5 s. Success-only would
    # say 4.5 s. p90 lands on the failures: not reached.
    assert (c.e2e.n, c.e2e.measured, c.e2e.p50, c.e2e.p90) == (10, 8, 5.5, None)
    assert c.ttft.measured == 9 and c.ttft.p50 == 0.5  # the timeout had its first token
    # TPOT = (E2E - 0.5) / 10: 0.05 .. 0.75 and two failures -> p50 = (0.45 + 0.55) / 2
    assert c.tpot.p50 == pytest.approx(0.5, abs=1e-9)
    assert c.on_time == 6  # ok with E2E <= 6 s
    assert c.goodput_rps == pytest.approx(6 / 20)
    assert c.throughput_tokens_s == pytest.approx(8 * 11 / 20)


def test_a_failed_key_check_on_the_output_makes_the_request_not_good() -> None:
    q = [
        QualityRecord(
            "r",
            "a",
            "code",
            "",
            "amount",
            "required",
            "key",
            False,
            ["amount missing"],
            request_id="peak-000000",
        )
    ]
    t = RequestTable.build(cell_requests(), q)
    # on time is latency only (6); good, what goodput counts, also needs the key checks (5)
    assert int((t.on_time & ~t.cold_start).sum()) == 6
    assert int((t.good & ~t.cold_start).sum()) == 5
    assert not t.good[0] and t.on_time[0]


def test_itl_is_token_weighted_and_per_chunk_gaps_are_kept() -> None:
    t = RequestTable.build(cell_requests())
    gaps = [ChunkGaps("r", "a", "peak", "code", [0.1, 0.6], [1, 3])]
    phases = [PhaseRecord("r", "a", "peak", 0.0, 20.0, 0.5, 10)]
    c = next(x for x in load_cells(t, phases, gaps) if x.task_group == "code")
    # per token: 0.1, 0.2, 0.2, 0.2 -> median 0.2 (chunk-weighted would say 0.15)
    assert c.itl_token is not None and c.itl_token.p50 == pytest.approx(0.2) and c.itl_token.n == 4
    assert c.chunk_gap is not None and c.chunk_gap.p50 == pytest.approx(0.35)
    assert c.tokens_per_chunk == 2.0


def cells4(spec: float, alt: float = 1.0, n: int = 80) -> dict:
    return {
        (g, p): Cell(spec=spec, alt=alt, n=n) for g in ("code", "zh") for p in ("off_peak", "peak")
    }


@pytest.mark.parametrize(
    ("factor", "outcome"), [(0.7, "faster"), (1.3, "slower"), (1.0, "no_difference")]
)
def test_paired_outcomes_follow_the_constructed_effect(factor: float, outcome: str) -> None:
    d = case(cells4(factor), alternative=False)
    t = table(d)
    comps = compare(t, "base", "spec", resamples=400, seed=1, level=0.95)
    assert {c.outcome for c in comps} == {outcome}
    c = comps[0]
    assert c.pairs == 80 and c.unmatched == 0
    assert c.e2e_rel_change.low < factor - 1 < c.e2e_rel_change.high  # covers the true effect
    assert "400 resamples, seed 1" in c.method


def test_bootstrap_is_seeded_per_cell() -> None:
    t = table(case(cells4(0.9), alternative=False))
    a = compare(t, "base", "spec", resamples=300, seed=5, level=0.95)
    b = compare(t, "base", "spec", resamples=300, seed=5, level=0.95)
    c = compare(t, "base", "spec", resamples=300, seed=6, level=0.95)
    assert [x.e2e_rel_change for x in a] == [x.e2e_rel_change for x in b]
    assert [x.e2e_rel_change for x in a] != [x.e2e_rel_change for x in c]


def test_timeouts_make_a_faster_survivor_net_slower() -> None:
    # The candidate is 30% faster on what finishes, but 16 of 80 requests time out, in every
    # episode (every 5th request: the 14 episodes take the requests in turn).
    cells = {
        ("code", "peak"): Cell(spec=0.7, n=80, spec_status={i: "timeout" for i in range(0, 80, 5)})
    }
    t = table(case(cells, alternative=False))
    c = next(
        x
        for x in compare(t, "base", "spec", resamples=400, seed=0, level=0.95)
        if x.task_group == "code"
    )
    assert c.e2e_rel_change.high is not None and c.e2e_rel_change.high < 0  # survivors faster
    assert c.on_time_diff.high is not None and c.on_time_diff.high < 0
    assert c.outcome == "slower"


def test_a_prompt_mismatch_is_not_paired() -> None:
    d = case({("code", "peak"): Cell(n=10)}, alternative=False)
    for r in d.requests:
        if r.arm == "spec" and r.request_id == Slot("peak", 3).request_id:
            r.prompt_id = "something-else"
    t = table(d)
    c = compare(t, "base", "spec", resamples=100, seed=0, level=0.9)[0]
    assert (c.pairs, c.unmatched) == (9, 2)


def test_capacity_and_crossover() -> None:
    # Faster at 1 req/s, slower at 4 req/s: it pays up to 1 and stops by 4.
    cells = {("code", "off_peak"): Cell(spec=0.7), ("code", "peak"): Cell(spec=1.3)}
    d = case(cells, alternative=False)
    t = table(d)
    a = analyze(d, AnalysisConfig(bootstrap_resamples=300))
    x = next(c for c in a.crossovers if c.task_group == "code")
    assert (x.pays_up_to_rps, x.crossover_rps) == (1.0, 4.0)
    # the capacity section's crossover is the verdict's own window, in the same words
    g = next(g for g in a.verdicts[0].groups if g.task_group == "code")
    assert x.summary == g.window == "pays at 1 req/s, not at 4; not measured between"
    assert x.levels == g.levels and crossover(a.verdicts) == a.crossovers
    caps = {(c.arm, c.task_group): c for c in capacity(load_cells(t, fold(d).phases), 0.9)}
    # Deadline 1.5x the baseline's median: 1.3x slower misses it for ~28% of requests.
    assert caps[("spec", "code")].capacity_rps == 1.0
    assert caps[("base", "code")].capacity_rps == 4.0
    assert caps[("spec", "code")].limited_at.startswith("peak at 4 req/s")


def test_memory_budget_and_the_concurrency_it_would_buy() -> None:
    d = case({("code", "peak"): Cell(n=4)}, alternative=False)
    m = memory_budget(d.snapshots, d.arms, "base", "spec")
    mib = 1 << 20
    assert (m.draft_weight_bytes, m.draft_kv_bytes) == (100 * mib, 50 * mib)
    assert m.workspace_bytes == 150 * mib  # 300 MiB more RSS, 150 of it draft weights + KV
    assert m.kv_bytes_per_sequence == pytest.approx((1 << 30) / 4 / 4)  # 256 MiB KV over 4 slots
    # the draft's weights + KV in target KV slots, the alternative's derivation (workspace is
    # noted, not converted)
    assert m.sequences_forgone == pytest.approx(150 / 64)
    assert any("150.0 MiB more peak RSS" in n for n in m.notes)
    empty = memory_budget([], d.arms, "base", "spec")
    assert empty.total_bytes is None and any(
        "KV bytes per sequence unknown" in n for n in empty.notes
    )


def test_quantiles_censor_instead_of_dropping_failures() -> None:
    from specpilot.analysis.base.columns import quantiles

    assert quantiles(np.array([1.0, 2.0, np.inf]), (0.5, 0.99)) == [2.0, None]


def test_columns_from_a_reader_give_the_same_table_as_records() -> None:
    from dataclasses import fields

    from specpilot.analysis.base.requests import FLOAT_COLUMNS, OBJECT_COLUMNS

    reqs = cell_requests()
    reqs[0].client_stages = {"retrieval": 0.5}
    a = RequestTable.build(reqs)
    cols = {k: np.array([getattr(r, k) for r in reqs], dtype=object) for k in OBJECT_COLUMNS}
    cols |= {
        k: np.array([np.nan if getattr(r, k) is None else getattr(r, k) for r in reqs])
        for k in FLOAT_COLUMNS
    }
    cols |= {
        "cold_start": np.array([r.cold_start for r in reqs]),
        "warmup": np.array([r.warmup for r in reqs]),
    }
    cols["client_stage:retrieval"] = np.array(
        [r.client_stages.get("retrieval", np.nan) for r in reqs]
    )
    b = RequestTable.from_columns(cols)
    for f in fields(a):
        if f.init and f.name != "client_stages":
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)
    np.testing.assert_array_equal(a.client_stages["retrieval"], b.client_stages["retrieval"])
    with pytest.raises(ValueError, match="request columns missing"):
        RequestTable.from_columns({"status": np.array(["ok"])})


def test_bucketed_bootstrap_matches_the_pair_bootstrap() -> None:
    # 20,000 pairs in 2,000 episodes: the bucketed resampling (1,024 buckets of episodes) must
    # give the interval the episode resampling gives.
    import specpilot.analysis.comparison.resample as paired

    cells = {("code", "peak"): Cell(spec=0.9, n=20000)}
    t = table(case(cells, alternative=False, rounds=False, episodes=2000))
    fast = next(
        c
        for c in compare(t, "base", "spec", resamples=400, seed=3, level=0.95)
        if c.task_group == "code"
    )
    old = paired.BUCKETS
    try:
        paired.BUCKETS = 10**9  # every episode its own unit: the textbook cluster bootstrap
        exact = next(
            c
            for c in compare(t, "base", "spec", resamples=400, seed=3, level=0.95)
            if c.task_group == "code"
        )
    finally:
        paired.BUCKETS = old
    w_fast = fast.e2e_rel_change.high - fast.e2e_rel_change.low
    w_exact = exact.e2e_rel_change.high - exact.e2e_rel_change.low
    assert w_fast == pytest.approx(w_exact, rel=0.2)
    assert fast.e2e_rel_change.estimate == exact.e2e_rel_change.estimate
    assert fast.e2e_rel_change.low < -0.1 < fast.e2e_rel_change.high


def test_latency_cdf_stops_short_by_the_failed_fraction() -> None:
    from specpilot.analysis.pilot import latency_cdf

    cdf = latency_cdf(RequestTable.build(cell_requests()), points=11)["a"]
    # 10 steady requests, 2 never finished: levels up to 0.7 are reached (linear between
    # order statistics), from 0.8 the curve is missing, never rescaled to the 8 that finished
    assert cdf["q"][7] == pytest.approx(0.7) and cdf["e2e"][7] == pytest.approx(7.3)
    assert cdf["e2e"][8:] == [None, None, None]


def test_an_ngram_arm_is_not_costed_as_a_draft_model() -> None:
    from specpilot.records import StrategySpec

    d = case({("code", "peak"): Cell(n=4)}, alternative=False)
    spec = next(a for a in d.arms if a.arm == "spec")
    spec.strategy = StrategySpec("ngram", k=3, ngram_type="ngram-mod")
    m = memory_budget(d.snapshots, d.arms, "base", "spec")
    assert m.resource_class == "ngram" and m.draft_weight_bytes is None
    assert any("no draft model" in n for n in m.notes)
