"""Levels fitted to the budget (``pilot.plan.fit``, ``episodes.fit_budget``) and deadlines from the
baseline's unloaded task time (``slo.unloaded_x``): the bisection, the runner's real plan, a
resumed pilot's lengths, and what is refused."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import yaml

from pilot_cases import BUILTIN_DEADLINES
from specpilot.cli import main
from specpilot.pilot.config.file import parse_pilot
from specpilot.pilot.plan.fit import MARGIN, fit, least_s
from specpilot.pilot.run.runner import Pilot, Prepared
from specpilot.report.sections_capacity import probe_text
from specpilot.workload import parse_workload

DEFAULT = Path(__file__).resolve().parent.parent / "src" / "specpilot" / "data" / "pilots"


def _cost(silence_after: float):  # type: ignore[no-untyped-def]
    """3 arms replay every second of both levels, 100 s of the rest; past ``silence_after``
    seconds the off-peak level holds a trace's silent stretch that costs 200 s at once."""

    def planned(s: dict[str, float]) -> float:
        return 100.0 + 3 * (s["off"] + s["peak"]) + (200.0 if s["off"] > silence_after else 0.0)

    return planned


def test_the_fit_takes_the_longest_levels_whose_plan_holds_the_budget() -> None:
    planned = _cost(silence_after=70.0)
    got = fit({"off": (30.0, 600.0), "peak": (10.0, 300.0)}, planned, budget_s=600.0)
    assert planned(got) <= 600.0 * (1 - MARGIN)
    assert got["off"] - 30.0 == pytest.approx(got["peak"] - 10.0, abs=0.11)  # equal seconds
    more = {n: v + 1.0 for n, v in got.items()}
    assert planned(more) > 600.0 * (1 - MARGIN)  # a second more on each would not fit
    assert got["off"] == pytest.approx(70.0, abs=0.6)  # stopped before the jump, not at a rate


def test_the_fit_stays_between_the_least_and_the_most() -> None:
    levels = {"off": (30.0, 200.0), "peak": (10.0, 60.0)}
    assert fit(levels, _cost(1e9), budget_s=1e6) == {"off": 200.0, "peak": 60.0}
    assert fit(levels, _cost(1e9), budget_s=10.0) == {"off": 30.0, "peak": 10.0}
    # a level already at its most stays there while the other grows
    got = fit({"off": (30.0, 30.0), "peak": (10.0, 300.0)}, _cost(1e9), budget_s=600.0)
    assert got["off"] == 30.0 and got["peak"] > 10.0


def test_a_length_is_never_rounded_below_an_arrival_it_holds() -> None:
    """A 14th arrival at 77.3025 s: the least is 77.4 (77.35 rounded to a tenth would have
    been 77.3, cutting it), and the fit at its least keeps it."""
    least = least_s([77.3025] + [float(i) for i in range(13)], 14, 600.0)
    assert least > 77.3025
    got = fit({"off": (least, 600.0)}, lambda s: 1e9, budget_s=1.0)  # nothing more fits
    assert got["off"] >= least


def test_the_least_length_holds_the_first_arrivals_each_episode_needs() -> None:
    assert least_s([5.0, 1.0, 9.0, 2.0], 3, 600.0) == 5.1  # past the 3rd, rounded up
    assert least_s([1.0, 2.0, 3.0], 3, 600.0) == 3.1  # exactly enough arrivals: shortened
    assert least_s([1.0, 2.0], 3, 600.0) == 600.0  # fewer arrivals than episodes: the most
    assert least_s([1.0, 2.0, 3.0, 900.0], 3, 2.5) == 2.5


@pytest.mark.parametrize(
    "slo",
    [{"ttft_s": 1.0}, {"ttft_s": 1.0, "deadline_s": 5.0, "unloaded_x": 2.0}],
)
def test_a_group_gives_one_deadline(slo) -> None:
    with pytest.raises(ValueError, match=r"give one deadline: deadline_s .* or unloaded_x"):
        parse_workload(
            {
                "groups": {"code": {"slo": slo}},
                "phases": [
                    {"name": "p", "duration_s": 5, "arrival": {"kind": "poisson", "rate": 1}}
                ],
            }
        )


def _default(**episodes: object) -> dict:
    data = yaml.safe_load((DEFAULT / "default.yaml").read_text())
    data["episodes"] = {**data["episodes"], **episodes}
    for name, g in data["workload"]["groups"].items():  # seconds: --capacity has no unloaded
        g["slo"] = {"ttft_s": g["slo"]["ttft_s"], "deadline_s": BUILTIN_DEADLINES[name]}
    for p in data["workload"]["phases"]:
        p["arrival"]["path"] = str((DEFAULT / p["arrival"]["path"]).resolve())
    return data


def _prepared(tmp_path: Path, rps: float, **episodes: object) -> tuple[Pilot, Prepared]:
    pilot = Pilot(parse_pilot(_default(**episodes)), tmp_path / "out", capacity_rps=rps)
    return pilot, pilot.prepare()


@pytest.mark.parametrize("rps", [0.5, 2.0])
def test_the_runner_fits_the_default_to_its_budget_with_its_own_plan(tmp_path, capsys, rps) -> None:
    """The embedded default at a given capacity (no engine starts): each level between the
    length that holds one request an episode and the file's most, the whole plan inside the
    budget less the margin; a faster machine plays more requests in the same budget."""
    from specpilot.pilot.eta.remaining import eta_s
    from specpilot.pilot.run.episode_run import episode_runs
    from specpilot.pilot.run.eta_plan import Planning, plan_for

    pilot, prep = _prepared(tmp_path, rps)
    most = {p.name: p.duration_s for p in prep.level_schedule.phases if not p.warmup}
    t0 = time.perf_counter()
    out = pilot._fitted(prep, t0)
    sched, fitted = out.level_schedule, out.capacity["fitted_s"]
    assert set(fitted) == {"off_peak", "peak"}
    for p in sched.phases:
        if not p.warmup:
            assert p.requests >= 14 and p.duration_s <= most[p.name]
    schedule, design = pilot._design(prep.plans, sched, quiet=True)
    ahead = Planning(pilot.cfg, pilot.gates, schedule, sched, out.capacity)
    plan = plan_for(ahead, episode_runs(prep.plans, design, "t"))
    budget_s = pilot.cfg.episodes.budget_min * 60.0
    assert time.perf_counter() - t0 + eta_s(plan, {}) <= budget_s * (1 - MARGIN) + 1.0
    assert "levels fitted to the budget of 8.8 min" in capsys.readouterr().err


def test_more_capacity_plays_more_requests_in_the_same_budget(tmp_path) -> None:
    counts = {}
    for rps in (0.5, 2.0):
        pilot, prep = _prepared(tmp_path / str(rps), rps)
        sched = pilot._fitted(prep, time.perf_counter()).level_schedule
        counts[rps] = sum(1 for r in sched.requests if not r.warmup)
    assert counts[2.0] > counts[0.5]


def test_a_resumed_pilot_keeps_the_lengths_it_was_fitted_to(tmp_path) -> None:
    pilot, prep = _prepared(tmp_path, 0.5)
    assert prep.capacity is not None
    kept = {**prep.capacity, "fitted_s": {"off_peak": 150.0, "peak": 40.0}}
    sched = pilot._fitted(dataclasses.replace(prep, capacity=kept), time.perf_counter())
    sched = sched.level_schedule
    got = {p.name: p.duration_s for p in sched.phases if not p.warmup}
    assert got == {"off_peak": 150.0, "peak": 40.0}


def test_deadlines_from_the_probe_are_refused_with_a_given_capacity(tmp_path, capsys) -> None:
    """The embedded default's deadlines are multiples of the unloaded task time: a run given
    --capacity measures none, and is refused before any engine starts; --dry-run plans it,
    saying so."""
    rc = main(["pilot", "--capacity", "0.5", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    assert "slo.unloaded_x" in err and "no capacity probe measured it" in err
    assert "leave --capacity out" in err
    assert not (tmp_path / "o" / "pilot.duckdb").exists()
    assert main(["pilot", "--dry-run", "--capacity", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "off_peak: planned here at its least" in out and "(episodes.fit_budget)" in out
    assert "slo.unloaded_x" in out


def test_a_fit_needs_a_budget() -> None:
    with pytest.raises(ValueError, match=r"add episodes\.budget_min"):
        parse_pilot(_default(budget_min=None))


def test_the_report_says_what_the_probe_set() -> None:
    probe = {
        "method": "m",
        "sustainable_rps": 0.55,
        "sync_rps": 0.77,
        "max_rps": 1.3,
        "unloaded_s": {"code": 1.2},
        "probe_s": 30.0,
        "deadlines_s": {"code": 2.4},
        "fitted_s": {"off_peak": 166.0, "peak": 96.0},
    }
    text = probe_text({"capacity": {"probe": probe}})
    assert "Deadlines set from it (slo.unloaded_x): code 2.40 s." in text
    assert (
        "Levels fitted to the budget at this capacity (episodes.fit_budget): off_peak 166 s" in text
    )
