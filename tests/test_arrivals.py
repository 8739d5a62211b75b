"""Arrival processes: determinism, rates, and goodness of fit (scipy) for Poisson and gamma."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specpilot.errors import ConfigError
from specpilot.workload import Constant, Gamma, Poisson, Steps, TraceReplay
from specpilot.workload.trace import Trace


def test_constant_is_evenly_spaced_and_ends_before_the_duration():
    t = Constant(4.0).times(2.0)
    assert t.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    assert Constant(3.0).times(0.0).size == 0


@pytest.mark.parametrize(
    "proc", [Poisson(3.0, seed=5), Gamma(3.0, cv=2.5, seed=5), Steps([(5, 1.0), (5, 4.0)], seed=5)]
)
def test_same_seed_same_arrivals_different_seed_different(proc):
    a, b = proc.times(10.0), proc.times(10.0)
    assert np.array_equal(a, b)
    assert np.all(np.diff(a) >= 0) and (a.size == 0 or (a[0] >= 0 and a[-1] < 10.0))
    other = type(proc)(**{**proc.__dict__, "seed": 6})
    assert not np.array_equal(a, other.times(10.0))


def test_poisson_gaps_are_exponential_and_counts_poisson():
    rate, dur = 5.0, 2000.0
    t = Poisson(rate, seed=11).times(dur)
    gaps = np.diff(t)
    # Kolmogorov-Smirnov against Exp(rate): must not reject at 1 %.
    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 0.01
    assert abs(t.size / dur - rate) < 4 * np.sqrt(rate / dur)
    # Counts in 1-s bins: chi-square goodness of fit against Poisson(rate).
    counts = np.histogram(t, bins=np.arange(0, dur + 1, 1.0))[0]
    ks = np.arange(0, 12)
    observed = np.array([np.sum(counts == k) for k in ks[:-1]] + [np.sum(counts >= ks[-1])])
    expected = (
        np.append(stats.poisson.pmf(ks[:-1], rate), stats.poisson.sf(ks[-1] - 1, rate))
        * counts.size
    )
    assert stats.chisquare(observed, expected, ddof=1).pvalue > 0.01
    # Index of dispersion ~ 1 for Poisson.
    assert 0.85 < counts.var() / counts.mean() < 1.15


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_gaps_fit_and_burstiness_is_the_cv(cv):
    rate = 4.0
    g = Gamma(rate, cv=cv, seed=3)
    gaps = np.diff(g.times(3000.0))
    dist = stats.gamma(g.shape, 0, 1 / (rate * g.shape))
    # Very bursty gamma puts a lot of mass near 0 (cv=3: ~20 % of gaps under 1 us), where
    # absolute times in float64 cannot resolve the gaps: test the distribution above 1 ms.
    lo = 1e-3
    tail = gaps[gaps > lo]
    f_lo = dist.cdf(lo)
    assert stats.kstest(tail, lambda x: (dist.cdf(x) - f_lo) / (1 - f_lo)).pvalue > 0.01
    assert abs(np.mean(gaps <= lo) - f_lo) < 0.02
    assert abs(gaps.mean() - 1 / rate) < 0.05 / rate * max(cv, 1)
    assert abs(gaps.std() / gaps.mean() - cv) < 0.1 * cv


def test_bursty_gamma_clusters_arrivals_more_than_poisson():
    dur = 600.0

    def dispersion(t):
        c = np.histogram(t, bins=np.arange(0, dur + 1, 5.0))[0]
        return c.var() / c.mean()

    assert dispersion(Gamma(2.0, cv=3.0, seed=1).times(dur)) > 3 * dispersion(
        Poisson(2.0, seed=1).times(dur)
    )


def test_steps_follow_their_rates():
    st = Steps([(100.0, 1.0), (50.0, 0.0), (100.0, 6.0)], kind="poisson", seed=2)
    t = st.times(st.total_s)
    assert st.total_s == 250.0
    assert not np.any((t >= 100) & (t < 150))  # the pause
    n1, n3 = np.sum(t < 100), np.sum(t >= 150)
    assert 70 < n1 < 130 and 520 < n3 < 680
    assert np.all(np.diff(t) >= 0)
    assert Steps([(2, 1.0), (2, 2.0)], kind="constant").times(3.0).tolist() == [0.0, 1.0, 2.0, 2.5]
    with pytest.raises(ConfigError, match="need at least one step"):
        Steps([])
    with pytest.raises(ConfigError, match="'uniform' is unknown"):
        Steps([(1, 1.0)], kind="uniform")


def test_rates_must_be_positive():
    for bad, field in (
        (lambda: Poisson(0.0), "rate"),
        (lambda: Gamma(1.0, cv=0.0), "cv"),
        (lambda: Constant(-1.0), "rate"),
    ):
        with pytest.raises(ConfigError, match=f"^{field} "):
            bad()


def test_trace_replay_scales_time_and_lengths():
    t = np.arange(0.0, 100.0, 0.5)  # 2 req/s
    tr = Trace.from_arrays(t, np.full(t.size, 1000), np.full(t.size, 300))
    r = TraceReplay(tr, window=(10.0, 20.0), time_scale=4.0, length_scale=0.1, max_output_tokens=20)
    times, ins, outs = r.events()
    assert r.duration_s == 40.0 and times.size == 20
    assert np.allclose(np.diff(times), 2.0) and times[0] == 0.0
    assert set(ins.tolist()) == {100} and set(outs.tolist()) == {20}
    # target_rate picks the time scale: 2 req/s in the window -> 0.5 req/s replayed.
    r2 = TraceReplay(tr, window=(10.0, 20.0), target_rate=0.5)
    assert r2.effective_time_scale == pytest.approx(4.0) and r2.times(1e9).size == 20
    assert r2.describe()["time_scale"] == pytest.approx(4.0)
    # The whole trace keeps its last arrival.
    assert TraceReplay(tr).events()[0].size == t.size
