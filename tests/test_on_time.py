"""The on-time test counts episodes, not requests: the requests of one episode share the
machine's moment and its queue, so a burst that runs late is one late observation.

These rebuild the shape seen on 2026-12-02 (AMD EPYC AVX-512 kind): in a 6 s burst every
request ran late together. Synthetic arms, seeded, no engine.
"""

from __future__ import annotations

import pytest

from pilot_cases import compare
from specpilot.analysis.base.requests import RequestTable
from specpilot.records import RequestRecord


def request(arm: str, i: int, episode: int, e2e: float, deadline: float) -> RequestRecord:
    """The ``i``-th scheduled request of ``arm``'s run, in ``episode``: ok after ``e2e``; as
    the analysis sees it (``analysis.base.fold``), by level, its episode in its id."""
    t0 = 10.0 * i
    return RequestRecord(
        f"run-{arm}", arm, "burst", "code", f"burst~{episode:04d}-{i:06d}", t0, "ok", sent_t=t0,
        first_content_t=t0 + 0.3, done_t=t0 + e2e, output_tokens=40, deadline_s=deadline,
        prompt_id=f"p{i}",
    )  # fmt: skip


def pooled(reqs: list[RequestRecord]):
    out = compare(
        RequestTable.build(reqs), "base", "cand", resamples=50, seed=1, level=0.95, min_pairs=8
    )
    return next(c for c in out if c.task_group == "*")


def burst(episode_of) -> list[RequestRecord]:
    """Ten requests; the candidate's run past the 3.5 s deadline on every one."""
    return [
        request(arm, i, episode_of(i), 3.0 * (1.3 if arm == "cand" else 1.0), 3.5)
        for arm in ("base", "cand")
        for i in range(10)
    ]


def test_requests_late_together_are_one_late_observation() -> None:
    # one episode: one observation of lateness, not ten (McNemar on the pairs: p = 0.002)
    late = pooled(burst(lambda i: 1))
    assert late.outcome == "insufficient" and late.p_on_time == 1.0 and late.clusters == 1
    # ten episodes of one request each: ten observations, "slower" by the on-time test alone
    apart = pooled(burst(lambda i: i + 1))
    assert apart.outcome == "slower" and apart.p_on_time < 0.01 and apart.clusters == 10


def test_the_on_time_test_of_many_episodes_is_the_mcnemar_test_in_its_normal_limit() -> None:
    # 8,000 pairs each in its own episode, 6,000 discordant (above SIGN_FLIP_MAX): the
    # candidate late on 3,100 the baseline made, on time on 2,900 it missed; the exact McNemar
    # p (scipy) and the normal limit agree
    from scipy import stats as sp

    from specpilot.analysis.comparison.pairs import SIGN_FLIP_MAX

    def late(arm: str, i: int) -> bool:
        return (arm == "cand" and i < 3100) or (arm == "base" and 3100 <= i < 6000)

    reqs = [
        request(arm, i, i, 5.0 if late(arm, i) else 2.0, 3.0)
        for arm in ("base", "cand")
        for i in range(8000)
    ]
    c = pooled(reqs)
    want = sp.binomtest(2900, 6000, 0.5).pvalue
    assert SIGN_FLIP_MAX < 6000 and c.clusters == 8000
    assert c.p_on_time == pytest.approx(want, rel=0.15)


def test_a_file_whose_pairs_carry_no_episodes_is_refused_with_the_fix() -> None:
    """A pilot file of the retired sequential or interleaved design: its unit, the busy
    period, is gone, so it is refused by name, not analysed another way."""
    from specpilot.errors import ConfigError

    old = [
        RequestRecord(f"run-{arm}", arm, "peak", "code", f"peak-{i:06d}", 10.0 * i, "ok",
                      sent_t=10.0 * i, done_t=10.0 * i + 2.0, output_tokens=40)
        for arm in ("base", "cand")
        for i in range(10)
    ]  # fmt: skip
    with pytest.raises(ConfigError) as e:
        pooled(old)
    assert "cand against base" in str(e.value) and "10 of 10 pairs carry no episode" in str(e.value)
    assert "run the pilot again" in (e.value.fix or "")
