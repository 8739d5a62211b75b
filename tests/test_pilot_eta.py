"""The pilot's ETA (``specpilot.pilot.eta.remaining``) over plans of fixed steps: no engine starts here.

How far off the ETA may be, and why: it is exact for what the plan knows (the schedule's
arrivals, and every step already measured); the error is in the steps not measured yet and
in the few seconds per step the plan leaves out (engine stops, phase-edge scrapes, writes).

- At t = 0 every engine start, drain, quality pass, compatibility suite and the report stand
  at their priors (constants from a quick pilot on the 2-core CPU: the code keeps no cache of
  earlier runs), so the first ETA is off by however far this machine and its load are from
  them. Not planned at all: a first builtin start that calibrates the weight formats (a cold
  cache: ~50 s more). A quick pilot here (``CI=1 specpilot pilot --quick``, 6 m 28 s with
  other work on the 2 cores; its priors, replayed on its measured steps) read 3 m 40 s at
  t = 0 and 3 m 30 s at 1 min: short by the cold calibration (58 s) and by llama.cpp, whose
  off-peak requests ran into the 20 s client timeout (22 s phases planned at 6 s).
- Once an engine's first arm has started and served a phase, its starts and drains are
  measured; after llama.cpp's first phase (2 m 52 s) that run's projected finish stayed
  within 30 s of the real one (5 m 59 s - 6 m 15 s against 6 m 28 s). The interleaved design
  measures quality passes and compat suites only at the end (an engine not yet measured
  takes the other engines' time), so an engine much slower there than the first ones keeps
  the ETA short until it is measured itself. (Measured in the interleaved design, retired
  since for the episode design, which plans and runs the checks the same way.)
- The ETA never counts below the steps left: a step that overruns its estimate holds the
  ETA at the rest of the plan until it ends.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpilot.pilot.eta import remaining as eta
from specpilot.pilot.eta.remaining import (
    PRIOR_DRAIN_S,
    PRIOR_PER_UNIT_S,
    PRIOR_START_S,
    EtaClock,
    RunLeft,
    Step,
    Timetable,
    eta_s,
    plan_steps,
)
from specpilot.pilot.run import eta_plan


def _plan() -> list[Step]:
    """Two builtin arms and a llama.cpp one, two episodes each (the first call warms up)."""
    tt = Timetable({"off": 20.0, "peak": 10.0}, warmup_s=1.0, drill_phase="peak", drill_hold_s=4)
    runs = [
        RunLeft("b", "builtin", ("off", "peak"), None, 6, 3),
        RunLeft("s", "builtin", ("off", "peak"), 0, 6, 3),
        RunLeft("l", "llamacpp", ("off", "peak"), 2, 6, 3),
    ]
    return plan_steps(runs, tt, answers=50, arm_runs=3)


def _by_hand() -> float:
    """The same plan's steps at their priors, summed by hand."""
    starts = 2 * PRIOR_START_S["builtin"] + PRIOR_START_S["llamacpp"]
    loads = 3 * ((1 + 20 + 2 * PRIOR_DRAIN_S) + (10 + PRIOR_DRAIN_S))
    drills = max(10 + PRIOR_DRAIN_S, 4.0) + max(
        10 + PRIOR_DRAIN_S, 4 + 2 * PRIOR_START_S["llamacpp"]
    )
    per_arm = 3 * (6 * PRIOR_PER_UNIT_S["quality"] + 3 * PRIOR_PER_UNIT_S["compat"])
    rest = 50 * PRIOR_PER_UNIT_S["cross_arm"] + 3 * PRIOR_PER_UNIT_S["report"]
    return starts + loads + drills + per_arm + rest


def test_at_the_start_the_eta_is_the_sum_of_the_planned_steps():
    plan = _plan()
    keys = [s.key for s in plan]
    assert len(keys) == len(set(keys)) == 3 * (1 + 2 + 2) + 2 + 2  # 2 drills, cross-arm, report
    assert eta_s(plan, {}) == pytest.approx(_by_hand())
    assert eta_s(plan, {}) == pytest.approx(sum(eta.estimate(s, {}) for s in plan))


def test_a_step_measured_longer_moves_the_finish_by_exactly_the_difference():
    """The projected finish (elapsed + ETA) after a step that took 7 s more than planned is
    7 s later; a step of a kind measured for the first time also sets the estimate of the
    steps of that kind still to come (each by the same difference)."""
    plan = _plan()
    step = next(s for s in plan if s.key == "cross_arm")  # no other step learns from it
    planned = eta.estimate(step, {})
    finish = eta_s(plan, {})  # at t = 0 the projected finish is the ETA
    # run first, on plan: the finish holds; 7 s longer: it moves by 7 s, the ETA left is the same
    assert planned + eta_s(plan, {step.key: planned}) == pytest.approx(finish)
    assert planned + 7.0 + eta_s(plan, {step.key: planned + 7.0}) == pytest.approx(finish + 7.0)

    # the first builtin start 4 s longer: the other builtin start grows by 4 s, nothing else
    first = {"b:start": PRIOR_START_S["builtin"] + 4.0}
    before = eta_s(plan, {})
    assert eta_s(plan, first) == pytest.approx(before - PRIOR_START_S["builtin"] + 4.0)
    # a load's drain: 2 s more than planned over its 2 drains (the warm-up's and its own) ->
    # 1 s more per drain for the builtin loads still to come (b's peak: 1 drain; s's off-peak,
    # warmed up: 2; s's peak: 1) and the builtin drill's replay (1 drain), llama.cpp's unchanged
    load = next(s for s in plan if s.key == "b:load:off")
    measured = {load.key: eta.estimate(load, {}) + 2.0}
    grown = eta_s(plan, measured) - (before - eta.estimate(load, {}))
    assert grown == pytest.approx((1 + 2 + 1) * 1.0 + 1.0)


def test_a_quality_pass_not_yet_measured_on_an_engine_takes_the_other_engines_time():
    """The episode design runs the quality passes and compat suites at the end, builtin
    arms first: llama.cpp's wait at the builtin arms' measured time, not at the prior."""
    plan = _plan()
    by = {s.key: s for s in plan}
    learned = eta.learn(plan, {"b:quality": 12.0, "s:quality": 18.0})  # 2 s, 3 s per round
    assert eta.estimate(by["l:quality"], learned) == pytest.approx(6 * 2.5)
    learned = eta.learn(plan, {"b:quality": 12.0, "l:quality": 60.0})
    assert eta.estimate(by["s:quality"], learned) == pytest.approx(12.0)  # its own engine's
    assert (
        eta.estimate(by["b:start"], eta.learn(plan, {"l:start": 30.0})) == PRIOR_START_S["builtin"]
    )  # engine starts only learn from the same engine


def test_the_eta_counts_down_inside_a_step_and_holds_at_the_rest_when_it_overruns():
    plan = _plan()
    load = next(s for s in plan if s.key == "b:load:off")
    est = eta.estimate(load, {})
    rest = eta_s(plan, {}) - est
    assert eta_s(plan, {}, (load.key, 5.0)) == pytest.approx(rest + est - 5.0)
    assert eta_s(plan, {}, (load.key, est - 0.5)) == pytest.approx(rest + 0.5)
    # past its estimate the step adds its floor (its arrivals not yet sent: none by now)
    assert eta_s(plan, {}, (load.key, est + 30.0)) == pytest.approx(rest)
    # the floor: a load whose drains were measured at 0 s is its arrivals, never less
    zero = Step("z", "load", "x", sched_s=12.0, drains=1)
    assert eta.floor_s(zero, 5.0) == 7.0 and eta.floor_s(zero, 20.0) == 0.0


@given(
    done=st.dictionaries(st.sampled_from([s.key for s in _plan()]), st.floats(0, 1e4)),
    elapsed=st.floats(0, 1e5),
    pick=st.integers(0, 100),
)
def test_the_eta_is_never_negative_and_never_grows_while_a_step_runs(done, elapsed, pick):
    plan = _plan()
    running = plan[pick % len(plan)].key
    left = eta_s(plan, done, (running, elapsed))
    assert left >= 0.0
    assert left <= eta_s(plan, done, (running, 0.0)) + 1e-9
    assert eta_s(plan, {s.key: 1.0 for s in plan}) == 0.0  # all done


def test_the_clock_times_steps_drops_a_failed_run_and_learns_a_restart():
    t = [100.0]
    clock = EtaClock(now=lambda: t[0])
    assert clock.eta_s() is None  # no plan yet: the status line shows "?"
    clock.plan = _plan()
    full = clock.eta_s()
    with clock.timed("b:start"):
        t[0] += 2.0
        assert clock.eta_s() == pytest.approx(full - 2.0)
        clock.sample_as("b:start", PRIOR_START_S["builtin"])  # it calibrated: learn its restart
        t[0] += 40.0
    assert clock.done == {"b:start": PRIOR_START_S["builtin"]}
    assert clock.eta_s() == pytest.approx(full - PRIOR_START_S["builtin"])
    with pytest.raises(RuntimeError), clock.timed("s:start"):
        raise RuntimeError("engine died")
    assert "s:start" not in clock.done and clock.running == {}
    clock.drop_run("s")  # the pilot records the failure: the arm's steps leave the plan
    assert {s.key for s in clock.plan if s.run_id == "s"} == set()
    assert {s.key for s in clock.plan if s.run_id == "b"} >= {"b:start", "b:quality"}
    with clock.timed("not-in-the-plan"):  # a step the plan skipped (done before a resume)
        t[0] += 3.0
    assert clock.eta_s() == pytest.approx(eta_s(clock.plan, {"b:start": PRIOR_START_S["builtin"]}))


def _phase(run_id, name, status="complete"):
    return NS(run_id=run_id, phase=name, status=status, warmup=False)


def test_a_resumed_pilot_counts_only_the_steps_not_yet_done():
    from specpilot.workload import build_schedule, parse_workload

    schedule = build_schedule(
        parse_workload({
            "seed": 1, "groups": {"code": {}}, "warmup": {"requests": 1, "rate": 1.0},
            "phases": [{"name": "off", "duration_s": 8, "arrival": {"kind": "poisson", "rate": 1}},
                       {"name": "peak", "duration_s": 4, "arrival": {"kind": "poisson", "rate": 2}}],
        })
    )  # fmt: skip

    def arm(name, role="baseline", engine="builtin", kind="none"):
        return NS(name=name, role=role, engine=engine, url=None, drill=kind != "none",
                  strategy=NS(kind=kind))  # fmt: skip

    runs = [
        NS(arm=arm("base"), run_id="base", process=0, phases=None, repetition=0),  # complete
        NS(
            arm=arm("spec", "speculative", kind="draft"),
            run_id="spec",
            process=0,
            phases=None,
            repetition=0,
        ),  # phases + drill done
        NS(
            arm=arm("plain", "extra", "llamacpp"),
            run_id="plain",
            process=0,
            phases=None,
            repetition=0,
        ),  # cut in its second phase
        NS(
            arm=arm("ctl", "control"),
            run_id="ctl",
            process=0,
            phases=None,
            repetition=0,
        ),  # not started: phases only
    ]
    records = {
        "base": NS(status="complete", completed_steps=["load", "quality", "compat"]),
        "spec": NS(status="interrupted", completed_steps=["load", "drill"]),
        "plain": NS(status="interrupted", completed_steps=[]),
        "ctl": NS(status="planned", completed_steps=[]),
    }
    phases = [_phase("plain", "off"), _phase("plain", "peak", "cut")]
    ctx = NS(
        cfg=NS(episodes=NS(in_place=False, design="turns"), compat=NS(enabled=True, features=["streaming", "eos"]),
               quality=NS(concurrency=4),
               drill=NS(phase="peak", switch_after_s=1.0, hold_s=2.0, replay_s=None)),
        schedule=schedule,
        level_schedule=schedule,
        gates=NS(plan=lambda: [NS(temperature=0.0)] + [NS(temperature=0.7)] * 5),
        arm_record=lambda run: records[run.run_id],
        store=NS(records=lambda table, run_id: [p for p in phases if p.run_id == run_id]),
        capacity=None,
    )  # fmt: skip
    plan = eta_plan.plan_for(ctx, runs, resumed=ctx)
    assert [s.key for s in plan] == [
        "spec:start", "spec:quality", "spec:compat",
        "plain:start", "plain:load:peak", "plain:quality", "plain:compat",
        "ctl:start", "ctl:load:off", "ctl:load:peak",
        "cross_arm", "report",
    ]  # fmt: skip
    by = {s.key: s for s in plan}
    last_peak = max(r.send_t for r in schedule.requests if r.phase == "peak")
    assert by["plain:load:peak"].sched_s == pytest.approx(last_peak)  # the warm-up at t = 0
    assert by["plain:load:peak"].drains == 2 and by["spec:quality"].units == 1 + 2
    assert by["plain:compat"].units == 2 and by["report"].units == 4
    # a run's first call warms its process up, the later ones do not
    assert by["ctl:load:off"].drains == 2 and by["ctl:load:peak"].drains == 1
    assert all(s.drain_s is None for s in plan)  # no probe: the learned drains
    # with the capacity probe's figures the loads are planned at their simulated drains
    ctx.capacity = {"step_s": [0.05, 0.08], "slots": 4, "prefill_s": 0.1}
    sim = {s.key: s for s in eta_plan.plan_for(ctx, runs, resumed=ctx)}
    assert sim["ctl:load:off"].drain_s is not None and sim["ctl:load:off"].drain_s > 0


def test_a_failed_arm_takes_its_steps_out_of_the_eta():
    """``PilotSession.record_failure`` (the episode design calls it) drops the run's steps still to come."""
    from specpilot.pilot.eta.progress import PilotProgress
    from specpilot.pilot.run.session import PilotSession
    from specpilot.records import ArmRecord

    progress = PilotProgress(quiet=True)
    progress.clock.plan = _plan()
    progress.clock.done["s:start"] = 5.0
    stored = []
    holder = NS(
        progress=progress,
        arm_record=lambda run: ArmRecord("p", run.run_id, "s", "speculative", "builtin"),
        store=NS(add_arm=stored.append),
    )
    PilotSession.record_failure(
        holder, NS(run_id="s", arm=NS(name="s")), RuntimeError("engine died")
    )
    assert stored[0].status == "failed"
    keys = {s.key for s in progress.clock.plan}
    assert "s:start" in keys and not any(k.startswith("s:") and k != "s:start" for k in keys)


def test_the_status_line_reads_the_eta_at_each_redraw(capsys):
    from specpilot.pilot.eta.progress import PilotProgress

    t = [0.0]
    progress = PilotProgress(quiet=True, clock=EtaClock(now=lambda: t[0]))
    progress.step("all arms", "planning")
    progress.clock.plan = [Step("a", "start", "builtin"), Step("r", "report", units=1)]
    with progress.clock.timed("a"):
        progress.step("a", "starting")
        t[0] += 2.0
        progress.step("a", "still starting")
    lines = capsys.readouterr().err.splitlines()
    start, report = PRIOR_START_S["builtin"], PRIOR_PER_UNIT_S["report"]
    assert [ln.rsplit("ETA ", 1)[1] for ln in lines] == [
        "?",
        f"{int(start + report)}s",
        f"{int(start + report - 2)}s",
    ]


def test_an_arm_that_fails_to_start_leaves_the_rotation_and_the_eta():
    from specpilot.pilot.run.episode_run import EpisodeRun

    clock = EtaClock(plan=_plan())

    def boom(*a):
        raise RuntimeError("engine died")

    def arm(name, start):
        return NS(run=NS(run_id=name, arm=NS(name=name)), start=start,
                  load=lambda phases: None, finish=lambda: None, stop=lambda: None)  # fmt: skip

    good, bad = arm("b", lambda: None), arm("s", boom)
    failures = []

    def record_failure(run, exc):  # as PilotSession.record_failure does
        failures.append(run.run_id)
        clock.drop_run(run.run_id)

    it = EpisodeRun(
        NS(record_failure=record_failure, arm_record=lambda run: NS(status="running")), [], {}
    )
    it.steps = {("b", 0): good, ("s", 0): bad}
    for key in list(it.steps):
        it._call(key, lambda s: s.start())
    assert it.failed == ["s"] and list(it.steps.values()) == [good] and failures == ["s"]
    assert not any(s.run_id == "s" for s in clock.plan)


def test_simulated_drains_plan_the_loads_and_the_measured_ones_rescale_the_rest():
    """With the capacity probe's figures each load is planned at its simulated drain; once a
    load is measured, the others are scaled by how far its simulation was off."""
    tt = Timetable(
        arrivals={"off~01": 3.0, "off~02": 2.0},
        warmup_s=0.0,
        drain_s={"off~01": 1.5, "off~02": 4.0, "warmup": 0.5},
        warmup_name="warmup",
    )
    run = RunLeft("r", "builtin", ("off~01", "off~02"), None, 0, 0)
    loads = [s for s in eta.run_steps(run, tt) if s.kind == "load"]
    assert [s.drain_s for s in loads] == [2.0, 4.0]  # the first call warms up: its drain too
    assert eta.eta_s(loads, {}) == pytest.approx(3.0 + 2.0 + 2.0 + 4.0)
    measured = {loads[0].key: 3.0 + 4.0}  # took twice its simulated drain
    assert eta.eta_s(loads, measured) == pytest.approx(2.0 + 2 * 4.0)
    without = Timetable(arrivals={"off~01": 3.0, "off~02": 2.0}, warmup_s=0.0)
    assert all(s.drain_s is None for s in eta.run_steps(run, without))


def test_a_phase_drain_is_simulated_from_the_probe_figures():
    from specpilot.simulate.sustain import phase_drains

    f = {"step_s": [0.02, 0.06], "slots": 4, "prefill_s": 0.05}
    alone = phase_drains({"p": [(0.0, 10, 21)]}, f)["p"]
    assert alone == pytest.approx(0.05 + 20 * 0.02)
    crowd = phase_drains({"p": [(0.0, 10, 21)] * 4}, f)["p"]
    assert crowd > 2 * alone  # four at once: every step costs the batch's
    assert phase_drains({"p": [(0.0, 10, 21)]}, {"sustainable_rps": 1.0}) == {}  # given only


def test_simulated_loads_also_teach_the_drill_its_drain():
    """A drill is planned from the seconds per drain the loads measured, simulated or not."""
    load = Step("a:load:off~01", "load", "builtin", "a", sched_s=3.0, drains=1, drain_s=1.0)
    drill = Step("a:drill", "drill", "builtin", "a", sched_s=10.0, drains=1, hold_s=0.0)
    before = eta.eta_s([load, drill], {})
    assert before == pytest.approx(1.0 * 0 + 3.0 + 1.0 + 10.0 + PRIOR_DRAIN_S)
    after = eta.eta_s([load, drill], {load.key: 3.0 + 8.0})  # 8 s after its last arrival
    assert after == pytest.approx(10.0 + 8.0)
