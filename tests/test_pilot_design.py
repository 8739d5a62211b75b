"""The episode design (``pilot.design``): episodes are slices of the schedule with the same
requests on every arm, the arm order is balanced, the process assignment is crossed, and the
whole design is one record made before anything runs."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter

import pytest

from specpilot.pilot.config.file import PilotConfigError, parse_pilot
from specpilot.pilot.design import (
    PLANTED,
    EpisodeSettings,
    arm_orders,
    crossed,
    design_arms,
    design_record,
    split_schedule,
)
from specpilot.pilot.run.episode_run import episode_runs
from specpilot.records import level_of
from specpilot.workload import build_schedule, parse_workload

WORKLOAD = {
    "seed": 3,
    "groups": {"code": {}, "structured": {}},
    "warmup": {"requests": 1, "rate": 1.0},
    "phases": [
        {"name": "off_peak", "duration_s": 40, "arrival": {"kind": "poisson", "rate": 0.5}},
        {"name": "peak", "duration_s": 20, "arrival": {"kind": "poisson", "rate": 1.5}},
    ],
}


def test_episodes_are_cut_at_the_widest_gaps_with_their_own_gaps_kept():
    s = build_schedule(parse_workload(WORKLOAD))
    e = split_schedule(s, 5)
    measured = [r for r in s.requests if not r.warmup]
    split = [r for r in e.requests if not r.warmup]
    assert sorted(r.index for r in split) == sorted(r.index for r in measured)
    assert [p.name for p in e.phases if not p.warmup] == [
        f"{lv}~{k:02d}" for lv in ("off_peak", "peak") for k in range(1, 6)
    ]
    by_index = {r.index: r for r in measured}
    for lv in ("off_peak", "peak"):
        n = sum(r.phase == lv for r in measured)
        counts = [p.requests for p in e.phases if level_of(p.name) == lv]
        assert sum(counts) == n and min(counts) >= n // 10  # none under half its share
        inside, cut = [], []
        for k in range(1, 6):
            mine = sorted((r for r in split if r.phase == f"{lv}~{k:02d}"), key=lambda r: r.index)
            assert mine[0].send_t == 0.0  # the episode starts at its first arrival
            was = [by_index[r.index].send_t for r in mine]
            assert [r.send_t for r in mine] == pytest.approx([t - was[0] for t in was])
            assert [r.index for r in mine] == sorted(r.index for r in mine)  # consecutive
            inside += [b - a for a, b in itertools.pairwise(was)]
            if k < 5:
                nxt = min(by_index[r.index].send_t for r in split if r.phase == f"{lv}~{k + 1:02d}")
                cut.append(nxt - was[-1])
        # the silence between episodes (not played) is more than even counts would cut
        times = sorted(r.send_t for r in measured if r.phase == lv)
        even = [times[round(k * n / 5)] - times[round(k * n / 5) - 1] for k in range(1, 5)]
        assert sum(cut) > sum(even) and max(cut) >= max(inside)
        # the episodes' shares are the level's time: its offered rate is kept
        assert sum(p.duration_s for p in e.phases if level_of(p.name) == lv) == pytest.approx(
            40.0 if lv == "off_peak" else 20.0
        )


def test_a_level_of_fewer_requests_than_episodes_runs_one_episode_a_request():
    s = build_schedule(parse_workload(WORKLOAD))
    keep = [r for r in s.requests if r.warmup or r.phase != "peak" or r.index % 7 == 0]
    n = sum(r.phase == "peak" for r in keep)
    e = split_schedule(dataclasses.replace(s, requests=keep), n + 3)
    assert [p.requests for p in e.phases if level_of(p.name) == "peak"] == [1] * n


@pytest.mark.parametrize("arms", [["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"]])
def test_the_arm_order_is_balanced(arms):
    n = len(arms)
    cycle = 2 * n if n % 2 else n
    orders = arm_orders(arms, 4 * cycle, seed=5)
    assert all(sorted(o) == sorted(arms) for o in orders)
    first = Counter(o[0] for o in orders)
    assert set(first.values()) == {4 * cycle // n}  # each arm first equally often
    last = Counter(o[-1] for o in orders)
    assert set(last.values()) == {4 * cycle // n}


@pytest.mark.parametrize("m", [2, 3, 4])
def test_the_process_assignment_is_crossed_and_balanced(m):
    serve = crossed(m * m * 2, m, 3, seed=1)
    base, cand, other = serve
    assert Counter(base) == Counter({j: 2 * m for j in range(m)})
    assert Counter(cand) == Counter({j: 2 * m for j in range(m)})
    assert Counter(zip(cand, base, strict=True)) == Counter(
        {(i, j): 2 for i in range(m) for j in range(m)}
    )  # every candidate process meets every baseline process, equally often
    assert Counter(zip(other, base, strict=True)) == Counter(
        {(i, j): 2 for i in range(m) for j in range(m)}
    )


@dataclasses.dataclass
class P:
    """The fields design_arms and episode_runs read (pilot.plan.arms.ArmPlan's)."""

    name: str
    role: str
    engine: str = "builtin"
    url: str | None = None
    drill: bool = True
    strategy: object = None


def test_the_design_record_and_its_runs():
    s = split_schedule(build_schedule(parse_workload(WORKLOAD)), 6)
    arms = ["baseline", "speculative", PLANTED]
    d = design_record(s, arms, "baseline", 3, EpisodeSettings(per_level=6, processes=3))
    assert d == design_record(s, arms, "baseline", 3, EpisodeSettings(per_level=6, processes=3))
    assert list(d["levels"]) == ["off_peak", "peak"] and len(d["episodes"]) == 12
    for name, ep in d["episodes"].items():
        assert sorted(ep["order"]) == sorted(arms) and ep["level"] == level_of(name)
        assert set(ep["process"]) == set(arms) and all(0 <= p < 3 for p in ep["process"].values())

    runs = episode_runs([P("baseline", "baseline"), P("speculative", "speculative")], d, "pid")
    assert [r.run_id for r in runs[:3]] == ["pid.baseline.p0", "pid.baseline.p1", "pid.baseline.p2"]
    assert runs[-1].arm.name == PLANTED and runs[-1].arm.role == PLANTED
    for arm in arms:  # every episode of every arm served by exactly one of its runs
        served = Counter(ph for r in runs if r.arm.name == arm for ph in r.phases or ())
        assert served == Counter({name: 1 for name in d["episodes"]})


def _pilot(**over):
    base = {
        "workload": WORKLOAD,
        "arms": [
            {"name": "b", "role": "baseline", "engine": "builtin"},
            {
                "name": "s",
                "role": "speculative",
                "engine": "builtin",
                "options": {"draft": "shipped:smollm2-135m-instruct-d4", "k": 3},
            },
        ],
        "episodes": {"per_level": 4, "processes": 2},
    }
    return parse_pilot({**base, **over}, "p.yaml")


def test_bad_episode_settings_are_refused_by_field():
    assert _pilot().episodes.planted == 0.15
    with pytest.raises(PilotConfigError, match="repetitions"):
        _pilot(repetitions=2)
    with pytest.raises(PilotConfigError, match="per_level"):
        _pilot(episodes={"per_level": 1})
    url = {"name": "u", "role": "extra", "engine": "openai", "url": "http://127.0.0.1:9"}
    with pytest.raises(PilotConfigError, match=r"set episodes\.processes: 1"):
        _pilot(arms=[*_pilot().model_dump()["arms"], url])


def test_a_builtin_speculative_arm_is_also_replayed_switched_off_on_its_own_processes():
    plans = [P("b", "baseline"), P("s", "speculative"), P("lc", "extra", "llamacpp")]
    ep = EpisodeSettings(per_level=4, processes=2)
    arms = design_arms(plans, ep)
    assert arms == ["b", "s", "lc", "s-k0", PLANTED]
    assert design_arms(plans, EpisodeSettings(within=False, planted=None)) == ["b", "s", "lc"]
    s = split_schedule(build_schedule(parse_workload(WORKLOAD)), 4)
    d = design_record(s, arms, "b", 2, ep)
    for e in d["episodes"].values():  # switched off in place: on the speculative arm's process
        assert e["process"]["s-k0"] == e["process"]["s"]
    runs = episode_runs(plans, d, "pid")
    k0 = [r for r in runs if r.arm.name == "s-k0"]
    assert [r.arm.role for r in k0] == ["within", "within"] and k0[0].arm.drill is False
    assert runs.index(k0[0]) > max(i for i, r in enumerate(runs) if r.arm.name == "s")


def test_in_place_the_baseline_runs_on_the_speculative_processes_and_the_planted_is_crossed():
    plans = [P("b", "baseline"), P("s", "speculative")]
    ep = EpisodeSettings(per_level=8, processes=4, in_place=True)
    arms = design_arms(plans, ep)
    assert arms == ["b", "s", PLANTED]  # within has nothing to add: the baseline is in place
    s = split_schedule(build_schedule(parse_workload(WORKLOAD)), 8)
    d = design_record(s, arms, "b", 4, ep)
    assert d["in_place"] == "s"
    for level in d["levels"]:
        eps = [e for e in d["episodes"].values() if e["level"] == level]
        assert all(e["process"]["b"] == e["process"]["s"] for e in eps)
        # the planted arm meets every process in both roles: its offsets are estimable
        pairs = Counter((e["process"][PLANTED], e["process"]["b"]) for e in eps)
        assert all(p != b for p, b in pairs) and len({p for p, _ in pairs}) == 4
        assert Counter(e["process"]["s"] for e in eps) == Counter({j: 2 for j in range(4)})
    runs = episode_runs(plans, d, "pid")
    # the processes first (the speculative arm's), then what reaches them
    assert [r.arm.name for r in runs] == ["s"] * 4 + ["b"] * 4 + [PLANTED] * 4
    assert runs[4].arm.role == "baseline"


def test_in_place_is_refused_where_it_cannot_hold():
    assert _pilot(episodes={"per_level": 4, "processes": 2, "in_place": True}).episodes.in_place
    extra = {
        "name": "alt",
        "role": "alternative",
        "engine": "builtin",
        "budget": {"matched_against": "s", "derive": "kv_slots"},
    }
    with pytest.raises(PilotConfigError, match=r"arms \['alt'\] have processes of their own"):
        _pilot(
            arms=[*_pilot().model_dump()["arms"], extra],
            episodes={"per_level": 4, "processes": 2, "in_place": True},
        )
    lc = [
        {"name": "b", "role": "baseline", "engine": "llamacpp"},
        {
            "name": "s",
            "role": "speculative",
            "engine": "llamacpp",
            "options": {"spec_type": "ngram-mod", "draft_n_max": 3},
        },
    ]
    with pytest.raises(PilotConfigError, match=r"'s' \(llamacpp\) cannot switch speculation off"):
        _pilot(arms=lc, episodes={"per_level": 4, "processes": 2, "in_place": True})
