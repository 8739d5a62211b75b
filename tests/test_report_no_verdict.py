"""``specpilot report`` on a file without a verdict says why and how to get one: a one-arm
``specpilot load`` run (test server on loopback, ~3 s) and the reason's cases as data."""

from __future__ import annotations

import pytest

from specpilot.cli import main
from specpilot.loadgen.testserver import TestServer, TestServerConfig

pytestmark = pytest.mark.timeout(120)

WORKLOAD = """\
name: tiny
seed: 3
groups:
  code: {weight: 1}
warmup: {requests: 1, rate: 10.0}
phases:
  - name: peak
    duration_s: 1.0
    arrival: {kind: poisson, rate: 10}
"""


def test_report_on_a_one_arm_load_run_says_why_there_is_no_verdict(tmp_path, capsys):
    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    out = tmp_path / "run.duckdb"
    with TestServer(TestServerConfig(max_queue=8, itl_s=0.001)) as srv:
        assert main(["load", srv.url, "--workload", str(wl), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["report", str(out), "--no-plots", "--out", str(tmp_path / "rep")]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("no verdict"))
    reason = line.removeprefix("no verdict: ")
    assert reason.startswith("one arm (baseline): nothing to compare it with"), line
    assert "--arm speculative" in reason and "specpilot pilot" in reason, line


@pytest.mark.parametrize(
    ("arms", "notes", "says"),
    [
        (["baseline"], [], "one arm (baseline): nothing to compare"),
        ([], [], "holds no arm"),
        (["a", "b"], [], "no arm of a, b runs a speculative strategy"),
        (["a", "b"], ["candidate b has no plain arm to compare with"], "candidate b has no plain"),
    ],
)
def test_the_reason_is_never_empty(arms, notes, says):
    from specpilot.commands.report import no_verdict_reason

    doc = {"arms": [{"arm": a, "strategy": {"kind": "none"}} for a in arms], "notes": notes}
    reason = no_verdict_reason(doc)
    assert says in reason and reason.strip()
