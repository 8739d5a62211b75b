"""``specpilot load`` end to end: workload YAML -> schedule -> test server -> DuckDB run file."""

from __future__ import annotations

import pytest

from specpilot.cli import main
from specpilot.loadgen.testserver import ServerConfig, TestServer

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


def test_load_writes_every_request_to_the_store(tmp_path, capsys):
    from specpilot.store import Store
    from specpilot.workload import build_schedule

    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    out = tmp_path / "run.duckdb"
    sched = build_schedule(str(wl))
    expected = sched.select(["peak"])
    with TestServer(ServerConfig(max_queue=8, itl_s=0.001)) as srv:
        rc = main(
            [
                "load",
                srv.url,
                "--workload",
                str(wl),
                "--out",
                str(out),
                "--phase",
                "peak",
                "--quiet",
                "--run-id",
                "r1",
                "--cancel-fraction",
                "0.1",
            ]
        )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "run r1" in printed and "dispatch lag" in printed
    with Store(out, read_only=True) as st:
        recs = st.requests("r1")
        chunks = st.chunks("r1")
        runs = st.runs()
        snaps = st.snapshots("r1")
    assert len(recs) == len(expected) > 20  # every scheduled request, warm-up included
    assert {r.request_id for r in recs} == {f"{r.phase}-{r.index:06d}" for r in expected}
    assert {r.phase for r in recs} == {"warmup", "peak"} and sum(r.warmup for r in recs) == 2
    assert all(r.status in ("ok", "rejected", "cancelled") for r in recs)
    assert any(r.status == "cancelled" for r in recs)
    assert sum(r.chunks for r in recs) == len(chunks)
    # phases on the schedule's timeline: peak starts when warm-up's 0.2 s are over, not drained
    by_id = {f"{q.phase}-{q.index:06d}": q for q in expected}
    starts = {p.name: p.start_s for p in sched.phases}
    base = min(r.scheduled_t - starts[r.phase] - by_id[r.request_id].send_t for r in recs)
    for r in recs:
        q = by_id[r.request_id]
        assert r.scheduled_t - base == pytest.approx(starts[q.phase] + q.send_t, abs=1e-6)
    run = next(r for r in runs if r["run_id"] == "r1")
    assert run["status"] == "complete"
    assert [s.label for s in snaps] == ["before", "after"]  # openai engine: empty metrics, recorded


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
    ):
        assert main(argv) == 2, argv
        assert msg in capsys.readouterr().err, argv


def test_engine_options_and_make_backend():
    from specpilot.backends import make_backend
    from specpilot.backends.llamacpp import LlamaCppBackend
    from specpilot.commands.load import engine_options
    from specpilot.engine.loader import default_target_path

    opts = engine_options(
        ["no_draft=true", "k=3", "extra-args=[--threads, 1]", "draft=truncate:0,1"]
    )
    assert opts == {
        "no_draft": True,
        "k": 3,
        "extra_args": ["--threads", 1],
        "draft": "truncate:0,1",
    }
    be = make_backend("builtin", {"no_draft": True, "extra_args": ["--threads", 1]})
    cmd = be.command()
    assert "--no-draft" in cmd and cmd[-2:] == ["--threads", "1"] and "--draft" not in cmd
    ll = make_backend("llamacpp", {"spec_type": "ngram-mod", "threads": 2})
    assert isinstance(ll, LlamaCppBackend) and ll.mode == "subprocess"
    assert str(ll.cfg.model) == str(default_target_path()) and "ngram-mod" in ll.cfg.flags()
    with pytest.raises(ValueError, match=r"known: .*threads"):
        make_backend("llamacpp", {"thread": 2})
    with pytest.raises(ValueError, match="cannot be started"):
        make_backend("openai", {})


def test_model_name_comes_from_the_endpoint():
    from specpilot.commands.load import served_model

    with TestServer() as srv:
        assert served_model(srv.url) == "specpilot-testserver"
    assert served_model("http://127.0.0.1:9") == "default"
