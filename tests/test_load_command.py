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
