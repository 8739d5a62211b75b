"""Statistics of the sampled gates against published and hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specpilot.quality import stats
from specpilot.quality.sampled import non_inferiority, output_verdicts, pass_rates
from specpilot.records import QualityRecord


def test_wilson_and_newcombe_match_published_values():
    # Newcombe (1998), Stat Med 17:873, table II example (e): 56/70 vs 48/80, method 10
    lo, hi = stats.newcombe(56, 70, 48, 80, alpha=0.05)
    assert (round(lo, 4), round(hi, 4)) == (0.0524, 0.3339)
    # Wilson 95% for 0/10: upper = z^2 / (n + z^2)
    z2 = 1.959963984540054**2
    assert stats.wilson(0, 10) == pytest.approx((0.0, z2 / (10 + z2)))
    assert stats.wilson(0, 0) == (0.0, 1.0)


def test_ni_power_at_zero_pass_rate_is_a_step_at_the_hand_computed_n():
    # Both arms 0/n: the one-sided 95% bound is -z^2/(n + z^2), z = 1.645. It clears a 0.10
    # margin when n > z^2 (1 - 0.1) / 0.1 = 24.35: power 0 at n = 24, 1 at n = 25.
    assert stats.ni_power(24, 0.0, 0.10, 0.05) == 0.0
    assert stats.ni_power(25, 0.0, 0.10, 0.05) == 1.0
    assert stats.n_for_power(0.0, 0.10, 0.05) == 25


def test_ni_power_agrees_with_simulation_and_the_classic_sample_size():
    rng = np.random.default_rng(1)
    n, p, margin, alpha = 40, 0.7, 0.15, 0.05
    sims = rng.binomial(n, p, size=(4000, 2))
    hits = np.mean([stats.ni_lower(int(c), n, int(b), n, alpha) > -margin for c, b in sims])
    assert abs(stats.ni_power(n, p, margin, alpha) - hits) < 0.03
    # normal-approximation n for 80% power: 2 p (1-p) (z_0.95 + z_0.8)^2 / margin^2
    classic = 2 * 0.25 * (1.6449 + 0.8416) ** 2 / 0.10**2
    assert abs(stats.n_for_power(0.5, 0.10, 0.05) - classic) / classic < 0.1


def test_holm():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5]) == [0.5]


def test_stratified_permutation_is_calibrated_under_the_null():
    rng = np.random.default_rng(0)
    ps = []
    for _ in range(300):
        strata = [([0] * 8 + [1] * 8, list(rng.normal(0, 1, 16))) for _ in range(3)]
        ps.append(stats.stratified_permutation(strata, "numeric", rng, 199)[1])
    assert 0.02 < np.mean(np.array(ps) < 0.05) < 0.09  # about alpha
    mirror = [([0, 0, 1, 1], [1.0, 2.0, 2.0, 1.0])]  # the same values in both arms
    assert stats.stratified_permutation(mirror, "numeric", rng, 99)[1] == 1.0


def test_stratified_permutation_sees_a_shift():
    rng = np.random.default_rng(0)
    shifted = [
        ([0] * 10 + [1] * 10, list(rng.normal(0, 1, 10)) + list(rng.normal(1.5, 1, 10)))
        for _ in range(3)
    ]
    assert (
        stats.stratified_permutation(shifted, "numeric", np.random.default_rng(1), 999)[1]
        == 1 / 1000
    )
    # categorical: arm 1 always says "b"; strata with one arm only do not count
    cats = [([0, 0, 0, 0, 1, 1, 1, 1], ["a", "b", "a", "b", "b", "b", "b", "b"])] * 4 + [
        ([1, 1], ["a", "a"])
    ]
    stat, p = stats.stratified_permutation(cats, "categorical", np.random.default_rng(2), 999)
    # one stratum: table [[2, 2], [0, 4]], expected [[1, 3], [1, 3]] -> chi2 = 1+1/3+1+1/3
    assert stat == pytest.approx(4 * (8 / 3))
    # exact: a stratum reaches 8/3 when arm 1's four draws hold 0 or 2 of the two "a"s,
    # (15 + 15) / 70 = 3/7; all four strata at once: (3/7)^4 = 0.0337
    assert abs(p - (3 / 7) ** 4) < 0.02
    with pytest.raises(ValueError):
        stats.stratified_permutation(cats, "ordinal", np.random.default_rng(0))


def _q(arm: str, i: int, passed: bool, severity: str = "key", check: str = "c") -> QualityRecord:
    return QualityRecord(
        "r",
        arm,
        "g",
        f"p{i % 5}",
        check,
        "regex",
        severity,
        passed,
        [] if passed else ["bad"],
        request_id=f"q{i}",
    )


def test_pass_rate_counts_outputs_failing_any_key_check_and_ignores_minor():
    recs = [_q("base", i, True) for i in range(10)]
    recs += [_q("base", i, i != 3, check="c2") for i in range(10)]  # output 3 fails a key check
    recs += [_q("base", i, False, "minor", "style") for i in range(10)]  # minor: reported only
    [pr] = pass_rates(recs)
    assert (pr.n, pr.passed, pr.reasons) == (10, 9, {"bad": 1})
    assert output_verdicts(recs)[("r", "base", "g", "p3", "q3", 0)] == (False, ["bad"])


def test_non_inferiority_conclusions():
    def rates(kb: int, kc: int, n: int):
        recs = [_q("base", i, i < kb) for i in range(n)] + [_q("cand", i, i < kc) for i in range(n)]
        return pass_rates(recs)

    [ni] = non_inferiority(rates(45, 45, 50), "base", margin=0.10, alpha=0.05)
    assert ni.conclusion == "underpowered" and ni.diff == 0.0 and ni.n_for_80 > 50
    assert ni.lower_bound == pytest.approx(stats.newcombe(45, 50, 45, 50, 0.10)[0])
    [ni] = non_inferiority(rates(300, 300, 320), "base", margin=0.10, alpha=0.05)
    assert ni.conclusion == "non_inferior" and ni.power > 0.99
    [ni] = non_inferiority(rates(300, 250, 320), "base", margin=0.10, alpha=0.05)
    assert ni.conclusion == "inferior" and math.isclose(ni.diff, -50 / 320)
    assert ni.upper_bound is not None and ni.upper_bound < 0
    # worse by less than the test can call, yet not shown within the margin at adequate power
    [ni] = non_inferiority(rates(1620, 1593, 1800), "base", margin=0.03, alpha=0.05)
    assert ni.conclusion == "inferior_not_excluded", (ni.lower_bound, ni.upper_bound, ni.power)
    # a check the baseline itself mostly fails says nothing about the candidate
    [ni] = non_inferiority(rates(10, 2, 40), "base", margin=0.10, alpha=0.05, floor=0.5)
    assert ni.conclusion == "uninformative"


def test_gate_notes_what_it_cannot_conclude():
    from specpilot.quality.summary import gate

    recs = [_q("base", i, True) for i in range(20)] + [_q("cand", i, True) for i in range(20)]
    recs.append(
        QualityRecord(
            "r", "cand", "mine", "m1", "consistency_only", "consistency_only", "minor", True
        )
    )
    sandboxed = QualityRecord(
        "r", "cand", "code", "c1", "tests_pass", "code_tests", "key", True, isolation="rlimits"
    )
    v = gate([*recs, sandboxed], [], baseline_arm="base", candidate_arm="cand")
    assert v.passed and v.reasons == []
    assert any(n.startswith("g: n = 20 per arm gives power") for n in v.notes)
    assert "mine: no checks declared, compared between arms only" in v.notes
    assert any(n.startswith("code: code ran under resource limits only") for n in v.notes)


def test_top1_rate_is_skipped_when_an_engine_omits_alternatives():
    from specpilot.quality.sampled import distribution_tests
    from specpilot.records import OutputRecord

    def o(arm: str, i: int, tops: bool) -> OutputRecord:
        toks = ["a", "b"]
        alt = [[["a", -0.1]], [["b", -0.2]]] if tops else [[["a", -0.1]], []]
        return OutputRecord("r", arm, "g", "p", i, i, 0.8, "ab", toks, [-0.1, -0.2], alt)

    outs = [o("base", i, True) for i in range(6)] + [o("cand", i, False) for i in range(6)]
    tests = {t.test: t for t in distribution_tests(outs, "base", "cand", permutations=99)}
    assert "top1_rate" not in tests  # no candidate sample has it: nothing to compare
    assert not tests["mean_logprob"].differs and tests["mean_logprob"].samples == (6, 6)


def test_log_prob_tests_are_left_out_when_the_candidate_log_probs_are_broken():
    from specpilot.quality.summary import _logprobs_broken, gate
    from specpilot.records import CompatRecord

    bad = [CompatRecord("r", "cand", "logprobs", "fail", evidence="position 1: no alternatives")]
    assert _logprobs_broken(bad, "cand") == "position 1: no alternatives"
    assert _logprobs_broken(bad, "other") == ""
    v = gate([], [], bad, baseline_arm="base", candidate_arm="cand")
    assert any("log-prob distribution tests left out" in n for n in v.notes)


def _sampled_pair(shift: float, sharpen: float, seed: int = 5):  # type: ignore[no-untyped-def]
    """Seeded sampled outputs of a baseline and a candidate over one 5-token target: the
    candidate samples ``p ** sharpen`` (1: the target itself) and reports the target's
    log-probs plus ``shift`` (an engine that reports its log-probs otherwise)."""
    import numpy as np

    from specpilot.records import OutputRecord

    vocab = ["a", "b", "c", "d", "e"]
    p = np.array([0.4, 0.25, 0.15, 0.12, 0.08])
    rng = np.random.default_rng(seed)
    out = []
    for arm, q, add in (("base", p, 0.0), ("cand", p**sharpen / (p**sharpen).sum(), shift)):
        for prompt in range(4):
            for i in range(24):
                toks = [vocab[j] for j in rng.choice(5, size=8, p=q)]
                lps = [float(np.log(p[vocab.index(t)])) + add for t in toks]
                tops = [[["a", float(np.log(0.4)) + add], ["b", float(np.log(0.25)) + add]]] * 8
                out.append(
                    OutputRecord(
                        "r", arm, "g", f"p{prompt}", i, i, 0.8, "".join(toks), toks, lps, tops
                    )
                )
    return out


def test_shifted_log_probs_pass_when_not_comparable_and_a_biased_sampler_fails():
    """The gate tests the outputs: a candidate that samples the target's distribution but
    reports shifted log-probs passes where its log-probs are not known to be comparable (its
    engine not known to report the target's, its logprobs check not run), and fails where
    they are taken as comparable (the log-prob test has teeth); a sampler that is truly
    biased fails on its emitted tokens alone."""
    from specpilot.quality.summary import gate
    from specpilot.records import CompatRecord

    shifted = _sampled_pair(shift=0.5, sharpen=1.0)
    v = gate([], shifted, baseline_arm="base", candidate_arm="cand", target_logprobs=False)
    assert v.passed, v.reasons
    assert any("not comparable" in n and "was not run" in n for n in v.notes), v.notes
    assert {t.test for t in v.distribution} == {"token@0", "token@1"}
    v = gate([], shifted, baseline_arm="base", candidate_arm="cand", target_logprobs=True)
    assert not v.passed and any("mean_logprob" in r for r in v.reasons), v.reasons
    passed = [CompatRecord("r", "cand", "logprobs", "pass")]
    v = gate([], shifted, passed, baseline_arm="base", candidate_arm="cand", target_logprobs=False)
    assert not v.passed  # a check that passed makes them comparable: the shift is seen
    biased = _sampled_pair(shift=0.0, sharpen=2.0)
    v = gate([], biased, baseline_arm="base", candidate_arm="cand", target_logprobs=False)
    assert not v.passed and any("token@" in r for r in v.reasons), v.reasons


def test_only_the_builtin_engine_is_known_to_report_the_target_log_probs():
    from specpilot.backends.adapters import ADAPTERS

    known = {name for name, a in ADAPTERS.items() if a.target_logprobs}
    assert known == {"builtin"}


def test_the_report_and_the_quality_command_know_the_engine_alike():
    from specpilot.analysis.verdicts.quality import reports_target_logprobs
    from specpilot.records import ArmRecord, PilotData, PilotRecord

    arms = [ArmRecord("p", "r1", "spec", "speculative", "builtin"),
            ArmRecord("p", "r2", "ngram", "extra", "llamacpp")]  # fmt: skip
    data = PilotData(PilotRecord("p", "x", {}, "", "0", 0.0), arms=arms)
    assert reports_target_logprobs(data, "spec") and not reports_target_logprobs(data, "ngram")
    assert not reports_target_logprobs(data, "absent")
