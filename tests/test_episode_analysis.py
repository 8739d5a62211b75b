"""The episode design's records through the whole analysis: phases ``level~NN`` folded into
their level, each cell estimated by processes and episodes, the planted arm found (or not) at
each level, and a level where it was not found gives no candidate a direction.

Hand-built pilots (no engine): 4 processes per arm with seeded offsets, 12 episodes per level (10 leave the
pooled cell 2 df for the episode noise once its two task groups took theirs)
with a shock each, requests with their own noise; the speculative arm's true effect and the
planted factor are known by construction.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specpilot.analysis import AnalysisConfig, analyze
from specpilot.analysis.comparison.paired import Interval, PairedComparison
from specpilot.analysis.verdicts.undecided import not_shown, request_share, rerun
from specpilot.pilot.design import crossed
from specpilot.records import (
    ArmRecord,
    HardwareFacts,
    PhaseRecord,
    PilotData,
    PilotRecord,
    RequestRecord,
    StrategySpec,
)

LEVELS = {"off_peak": 1.0, "peak": 3.0}  # offered req/s
EPISODES = 12


def _requests(rid: str, arm: str, name: str, k: int, index: int, lat: np.ndarray) -> list:
    """Episode ``k``'s requests of one run, alternately code and zh, with latencies ``lat``."""
    out = []
    for i, x in enumerate(lat):
        t0 = 1000.0 * k + 10.0 * i
        out.append(
            RequestRecord(
                rid, arm, name, ("code", "zh")[i % 2], f"{name}-{index + i:06d}",
                t0, "ok", prompt_id=f"q{index + i}", sent_t=t0,
                first_content_t=t0 + 0.1, done_t=t0 + float(x), output_tokens=20,
            )
        )  # fmt: skip
    return out


def _pilot(
    effect: float, planted: float, *, seed: int = 0, n: int = 6, m: int = 4, sd: float = 0.075
) -> PilotData:
    rng = np.random.default_rng(seed)
    arms = {"baseline": 1.0, "speculative": 1.0 + effect, "planted": 1.0 + planted}
    arms["speculative-k0"] = 1.0  # the speculative processes switched off in place
    offset = {  # process effects: the planted arm reaches the baseline's processes
        "baseline": rng.normal(0, sd, m),
        "speculative": rng.normal(0, sd, m),
    }
    offset["planted"] = offset["baseline"]
    offset["speculative-k0"] = offset["speculative"]
    records, phases, runs = [], [], []
    for arm in arms:
        role = {"speculative-k0": "within"}.get(arm, arm)
        strat = StrategySpec("draft", k=3) if arm == "speculative" else StrategySpec()
        for j in range(m):
            manifest = {
                "planted": {"factor": planted, "of_run": f"p.baseline.p{j}"},
                "speculative-k0": {"within": {"of_run": f"p.speculative.p{j}"}},
            }.get(arm, {})
            manifest = {"planted": manifest} if arm == "planted" else manifest
            runs.append(
                ArmRecord("p", f"p.{arm}.p{j}", arm, role, "builtin", strategy=strat,
                          manifest=manifest, status="complete", run_order=len(runs))
            )  # fmt: skip
    index = 0
    for level, rate in LEVELS.items():
        serve = crossed(EPISODES, m, 3, seed + 1)
        for k in range(EPISODES):
            name = f"{level}~{k + 1:02d}"
            shock = rng.normal(0, 0.04)
            base = 2.0 * rng.lognormal(0, 0.25, n)
            procs = {"baseline": serve[0][k], "speculative": serve[1][k], "planted": serve[2][k]}
            procs["speculative-k0"] = procs["speculative"]
            for arm, factor in arms.items():
                rid = f"p.{arm}.p{procs[arm]}"
                phases.append(PhaseRecord(rid, arm, name, 0.0, 10.0, rate, n, status="complete"))
                lat = (
                    base * factor * np.exp(offset[arm][procs[arm]] + shock + rng.normal(0, 0.1, n))
                )
                records += _requests(rid, arm, name, k, index, lat)
            index += n
    pilot = PilotRecord("p", "episodes", {}, "", "0", 0.0, hardware=HardwareFacts(cpu_model="x"))
    return PilotData(pilot=pilot, arms=runs, phases=phases, requests=records)


CFG = AnalysisConfig(bootstrap_resamples=100)


def _pooled(a, cand, base="baseline"):
    return {
        c.phase: c
        for c in a.comparisons
        if (c.baseline_arm, c.candidate_arm) == (base, cand) and c.task_group == "*"
    }


def test_cells_are_estimated_by_processes_and_episodes_and_the_planted_is_found():
    a = analyze(_pilot(effect=-0.3, planted=0.4, n=8), CFG)
    spec, plant = _pooled(a, "speculative"), _pooled(a, "planted")
    assert set(spec) == set(LEVELS)  # the episode phases folded into their levels
    for c in spec.values():
        assert c.clusters == EPISODES and c.outcome == "faster", (c.clusters, c.outcome)
    assert all(c.outcome == "slower" for c in plant.values())
    assert [r.found for r in a.planted] == [True, True]
    assert all("found the planted +40%" in r.text for r in a.planted)
    v = a.verdicts[0]
    assert v.verdict == "ADOPT" and "found the planted +40%" in v.planted
    # the A/A contrast: the planted arm less its known +40%
    assert a.aa is not None and a.aa.control_arm == "planted less its +40%"
    assert "processes and episodes are the units of every interval" in a.aa.text


def test_a_level_where_the_planted_effect_was_missed_decides_nothing():
    # a planted +1% is below what 4 processes per arm can detect: missed at every level, so the
    # candidate's real -30% gets no direction anywhere: UNDECIDED, never ADOPT
    a = analyze(_pilot(effect=-0.3, planted=0.01, n=8), CFG)
    assert not any(r.found for r in a.planted)
    v = a.verdicts[0]
    assert v.verdict == "UNDECIDED", v.summary
    texts = [c.text for c in v.conditions if c.kind == "e2e_change"]
    assert texts and all("planted slowdown was not found" in t for t in texts if "-> faster" in t)


@pytest.mark.parametrize("seed", range(3))
def test_no_true_effect_is_never_called_a_direction(seed):
    a = analyze(_pilot(effect=0.0, planted=0.4, seed=seed), CFG)
    assert all(
        c.outcome in ("no_difference", "insufficient") for c in _pooled(a, "speculative").values()
    )


def test_the_same_processes_switched_off_give_the_second_estimate_without_process_noise():
    # process offsets of 30%: the direct estimate of a -20% effect cannot tell, the same
    # processes switched off in place can (their offsets cancel)
    a = analyze(_pilot(effect=-0.2, planted=0.4, n=8, sd=0.3, seed=4), CFG)
    within = {
        c.phase: c
        for c in a.comparisons
        if (c.baseline_arm, c.candidate_arm) == ("speculative-k0", "speculative")
        and c.task_group == "*"
    }
    assert set(within) == set(LEVELS)
    assert all(c.outcome == "faster" for c in within.values()), [c.outcome for c in within.values()]
    for c in within.values():
        assert -0.3 < (c.task_rel_change.estimate or 0) < -0.1
    direct = _pooled(a, "speculative")
    w = {p: c.task_rel_change.high - c.task_rel_change.low for p, c in within.items()}
    d = {p: c.task_rel_change.high - c.task_rel_change.low for p, c in direct.items()}
    assert all(w[p] < d[p] for p in LEVELS), (w, d)
    v = a.verdicts[0]
    assert v.within.startswith("the same processes with speculation switched off vs on")
    assert "-> faster" in v.within


def _in_place_pilot(
    effect: float,
    *,
    seed: int,
    m: int = 6,
    sd: float = 0.3,
    requests_sd: float = 0.0,
    shock_sd: float = 0.0,
) -> PilotData:
    """``episodes.in_place``: the baseline's runs reach the speculative arm's processes (each
    switched off), the planted arm's runs the baseline's: every run's process is a speculative
    one, and the planted arm is crossed over them. Process offsets of ``sd`` (30%: far more
    than two pools of 6 could tell from a -20% effect). ``requests_sd``: the speculative
    effect differs between requests, each request's own for good (log sd; a draft that
    predicts some answers better), drawn apart from the rest so the other draws stay put;
    ``shock_sd``: each of its episodes shifted as one (the machine's moment), likewise."""
    rng = np.random.default_rng(seed)
    own = np.random.default_rng(seed + 100).normal(0.0, requests_sd, 1000)
    shock = np.random.default_rng(seed + 200).normal(0.0, shock_sd, 100)
    offset = rng.normal(0, sd, m)  # one per process, whichever arm it serves
    arms = {"baseline": 1.0, "speculative": 1.0 + effect, "planted": 1.15}
    reach = {"baseline": ("within", "speculative"), "planted": ("planted", "baseline")}
    runs, phases, records = [], [], []
    for arm in arms:
        strat = StrategySpec("draft", k=3) if arm == "speculative" else StrategySpec()
        for j in range(m):
            key, of = reach.get(arm, (None, None))
            manifest = {key: {"of_run": f"p.{of}.p{j}"}} if key else {}
            if arm == "planted":
                manifest["planted"]["factor"] = 0.15
            runs.append(
                ArmRecord("p", f"p.{arm}.p{j}", arm, arm, "builtin", strategy=strat,
                          manifest=manifest, status="complete", run_order=len(runs))
            )  # fmt: skip
    index = 0
    for level, rate in LEVELS.items():
        serve = crossed(EPISODES, m, 2, seed + 1)
        for k in range(EPISODES):
            name, n = f"{level}~{k + 1:02d}", 6
            base = 2.0 * rng.lognormal(0, 0.25, n)
            # the planted run j reaches baseline run j, which is speculative process j
            procs = {"speculative": serve[0][k], "baseline": serve[0][k], "planted": serve[1][k]}
            for arm, factor in arms.items():
                rid = f"p.{arm}.p{procs[arm]}"
                phases.append(PhaseRecord(rid, arm, name, 0.0, 10.0, rate, n, status="complete"))
                lat = base * factor * np.exp(offset[procs[arm]] + rng.normal(0, 0.05, n))
                lat *= (
                    np.exp(own[index : index + n] + shock[index // n])
                    if arm == "speculative"
                    else 1.0
                )
                records += _requests(rid, arm, name, k, index, lat)
            index += n
    pilot = PilotRecord("p", "episodes", {}, "", "0", 0.0, hardware=HardwareFacts(cpu_model="x"))
    return PilotData(pilot=pilot, arms=runs, phases=phases, requests=records)


def test_in_place_both_arms_share_each_process_and_its_offset_cancels():
    a = analyze(_in_place_pilot(-0.2, seed=5), CFG)
    spec, plant = _pooled(a, "speculative"), _pooled(a, "planted")
    for c in spec.values():
        assert c.outcome == "faster", c.task_rel_change
        assert c.episode_noise["design"] == "in_place" and c.episode_noise["processes"] == [6, 6]
        assert -0.25 < c.task_rel_change.estimate < -0.15
    # the planted arm reaches the baseline, which reaches a speculative process: one pool
    for c in plant.values():
        assert c.outcome == "slower" and c.episode_noise["design"] == "one_pool", c.episode_noise
    assert [r.found for r in a.planted] == [True, True]
    assert a.aa is not None and a.aa.directional == (), a.aa.text


def test_a_candidates_own_spread_between_requests_is_told_from_the_measurements():
    # every request's noise is 5% per arm (a pair's 7%); the speculative effect differs
    # between requests by 40% besides: the planted arm's pairs spread by the 7% alone
    a = analyze(_in_place_pilot(0.0, seed=5, requests_sd=0.4), CFG)
    for c in _pooled(a, "speculative").values():
        assert 0.3 < c.request_sd < 0.5, c.request_sd
        assert c.episode_noise["pair_sd"] > c.request_sd
        assert c.outcome == "insufficient", c.task_rel_change
    for c in _pooled(a, "planted").values():
        assert c.request_sd is None and 0.04 < c.episode_noise["pair_sd"] < 0.11
    (v,) = [v for v in a.verdicts if v.candidate_arm == "speculative"]
    said = f"{v.summary} {v.bottleneck}"
    assert "of the spread between its episodes is its requests differing from one" in said, said
    assert "more requests per level narrow that part, whatever the machine" in said
    # the same pilot with one effect for every request: nothing of its spread is its own
    a = analyze(_in_place_pilot(0.0, seed=5), CFG)
    for c in _pooled(a, "speculative").values():
        assert c.request_sd < 0.05, c.request_sd
    (v,) = [v for v in a.verdicts if v.candidate_arm == "speculative"]
    assert "its requests differing" not in f"{v.summary} {v.bottleneck}"
    # requests that differ a little, episodes that move a lot (the machine's moments): the
    # requests' part of the episodes' spread is small and the headline does not name it
    a = analyze(_in_place_pilot(0.0, seed=6, requests_sd=0.15, shock_sd=0.3), CFG)
    spec = _pooled(a, "speculative")
    assert all(c.outcome == "insufficient" and c.request_sd > 0.08 for c in spec.values())
    assert all(request_share(c) < 0.25 for c in spec.values()), [
        request_share(c) for c in spec.values()
    ]
    (v,) = [v for v in a.verdicts if v.candidate_arm == "speculative"]
    said = f"{v.summary} {v.bottleneck}"
    assert "episodes per level would decide" in said and "its requests differing" not in said, said


def test_do_not_adopt_for_no_gain_still_names_the_level_left_open():
    # no difference at off-peak; at peak the effect differs by 40% between requests: undecided
    data = _in_place_pilot(0.0, seed=5)
    own = np.random.default_rng(9).normal(0.0, 0.4, len(data.requests))
    reqs = [
        dataclasses.replace(r, done_t=r.sent_t + (r.done_t - r.sent_t) * float(np.exp(x)))
        if r.arm == "speculative" and r.phase.startswith("peak")
        else r
        for r, x in zip(data.requests, own, strict=True)
    ]
    a = analyze(dataclasses.replace(data, requests=reqs), CFG)
    cells = _pooled(a, "speculative")
    assert cells["off_peak"].outcome == "no_difference", cells["off_peak"].task_rel_change
    assert cells["peak"].outcome == "insufficient", cells["peak"].task_rel_change
    (v,) = [v for v in a.verdicts if v.candidate_arm == "speculative"]
    (g,) = [g for g in v.groups if g.task_group == "*"]
    assert g.verdict == "DO_NOT_ADOPT", g
    rate = {phase: f"{r:.3g} req/s" for phase, r, _ in g.levels}
    assert f"no difference at off_peak ({rate['off_peak']}), " in g.bottleneck, g.bottleneck
    assert "inside the +-10% margin" in g.bottleneck
    needed = cells["peak"].episodes_needed
    assert needed and f"undecided at peak ({rate['peak']}) (about {needed} episodes" in g.bottleneck
    assert (
        needed <= 99
        and f"would decide it: rerun the pilot with --episodes {needed})" in g.bottleneck
    )
    # the design's planned episodes reach the advice: a level that ran fewer than planned is
    # not told to run more
    for planned, said in ((12, f"--episodes {needed})"), (99, "the pilot planned 99 per level")):
        pilot = dataclasses.replace(data.pilot, schedule={"design": {"per_level": planned}})
        a = analyze(dataclasses.replace(data, pilot=pilot, requests=reqs), CFG)
        (v,) = [v for v in a.verdicts if v.candidate_arm == "speculative"]
        (g,) = [g for g in v.groups if g.task_group == "*"]
        assert said in g.bottleneck, (planned, g.bottleneck)


def test_a_level_left_open_is_said_as_such_whatever_its_cell_reads():
    iv = Interval(0.01, -0.04, 0.06)
    none = Interval(None, None, None)

    def cell(phase, outcome, **kw):
        return PairedComparison(
            "b", "s", phase, "*", 1.0, 40, 0, 40, iv, none, none, none, none, outcome, "",
            equivalence_margin=0.1, unit="episode", df=9.0, **kw,
        )  # fmt: skip

    cells = [
        cell("off", "no_difference"),
        cell("mid", "no_difference"),
        cell("peak", "insufficient", episodes_needed=30),
        cell("burst", "insufficient", processes_needed=9),
    ]
    levels = [("off", 0.5, ""), ("mid", 1.0, ""), ("peak", 2.0, ""), ("burst", 3.0, "")]
    text = not_shown(cells, "*", levels, planted_missed=frozenset({"mid"}), planned=14)
    assert text == (
        "the decode gain does not show end to end: no difference at off (0.5 req/s), +1.0% "
        "inside the +-10% margin; not decided at mid (1 req/s) (the planted slowdown was not "
        "found there); undecided at peak (2 req/s) (about 30 episodes per level would decide it: "
        "rerun the pilot with --episodes 30); undecided at burst (3 req/s) (about 9 processes "
        "per arm would decide it)"
    )
    # a budget that ran fewer than planned needs minutes, not more episodes; past one pilot's
    # 99 per level the option cannot run them
    assert rerun(12, planned=14) == (
        " (the pilot planned 14 per level and ran fewer here: its sequential looks say why)"
    )
    assert rerun(150) == "; that is more than one pilot runs (99 per level)"


def test_a_levels_offered_rate_is_the_arms_whole_level_not_one_processes_episodes():
    from specpilot.analysis.base.fold import arm_rates, fold_phases

    # two processes of one arm: one served the level's sparse slices, the other its dense ones
    ph = [
        PhaseRecord(f"r{j}", "a", f"peak~0{k}", 0.0, 10.0, 0.0, n, status="complete")
        for j, k, n in ((0, 1, 5), (0, 3, 5), (1, 2, 25), (1, 4, 25))
    ]
    rates = arm_rates(fold_phases(ph))
    assert rates == {("a", "peak"): pytest.approx(60 / 40)}  # not r1's 2.5 or r0's 0.5


def test_a_request_served_with_the_wrong_strategy_in_place_is_said():
    import dataclasses

    data = _in_place_pilot(-0.2, seed=5)
    design = {"kind": "episodes", "in_place": "speculative"}
    pilot = dataclasses.replace(data.pilot, schedule={"design": design})
    reqs = [
        dataclasses.replace(r, served_k={"speculative": 3}.get(r.arm, 0)) for r in data.requests
    ]
    reqs[0] = dataclasses.replace(reqs[0], served_k=3 if reqs[0].arm != "speculative" else 0)
    a = analyze(dataclasses.replace(data, pilot=pilot, requests=reqs), CFG)
    held = [n for n in a.notes if "the in-place switch did not hold" in n]
    assert held == [
        f"1 measured {reqs[0].arm} requests were served with speculation "
        f"{'off' if reqs[0].arm == 'speculative' else 'on'}: the in-place switch did not hold "
        "for them, and their pairs are not the comparison the design made (see the runs' "
        "failures)"
    ]
    # the drill switches speculation off on purpose: its requests at k = 0 are no such case
    spec = next(r for r in reqs if r.arm == "speculative")
    drill = dataclasses.replace(spec, phase="drill", request_id="drill-000001", served_k=0)
    ok = analyze(dataclasses.replace(data, pilot=pilot, requests=[*reqs[1:], drill]), CFG)
    assert not [n for n in ok.notes if "did not hold" in n]


def test_where_processes_differ_more_episodes_are_not_promised_to_decide():
    """Two pools whose processes differ by sd 30% (4 per arm): the kept process components do
    not shrink with episodes (``analysis.episodes.celltest.process_floor``), so the undecided cells say
    that more episodes alone would not decide them and how many processes would, and the
    verdict repeats it, instead of an episode count scaled as 1/sqrt(episodes)."""
    from specpilot.analysis.episodes.celltest import process_floor

    a = analyze(_pilot(effect=0.05, planted=0.4, sd=0.3, seed=0), CFG)
    cells = _pooled(a, "speculative").values()
    assert cells and all(c.outcome == "insufficient" for c in cells)
    for c in cells:
        assert process_floor(c.episode_noise) > 0.01  # (25%)^2 / 4 and more
        assert c.episodes_needed is None and c.processes_needed is not None
        assert c.processes_needed > 4
    assert "more episodes alone would not decide it" in a.verdicts[0].summary
    # with the processes alike (sd 0.5%), the same cells are promised a number of episodes
    b = analyze(_pilot(effect=0.05, planted=0.4, sd=0.005, seed=0), CFG)
    near = [c for c in _pooled(b, "speculative").values() if c.outcome == "insufficient"]
    assert all(c.processes_needed is None for c in near)


def test_every_record_with_a_phase_is_seen_by_level_but_the_counters_by_episode():
    """The rounds, chunk gaps, prefills and step cadences of an episode count for its level
    (seen: a default pilot's round and Leviathan tables had a row per episode, its load cells
    no ITL, and the report's simulation fell back to request times); the snapshots keep their
    episodes, since an engine's counters are deltas over each episode's edges."""
    from specpilot.analysis.base.fold import fold
    from specpilot.records import (
        ChunkGaps,
        MetricSnapshot,
        PrefillRecord,
        RequestRounds,
        StepCadence,
    )

    eps = ("peak~01", "peak~02")
    data = dataclasses.replace(
        _pilot(0.0, 0.15),
        request_rounds=[RequestRounds("p.baseline.p0", "baseline", e, "code", f"{e}-1", 4, 4, 8, 4, 8, 0.0, 0.1, 0.0) for e in eps],
        chunk_gaps=[ChunkGaps("p.baseline.p0", "baseline", e, "code", [0.02, 0.03], [1, 2]) for e in eps],
        prefills=[PrefillRecord(f"{e}-1", 10, 0.01, 0.0, arm="baseline", phase=e) for e in eps],
        step_cadence=[StepCadence("baseline", e, 1, 5, 0.02, 0.01, 0.03) for e in eps],
        snapshots=[MetricSnapshot("p.baseline.p0", "baseline", e, "after", 0.0, "builtin", rss_bytes=1 << 30) for e in eps],
    )  # fmt: skip
    f = fold(data)
    for records in (f.request_rounds, f.chunk_gaps, f.prefills, f.step_cadence):
        assert [r.phase for r in records] == ["peak", "peak"]
    assert [s.phase for s in f.snapshots] == list(eps)
    assert {p.phase for p in f.phases} == set(LEVELS)
    a = analyze(data)
    cells = {(c.arm, c.phase): c for c in a.load_cells if c.task_group == "*"}
    assert cells[("baseline", "peak")].tokens_per_chunk == 1.5
    assert {r.phase for r in a.rounds} == {"peak"}
