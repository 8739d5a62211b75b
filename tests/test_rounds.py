"""R2 window metrics, including the MISSION's worked example, exactly."""

from __future__ import annotations

import math
import random

import pytest

from specpilot.analysis.mechanism.rounds import (
    cost_per_token,
    expected_committed,
    leviathan_alpha,
    leviathan_speedup,
    mean_acceptance_length,
    window_metrics,
)
from specpilot.records import RoundRecord


def rounds(n: int, k: int, accepted: float, committed: float, ms: float) -> list[RoundRecord]:
    """n rounds whose totals give the stated averages (time all in verify for simplicity)."""
    out = []
    acc_total = round(accepted * n)
    com_total = round(committed * n)
    for i in range(n):
        a = acc_total // n + (1 if i < acc_total % n else 0)
        c = com_total // n + (1 if i < com_total % n else 0)
        out.append(RoundRecord("r", i, k, a, c, draft_s=0.0, verify_s=ms / 1000, overhead_s=0.0))
    return out


def test_worked_example_from_the_mission() -> None:
    plain = rounds(10, 0, 0, 1, 40)
    plan_a = rounds(10, 4, 2, 3, 60)  # 60 ms per round, 3 tokens per round
    plan_b = rounds(10, 6, 3, 4, 100)  # 100 ms per round, 4 tokens per round
    plan_a_bad = rounds(10, 4, 0.2, 1.2, 60)  # the same plan advancing only 1.2 tokens
    assert cost_per_token(plain) * 1000 == pytest.approx(40.0, abs=1e-9)
    assert cost_per_token(plan_a) * 1000 == pytest.approx(20.0, abs=1e-9)
    assert cost_per_token(plan_b) * 1000 == pytest.approx(25.0, abs=1e-9)
    assert cost_per_token(plan_a_bad) * 1000 == pytest.approx(50.0, abs=1e-9)
    # B advances more per round yet costs more per token; A at 1.2 is slower than plain.
    assert (
        window_metrics(plan_b).mean_acceptance_length
        > window_metrics(plan_a).mean_acceptance_length
    )
    assert cost_per_token(plan_b) > cost_per_token(plan_a)
    assert cost_per_token(plan_a_bad) > cost_per_token(plain)


def test_time_split_is_summed_and_batch_rows_share_the_round() -> None:
    r = [
        RoundRecord("a", 0, 3, 3, 4, draft_s=0.03, verify_s=0.05, overhead_s=0.02, batch_size=2),
        RoundRecord("b", 0, 3, 0, 1, draft_s=0.03, verify_s=0.05, overhead_s=0.02, batch_size=2),
    ]
    w = window_metrics(r)
    assert w.time_s == pytest.approx(0.10)  # one batched round, counted once
    assert w.cost_per_token_s == pytest.approx(0.10 / 5)
    assert w.acceptance_rate == pytest.approx(3 / 6)
    assert w.mean_acceptance_length == pytest.approx(2.5)
    assert w.acceptance_per_position == pytest.approx((0.5, 0.5, 0.5))


def test_committed_is_not_candidates_times_acceptance() -> None:
    # Two rounds, k=4: one accepts all (5 committed with the bonus), one rejects the first
    # (1 committed: the correction). 8 candidates x acceptance 0.5 would say 4 tokens; 6 came.
    r = [RoundRecord("r", 0, 4, 4, 5, 0, 0.1, 0), RoundRecord("r", 1, 4, 0, 1, 0, 0.1, 0)]
    w = window_metrics(r)
    assert w.acceptance_rate == 0.5
    assert w.committed == 6
    assert w.mean_acceptance_length == 3.0  # (5 + 1) / 2 rounds, bonus token included
    assert mean_acceptance_length(r) == 3.0
    assert w.acceptance_per_position == (0.5, 0.5, 0.5, 0.5)
    assert w.cost_per_token_s == pytest.approx(0.2 / 6)


def test_mean_acceptance_length_counts_what_a_cut_round_committed() -> None:
    # k=3, all accepted, but max_tokens cut the round after 2 tokens: 2 committed, not 4.
    r = [
        RoundRecord("r", 0, 3, 3, 4, 0, 0.1, 0),
        RoundRecord("r", 1, 3, 3, 2, 0, 0.1, 0, truncated="length"),
    ]
    assert mean_acceptance_length(r) == 3.0  # (4 + 2) / 2; vLLM's 1 + 6/2 would say 4.0
    assert mean_acceptance_length([]) is None


def test_truncated_rounds_are_counted_and_plain_has_no_acceptance_rate() -> None:
    r = [
        RoundRecord("r", 0, 0, 0, 1, 0, 0.04, 0),
        RoundRecord("r", 1, 0, 0, 1, 0, 0.04, 0, truncated="eos"),
    ]
    w = window_metrics(r)
    assert w.acceptance_rate is None and w.truncated_rounds == 1
    with pytest.raises(ValueError, match="empty window"):
        window_metrics([])
    with pytest.raises(ValueError, match="no committed tokens"):
        cost_per_token([RoundRecord("r", 0, 0, 0, 0, 0, 0.04, 0)])


def test_leviathan_formulas() -> None:
    assert expected_committed(0.0, 5) == 1.0
    assert expected_committed(1.0, 5) == 6.0
    # 1 + 0.8 + 0.64 + 0.512 + 0.4096, summed by hand
    assert expected_committed(0.8, 4) == pytest.approx(3.3616, abs=1e-12)
    # alpha 0.8, k 5, c 0.05: 3.68928 tokens per round / (5 x 0.05 + 1) = 2.951424x
    assert leviathan_speedup(0.8, 5, 0.05) == pytest.approx(2.951424, abs=1e-9)
    assert math.isclose(leviathan_speedup(0.5, 1, 0.0), 1.5)
    with pytest.raises(ValueError, match="alpha"):
        expected_committed(1.5, 3)


def test_first_divergence_reports_the_reference_margin() -> None:
    from types import SimpleNamespace

    from specpilot.analysis.mechanism.rounds import first_divergence

    lps = [
        SimpleNamespace(top=[(5, -0.1), (6, -2.0)]),
        SimpleNamespace(top=[(7, -0.69), (8, -0.70)]),
    ]
    d = first_divergence([5, 7, 9], [5, 8, 9], lps)
    assert d is not None and (d.index, d.reference_token, d.other_token) == (1, 7, 8)
    assert d.reference_margin == pytest.approx(0.01)
    assert first_divergence([5, 7], [5, 7, 1], lps) is None


def test_leviathan_alpha_is_not_the_acceptance_rate() -> None:
    # k=4: accepted 4 (all), 1 (reject at 2), 0 (reject at 1): 5 accepts, 2 rejections.
    r = [RoundRecord("r", i, 4, a, a + 1, 0, 0.1, 0) for i, a in enumerate([4, 1, 0])]
    assert leviathan_alpha(r) == pytest.approx(5 / 7)
    assert window_metrics(r).acceptance_rate == pytest.approx(5 / 12)
    assert leviathan_alpha([RoundRecord("r", 0, 0, 0, 1, 0, 0.1, 0)]) is None


def test_alpha_recovers_an_iid_acceptance_and_predicts_tokens_per_round() -> None:
    # Rounds drawn with a known per-token acceptance 0.7 (seeded): leviathan_alpha recovers
    # it and E[c] predicts the observed tokens per round; the acceptance rate does neither.
    rng = random.Random(7)
    rs = []
    for i in range(20000):
        a = 0
        while a < 4 and rng.random() < 0.7:
            a += 1
        rs.append(RoundRecord("r", i, 4, a, a + 1, 0, 0.1, 0))
    alpha = leviathan_alpha(rs)
    assert alpha == pytest.approx(0.7, abs=0.01)
    mal = window_metrics(rs).mean_acceptance_length
    assert expected_committed(alpha, 4) == pytest.approx(mal, rel=0.01)  # 2.7731 expected
    rate = window_metrics(rs).acceptance_rate
    assert rate is not None and abs(rate - 0.7) > 0.1  # ~0.44: not the Leviathan alpha
