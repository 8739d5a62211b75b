"""The in-place runs' switch (``pilot.run.planted``): speculation is on again after every switched
episode whatever happened in it, a table never read is never "restored", and a run that fails
on a process takes that process's other runs with it (its strategy is unknown after a failed
switch). The switch against a real builtin server is in tests/test_pilot_looks.py's pilot."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specpilot.pilot.run.drill import RuntimeSwitch
from specpilot.pilot.run.episode_run import EpisodeRun, reopen_split
from specpilot.pilot.run.planted import switched_off


class _Recording:
    """Records the calls ``switched_off`` makes (the protocol is RuntimeSwitch's off / on)."""

    def __init__(self, fail_off: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_off = fail_off

    def off(self) -> None:
        self.calls.append("off")
        if self.fail_off:
            raise RuntimeError("PUT /admin/strategy: 500")

    def on(self) -> None:
        self.calls.append("on")


def test_speculation_is_on_again_after_an_episode_that_failed():
    sw = _Recording()

    def episode() -> None:
        sw.calls.append("episode")
        raise RuntimeError("the load generator failed")

    with pytest.raises(RuntimeError, match="load generator"):
        switched_off(sw, episode)
    assert sw.calls == ["off", "episode", "on"]


def test_a_switch_that_fails_runs_nothing_and_still_restores():
    sw = _Recording(fail_off=True)
    with pytest.raises(RuntimeError, match="500"):
        switched_off(sw, lambda: sw.calls.append("episode"))
    assert sw.calls == ["off", "on"]


def test_a_table_never_read_is_never_restored():
    # port 9 (discard) refuses: any request would raise; on() before a successful off() sends
    # nothing (it used to PUT k = 0, switching a process it had never switched off)
    sw = RuntimeSwitch("http://127.0.0.1:9", "token")
    t0, t1 = sw.on()
    assert t0 == t1


def test_a_switch_that_failed_takes_its_process_with_it_a_runs_own_error_does_not():
    from specpilot.pilot.run.context import RunPlan
    from specpilot.pilot.run.planted import InPlaceSteps, PlantedSteps, SwitchFailed
    from specpilot.pilot.run.steps import ArmSteps

    def run(arm: str, j: int) -> RunPlan:
        return RunPlan(SimpleNamespace(name=arm), 0, 0, f"pid.{arm}.p{j}", process=j)  # type: ignore[arg-type]

    steps = {}
    for j in range(2):  # in place: the baseline on speculative process j, the planted on it
        spec = ArmSteps.__new__(ArmSteps)
        spec.run = run("s", j)
        base = InPlaceSteps.__new__(InPlaceSteps)
        base.run, base.of = run("b", j), {j: spec}
        planted = PlantedSteps.__new__(PlantedSteps)
        planted.run, planted.bases = run("planted", j), {j: base}
        steps |= {("s", j): spec, ("b", j): base, ("planted", j): planted}
    er = EpisodeRun(SimpleNamespace(), [], {"in_place": "s"})  # type: ignore[arg-type]
    er.steps = steps  # type: ignore[assignment]
    process_1 = [("b", 1), ("planted", 1), ("s", 1)]
    assert sorted(er._sharing(("b", 1), SwitchFailed("PUT: 500"))) == process_1
    assert sorted(er._sharing(("s", 1), RuntimeError("the engine died"))) == process_1
    assert er._sharing(("planted", 1), RuntimeError("the proxy failed")) == [("planted", 1)]
    assert er._sharing(("b", 0), RuntimeError("a load error")) == [("b", 0)]


@pytest.mark.parametrize(
    ("design", "spec_process", "again"),
    [
        ({"in_place": "s"}, 0, True),  # one process: its offset would not cancel
        ({"in_place": "s"}, 1, False),  # two processes: the halves never shared one
        ({"design": "mirrored"}, 1, True),  # at once: a half alone pairs another time
        ({"design": "turns"}, 0, False),
    ],
)
def test_a_resumed_pilot_runs_an_episode_split_by_the_stop_again_on_every_arm(
    tmp_path, design, spec_process, again
):
    """The speculative arm completed ``peak~02``, the baseline had not when the pilot stopped:
    resumed in place on one process, or mirrored, both run it again (the process is a new one;
    the mirrored halves ran at once), while ``peak~01``, complete on both, is neither run nor
    rewritten. Turn-taking, or in place on two processes, the baseline alone runs it."""
    from specpilot.pilot.run.armrun import LOAD_STEP, phases_left
    from specpilot.pilot.run.context import RunPlan
    from specpilot.pilot.run.steps import ArmSteps
    from specpilot.records import ArmRecord, PhaseRecord, RequestRecord
    from specpilot.store import Store

    names = ["peak~01", "peak~02"]
    schedule = SimpleNamespace(phases=[SimpleNamespace(name=n, warmup=False) for n in names])
    with Store(tmp_path / "p.duckdb") as store:
        notes: list[str] = []
        p = SimpleNamespace(
            store=store, schedule=schedule, progress=SimpleNamespace(note=notes.append)
        )
        steps = {}
        for arm, done in (("s", names), ("b", names[:1])):
            j = spec_process if arm == "s" else 0
            run = RunPlan(
                SimpleNamespace(name=arm), 0, 0, f"pid.{arm}.p{j}", process=j, phases=tuple(names)
            )
            rec = ArmRecord(
                "pid",
                run.run_id,
                arm,
                "baseline" if arm == "b" else "speculative",
                "builtin",
                completed_steps=[LOAD_STEP] if done == names else [],
                status="complete" if done == names else "interrupted",
            )
            store.add_arm(rec)
            for n in done:
                store.add_phases(
                    [PhaseRecord(run.run_id, arm, n, 0.0, 1.0, 1.0, 1, status="complete")]
                )
                store.add_requests(
                    [RequestRecord(run.run_id, arm, n, "code", f"{n}-000001", 0.0, "ok")]
                )
            steps[arm] = ArmSteps(p, run, rec)  # type: ignore[arg-type]
        store.flush()
        p.arm_record = lambda r: store.records("arms", run_id=r.run_id)[0]
        reopen_split(p, [x.run for x in steps.values()], design)  # type: ignore[arg-type]
        assert phases_left(p, steps["s"].run) == (["peak~02"] if again else [])  # type: ignore[arg-type]
        assert phases_left(p, steps["b"].run) == ["peak~02"]  # type: ignore[arg-type]
        s_id = f"pid.s.p{spec_process}"
        (rec,) = store.records("arms", run_id=s_id)
        assert (LOAD_STEP not in rec.completed_steps and rec.status == "running") is again
        kept = {(r.run_id, r.phase) for r in store.records("requests")}
        base = {(s_id, "peak~01"), ("pid.b.p0", "peak~01")}
        assert kept == (base if again else base | {(s_id, "peak~02")})
        assert notes == (["s: peak~02 again (split by the stop)"] if again else [])
