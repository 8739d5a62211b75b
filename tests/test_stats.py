"""The small-sample statistics of ``analysis.base.stats`` against scipy and against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as sp

from specpilot.analysis.base import stats


@pytest.mark.parametrize("df", [1, 2.5, 3, 7, 30, 200])
def test_t_distribution_matches_scipy(df: float) -> None:
    for x in (-4.0, -1.3, 0.0, 0.7, 2.2, 9.0):
        assert stats.t_cdf(x, df) == pytest.approx(sp.t.cdf(x, df), abs=1e-9)
    for p in (0.6, 0.9, 0.975, 0.995):
        assert stats.t_quantile(p, df) == pytest.approx(sp.t.ppf(p, df), abs=1e-7)


def test_sign_flip_p_is_the_enumeration() -> None:
    rng = np.random.default_rng(3)
    d = rng.normal(0.2, 1.0, 9)
    obs = abs(d.sum())
    brute = np.mean(
        [abs(np.dot(s, d)) >= obs - 1e-12 for s in itertools.product((-1, 1), repeat=d.size)]
    )
    assert stats.sign_flip_p(d) == pytest.approx(brute)
    assert stats.sign_flip_p(np.full(8, 0.1)) == pytest.approx(stats.sign_flip_min_p(8))


def test_sign_flip_holds_its_level_at_small_n() -> None:
    # under the null (symmetric differences), P(p <= 0.05) must not exceed 0.05 at any n
    rng = np.random.default_rng(0)
    for n in (3, 5, 8, 12):
        ps = np.array([stats.sign_flip_p(rng.standard_t(3, n)) for _ in range(400)])
        assert np.mean(ps <= 0.05) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 400)


def test_monte_carlo_sign_flip_agrees_with_the_t_test_at_large_n() -> None:
    rng = np.random.default_rng(1)
    d = rng.normal(0.15, 1.0, 400)
    t_p = sp.ttest_1samp(d, 0.0).pvalue
    assert stats.sign_flip_p(d, np.random.default_rng(0)) == pytest.approx(t_p, abs=0.01)


def test_the_sign_flip_of_discordant_pairs_is_the_exact_mcnemar_test() -> None:
    for a, b in ((0, 0), (0, 6), (2, 9), (5, 5), (11, 3)):
        want = 1.0 if a + b == 0 else sp.binomtest(a, a + b, 0.5).pvalue
        assert stats.sign_flip_p(np.r_[-np.ones(a), np.ones(b)]) == pytest.approx(want)


def test_holm_tarone_leaves_out_what_cannot_reach_significance() -> None:
    # plain Holm when every test can reach the threshold
    assert stats.holm_tarone([0.01, 0.02, 0.03], [0.0, 0.0, 0.0], 0.05) == pytest.approx(
        [0.03, 0.04, 0.04]
    )
    # two tests whose smallest attainable p is 0.5 do not dilute the third
    assert stats.holm_tarone([0.02, 1.0, 0.5], [0.001, 0.5, 0.5], 0.05) == [0.02, 1.0, 1.0]


def test_holm_tarone_controls_the_family_wise_error() -> None:
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(300):
        ns = rng.integers(3, 14, size=12)
        ps = [stats.sign_flip_p(rng.normal(0, 1, n)) for n in ns]
        mins = [stats.sign_flip_min_p(int(n)) for n in ns]
        hits += min(stats.holm_tarone(ps, mins, 0.05)) < 0.05
    assert hits / 300 <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 300)


def test_pairs_needed_and_power_agree() -> None:
    n = stats.pairs_needed(0.2, 0.0, 0.1, 0.05)
    assert n is not None and stats.power(0.1, 0.2 / np.sqrt(n), 0.05) == pytest.approx(
        0.8, abs=0.02
    )
    # a drift as large as the effect: no number of pairs decides it
    assert stats.pairs_needed(0.2, 0.1, 0.1, 0.05) is None
    assert stats.satterthwaite(1.0, 4, 0.0, 0) == pytest.approx(4.0)


@pytest.mark.parametrize("q,n", [(0.5, 9), (0.5, 40), (0.9, 60), (0.99, 400)])
def test_quantile_interval_covers_the_true_quantile_at_its_level(q: float, n: int) -> None:
    rng = np.random.default_rng(7)
    true = float(sp.expon.ppf(q))
    hits = 0
    for _ in range(1000):
        lo, hi = stats.quantile_interval(rng.exponential(size=n), q, 0.95)
        hits += (lo is None or lo <= true) and (hi is None or true <= hi)
    assert hits >= 940, f"{hits} of 1000"  # at least 95% by construction, less sampling error


def test_quantile_interval_leaves_open_what_few_values_cannot_bound() -> None:
    x = np.arange(1.0, 51.0)
    lo, hi = stats.quantile_interval(x, 0.99, 0.95)
    assert lo is not None and hi is None  # 50 values: the p99 may lie above all of them
    assert stats.quantile_interval(np.array([np.inf, np.nan]), 0.5, 0.95) == (None, None)
