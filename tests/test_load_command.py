"""``specpilot load`` end to end: workload YAML -> schedule -> test server -> DuckDB run file."""

from __future__ import annotations

import pytest

from specpilot.cli import main
from specpilot.loadgen.testserver import TestServer, TestServerConfig

pytestmark = pytest.mark.timeout(60)

WORKLOAD = """\
name: tiny
seed: 3
groups:
  code: {weight: 1}
  structured: {weight: 1}
warmup: {requests: 2, rate: 10.0}
phases:
  - name: peak
    duration_s: 1.5
    arrival: {kind: poisson, rate: 20}
  - name: burst
    duration_s: 0.5
    arrival: {kind: constant, rate: 10}
"""


def test_load_writes_a_one_arm_pilot_file(tmp_path, capsys):
    from specpilot.store import read_pilot
    from specpilot.workload import build_schedule

    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    out = tmp_path / "run.duckdb"
    sched = build_schedule(str(wl))
    expected = sched.select(["peak"])
    with TestServer(TestServerConfig(max_queue=8, itl_s=0.001)) as srv:
        argv = ["load", srv.url, "--workload", str(wl), "--out", str(out), "--phase", "peak"]
        rc = main([*argv, "--quiet", "--run-id", "r1", "--cancel-fraction", "0.1"])
        assert rc == 0
        printed = capsys.readouterr().out
        # a second arm of the same workload joins the same pilot
        rc = main([*argv, "--quiet", "--run-id", "r2", "--arm", "speculative", "--back-to-back"])
        assert rc == 0
    assert "run r1" in printed and "dispatch lag" in printed
    data = read_pilot(out)
    recs = [r for r in data.requests if r.run_id == "r1"]
    assert len(recs) == len(expected) > 20  # every scheduled request, warm-up included
    assert {r.request_id for r in recs} == {f"{r.phase}-{r.index:06d}" for r in expected}
    assert {r.phase for r in recs} == {"warmup", "peak"} and sum(r.warmup for r in recs) == 2
    assert all(r.status in ("ok", "rejected", "cancelled") for r in recs)
    assert any(r.status == "cancelled" for r in recs)
    assert all(r.output_text for r in recs if r.status == "ok")
    # the pilot: this machine, the workload's schedule; two arms, in run order
    assert data.pilot.hardware.cpu_logical_cores >= 1 and data.pilot.schedule is not None
    assert data.pilot.config["workload_config_sha256"] == sched.config_sha256
    assert [(a.run_id, a.arm, a.role, a.run_order) for a in data.arms] == [
        ("r1", "baseline", "baseline", 0),
        ("r2", "speculative", "speculative", 1),
    ]
    arm = data.arms[0]
    # by URL the strategy is the role's declaration, not verified (a pilot file's URL arm)
    assert arm.status == "complete" and arm.strategy.kind == "none"
    assert arm.strategy.params == {"declared_by_role": "baseline", "verified": False}
    assert data.arms[1].strategy.kind == "other" and arm.manifest["load"]["cancel_fraction"] == 0.1
    assert arm.load_summary["scheduled"] == len(expected) and len(arm.manifest_sha256) == 64
    # phases on the schedule's timeline, with the clock anchor; snapshots at each edge
    phases = {p.phase: p for p in data.phases if p.run_id == "r1"}
    starts = {p.name: p.start_s for p in sched.phases}
    assert phases["warmup"].warmup and not phases["peak"].warmup
    assert phases["peak"].planned_start_s == starts["peak"] - starts["warmup"] == 0.2
    for p in phases.values():
        assert p.status == "complete" and p.t_run is not None and p.wall_t_run > 1.7e9
        assert p.actual_end_t > p.actual_start_t >= p.t_run - 1e-3
    by_id = {f"{q.phase}-{q.index:06d}": q for q in expected}
    for r in recs:  # scheduled_t = t_run + phase start + send_t, exactly
        q = by_id[r.request_id]
        want = phases[q.phase].t_run + phases[q.phase].planned_start_s + q.send_t
        assert r.scheduled_t == pytest.approx(want, abs=1e-6)
    snaps = [(s.phase, s.label) for s in data.snapshots if s.run_id == "r1"]
    edges = [x for x in snaps if x[1] != "during"]  # the series inside a phase: its phase
    assert sorted(edges) == sorted((p, lbl) for p in phases for lbl in ("before", "after"))
    assert {p for p, lbl in snaps if lbl == "during"} <= set(phases)
    # the chunks are all there: per ok request, gaps = chunks - 1
    gaps = sum(len(g.gap_s) for g in data.chunk_gaps if g.run_id == "r1")
    assert gaps == sum(r.chunks - 1 for r in recs if r.status == "ok" and not r.warmup)


def test_a_file_of_another_workload_is_refused(tmp_path, capsys):
    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    other = tmp_path / "o.yaml"
    other.write_text(WORKLOAD.replace("seed: 3", "seed: 4"))
    out = tmp_path / "run.duckdb"
    with TestServer() as srv:
        assert main(["load", srv.url, "--workload", str(wl), "--out", str(out), "--quiet",
                     "--phase", "burst", "--no-warmup"]) == 0  # fmt: skip
        rc = main(["load", srv.url, "--workload", str(other), "--out", str(out), "--quiet"])
    assert rc == 2 and "of another workload" in capsys.readouterr().err


def test_load_reports_a_bad_workload(tmp_path, capsys):
    rc = main(
        [
            "load",
            "http://127.0.0.1:9",
            "--workload",
            str(tmp_path / "missing.yaml"),
            "--out",
            str(tmp_path / "x.duckdb"),
        ]
    )
    assert rc == 2 and "error" in capsys.readouterr().err


def test_load_argument_errors(tmp_path, capsys):
    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    base = ["--workload", str(wl), "--out", str(tmp_path / "x.duckdb")]
    for argv, msg in (
        (["load", *base], "either an endpoint URL or --start"),
        (["load", "http://127.0.0.1:9", "--start", *base], "either an endpoint URL or --start"),
        (["load", "http://127.0.0.1:9", "--engine-opt", "a=1", *base], "needs --start"),
        (["load", "--start", *base], "--start needs --engine"),
        (["load", "--start", "--engine", "llamacpp", "--engine-opt", "bogus=1", *base], "bogus"),
        (["load", "--start", "--engine", "builtin", "--engine-opt", "novalue", *base], "KEY=VALUE"),
        (["load", "http://127.0.0.1:9", "--cancel-fraction", "2", *base], "--cancel-fraction:"),
        (["load", "http://127.0.0.1:9", "--arm", "a b", *base], "--arm/--role"),
    ):
        assert main(argv) == 2, argv
        assert msg in capsys.readouterr().err, argv


def test_engine_options_are_the_pilot_files_and_build_the_same_backend():
    """``--engine-opt`` takes a pilot file's ``arms[].options`` (one vocabulary, one check)
    and ``load --start`` builds its backend through the pilot's own constructor."""
    from specpilot.backends.builtin import BuiltinBackend
    from specpilot.backends.llamacpp import LlamaCppBackend
    from specpilot.commands.load import engine_opts
    from specpilot.engine.loader import default_target_path
    from specpilot.errors import ConfigError
    from specpilot.pilot.plan.engines import backend_for, engine_options

    raw = engine_opts(["threads=1", "k=3", "extra-args=[--foo, 1]", "draft=truncate:0,1"])
    assert raw == {"threads": 1, "k": 3, "extra_args": ["--foo", 1], "draft": "truncate:0,1"}
    be = backend_for("builtin", engine_options("builtin", {"threads": 1}))
    cmd = be.command()
    assert isinstance(be, BuiltinBackend) and "--no-draft" in cmd and "--draft" not in cmd
    assert cmd[cmd.index("--threads") + 1] == "1"
    spec = backend_for("builtin", engine_options("builtin", {"draft": "truncate:0,1", "k": 3}))
    assert spec.command()[spec.command().index("-k") + 1] == "3"
    ll = backend_for(
        "llamacpp", engine_options("llamacpp", {"spec_type": "ngram-mod", "threads": 2})
    )
    assert isinstance(ll, LlamaCppBackend) and ll.mode == "subprocess"
    assert str(ll.cfg.model) == str(default_target_path()) and "ngram-mod" in ll.cfg.flags()
    with pytest.raises(ConfigError, match=r"thread: .*did you mean 'threads'"):
        engine_options("llamacpp", {"thread": 2})
    with pytest.raises(ConfigError, match="k = 3 needs a draft"):  # the pilot file's own rule
        engine_options("builtin", {"k": 3})


def test_the_started_arm_is_resolved_as_a_pilot_files_arm(tmp_path, capsys):
    """``load --start`` names and checks its arm by the pilot's rules (``pilot.plan.arms.plan_arm``):
    a speculative option makes the default arm ``speculative``; a baseline that switches a
    strategy on is refused before any engine starts."""
    from specpilot.pilot.plan.engines import one_arm

    spec = one_arm("llamacpp", None, None, {"spec_type": "ngram-mod"}, resolve_files=False)
    assert (spec.name, spec.role, spec.strategy.kind, spec.strategy.k) == (
        "speculative", "speculative", "ngram", 3,
    )  # fmt: skip
    plain = one_arm("builtin", "b1", None, {"threads": 1}, resolve_files=False)
    assert (plain.name, plain.role, plain.capacity["max_slots"]) == ("b1", "extra", 4)
    # by URL a builtin server's options are unknown: any role, no frozen settings claimed
    remote = one_arm("builtin", "speculative", None, {}, url="http://127.0.0.1:9")
    assert (remote.role, remote.strategy.kind, remote.frozen) == ("speculative", "other", {})
    assert "target" in remote.unknown and remote.spec.options is None
    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    argv = ["load", "--start", "--engine", "builtin", "--engine-opt", "draft=truncate:0,1"]
    argv += ["--engine-opt", "k=2", "--workload", str(wl), "--out", str(tmp_path / "x.duckdb")]
    assert main([*argv, "--role", "baseline"]) == 2
    assert "is the baseline arm but switches on a draft strategy" in capsys.readouterr().err
    assert main([*argv, "--arm", "no spaces"]) == 2
    assert "name" in capsys.readouterr().err
    assert not (tmp_path / "x.duckdb").exists()


def test_model_name_comes_from_the_endpoint():
    from specpilot.loadgen.client import served_model

    with TestServer() as srv:
        assert served_model(srv.url) == "specpilot-testserver"
    assert served_model("http://127.0.0.1:9") == "default"


def test_a_killed_load_is_reported_as_cut_never_as_complete(tmp_path):
    """SIGKILL a real ``specpilot load`` about halfway: the report names the cut phase with how many
    of its scheduled requests have a record, and makes no comparison (the arm is not its own
    reference; it was printed as "baseline vs baseline")."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from specpilot.store import read_pilot

    wl = tmp_path / "w.yaml"
    wl.write_text(
        "name: cut\nseed: 3\ngroups: {code: {weight: 1}}\n"
        "phases:\n  - {name: steady, duration_s: 8, arrival: {kind: constant, rate: 5}}\n"
    )
    out = tmp_path / "run.duckdb"
    with TestServer(TestServerConfig(itl_s=0.005, output_tokens=8)) as srv:
        cmd = [sys.executable, "-m", "specpilot.cli", "load", srv.url, "--workload", str(wl)]
        p = subprocess.Popen([*cmd, "--out", str(out), "--no-warmup", "--quiet"])
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.5)  # about half of the 8 s phase (the writer locks the file: no peeking)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    data = read_pilot(out)
    kept = len(data.requests)
    (phase,) = [ph for ph in data.phases if not ph.warmup]
    assert phase.status == "running" and phase.scheduled == 40 and 1 <= kept < 40
    rep = tmp_path / "rep"
    assert main(["report", str(out), "--no-plots", "--out", str(rep)]) == 0
    doc = json.loads((rep / "report.json").read_text())
    assert doc["verdicts"] == [] and doc["comparisons"] == []
    assert any(f"{kept} of its 40 scheduled requests" in n for n in doc["notes"]), doc["notes"]


def test_load_start_refuses_what_only_a_pilot_prepares(tmp_path, capsys):
    """vLLM loads no GGUF (the pilot converts the default target first) and a shipped draft is
    converted for vLLM / llama.cpp by the pilot: a one-arm load says so instead of starting an
    engine on options it cannot honour."""
    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    base = ["--workload", str(wl), "--out", str(tmp_path / "x.duckdb")]
    for argv, msg in (
        (["load", "--start", "--engine", "vllm", *base], "needs --engine-opt model=DIR"),
        (["load", "--start", "--engine", "llamacpp", "--engine-opt",
          "draft=shipped:smollm2-135m-instruct-d4", *base], "converted for llamacpp by the pilot"),
    ):  # fmt: skip
        assert main(argv) == 2, argv
        assert msg in capsys.readouterr().err, argv


def test_a_killed_load_resumes_by_its_run_id_as_a_pilot_does(tmp_path, capsys):
    """``specpilot load`` is a one-arm pilot (``pilot.run.one_arm``): SIGKILL it inside its second
    phase, give the same ``--run-id`` again, and the complete phase is kept as it was (not
    replayed), the cut one replayed from its start (its partial records deleted first), the run
    marked complete; a third call is refused (a complete run is not run again), as is the run id
    under another arm."""
    import signal
    import subprocess
    import sys
    import time

    from specpilot.store import read_pilot

    wl = tmp_path / "w.yaml"
    wl.write_text(
        "name: cut\nseed: 3\ngroups: {code: {weight: 1}}\n"
        "phases:\n  - {name: first, duration_s: 1, arrival: {kind: constant, rate: 5}}\n"
        "  - {name: second, duration_s: 12, arrival: {kind: constant, rate: 5}}\n"
    )
    out = tmp_path / "run.duckdb"
    base = ["load", "--workload", str(wl), "--out", str(out), "--no-warmup", "--quiet"]
    with TestServer(TestServerConfig(itl_s=0.005, output_tokens=8)) as srv:
        cmd = [sys.executable, "-m", "specpilot.cli", *base, srv.url, "--run-id", "r1"]
        p = subprocess.Popen(cmd)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(5.5)  # the first phase (1 s) done, about a third of the second (12 s)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        cut = read_pilot(out)
        first = {r.request_id: r.done_t for r in cut.requests if r.phase == "first"}
        second = [r for r in cut.requests if r.phase == "second"]
        assert len(first) == 5 and 1 <= len(second) < 60
        assert cut.arms[0].status == "running" and cut.arms[0].completed_steps == []
        # the same run under other load settings is refused, and left resumable
        assert main([*base, srv.url, "--run-id", "r1", "--cancel-fraction", "0.2"]) == 2
        assert "other load settings (cancel_fraction" in capsys.readouterr().err
        assert main([*base, srv.url, "--run-id", "r1"]) == 0
        capsys.readouterr()
        assert main([*base, srv.url, "--run-id", "r1"]) == 2
        assert "run 'r1' is complete" in capsys.readouterr().err
        assert main([*base, srv.url, "--run-id", "r1", "--arm", "other"]) == 2
    data = read_pilot(out)
    (arm,) = data.arms
    assert arm.status == "complete" and arm.completed_steps == ["load"]
    # the complete phase untouched, the cut one replayed whole: one record per request
    assert {r.request_id: r.done_t for r in data.requests if r.phase == "first"} == first
    again = [r for r in data.requests if r.phase == "second"]
    assert len(again) == 60 and {r.request_id for r in again} >= {r.request_id for r in second}
    assert min(r.sent_t for r in again) > max(r.done_t for r in second)  # all sent afresh
    assert {p.phase: p.status for p in data.phases} == {"first": "complete", "second": "complete"}


def test_a_resumed_run_must_reach_the_engine_config_it_started_with(tmp_path):
    """The one-arm pilot's manifest check (``OneArm.manifest``): a run resumed on an engine
    whose frozen settings hash differs is refused before anything is written (the same run's
    other load settings: ``test_a_killed_load_resumes_by_its_run_id_as_a_pilot_does``)."""
    from specpilot.backends.openai import OpenAIBackend
    from specpilot.errors import ConfigError
    from specpilot.pilot.config.settings import LoadSettings
    from specpilot.pilot.eta.progress import PilotProgress
    from specpilot.pilot.plan.engines import one_arm
    from specpilot.pilot.run.one_arm import OneArm
    from specpilot.store import Store
    from specpilot.workload import build_schedule

    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    with TestServer() as srv, Store(tmp_path / "x.duckdb") as store:
        plan = one_arm("openai", "baseline", None, {}, url=srv.url)
        backend = OpenAIBackend(srv.url)
        ctx = OneArm(store, build_schedule(str(wl)), LoadSettings(), PilotProgress(quiet=True))
        man = ctx.manifest(backend, plan, {})
        ctx.resumed = man
        assert ctx.manifest(backend, plan, {})["frozen_sha256"] == man["frozen_sha256"]
        ctx.resumed = {**man, "frozen_sha256": "0" * 64}
        with pytest.raises(ConfigError, match="another engine config"):
            ctx.manifest(backend, plan, {})


def test_a_run_of_phases_its_schedule_does_not_hold_is_an_error_not_an_empty_run(tmp_path):
    """A run whose phases are not in the schedule it replays would replay nothing and be
    recorded complete (a slip of this kind once left a pilot's episodes without a request):
    ``armrun.phases_left`` says so instead."""
    from specpilot.pilot.config.settings import LoadSettings
    from specpilot.pilot.eta.progress import PilotProgress
    from specpilot.pilot.plan.engines import one_arm
    from specpilot.pilot.run.armrun import phases_left
    from specpilot.pilot.run.context import RunPlan
    from specpilot.pilot.run.one_arm import OneArm
    from specpilot.store import Store
    from specpilot.workload import build_schedule

    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    sched = build_schedule(str(wl))
    plan = one_arm("openai", "baseline", None, {}, url="http://127.0.0.1:9")
    with Store(tmp_path / "x.duckdb") as store:
        ctx = OneArm(store, sched, LoadSettings(), PilotProgress(quiet=True))
        assert phases_left(ctx, RunPlan(plan, 0, 0, "r", phases=("peak",))) == ["peak"]
        with pytest.raises(RuntimeError, match="phases peak~01 are not in the schedule"):
            phases_left(ctx, RunPlan(plan, 0, 0, "r", phases=("peak", "peak~01")))
