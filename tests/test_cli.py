"""The `specpilot generate` command as a user runs it (real subprocess, real default target)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specpilot.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )


def test_generate_json_prints_round_records_and_a_summary() -> None:
    p = run(
        "generate", "--prompt", "Count from one to ten.", "-k", "3", "--max-tokens", "12",
        "--dtype", "float32", "--threads", "1", "--json", "--draft", "truncate:0,1,28,29",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert "prefill" in lines[0]
    rounds = [x for x in lines if "round_index" in x]
    final = lines[-1]
    assert rounds and all(r["proposed"] == 3 for r in rounds if r["truncated"] is None)
    s = final["summary"]
    assert s["output_tokens"] == 1 + sum(r["committed"] for r in rounds) <= 12
    assert s["rounds"] == len(rounds) and final["text"]
    assert s["cost_per_token_ms"] > 0 and 0 <= s["acceptance_rate"] <= 1


def test_generate_bad_input_names_the_field() -> None:
    p = run("generate", "--prompt", "hi", "-k", "0")
    assert p.returncode == 2 and "-k must be >= 1" in p.stderr and "--no-spec" in p.stderr
    p = run("generate", "--prompt", "hi", "--no-spec", "--temperature", "-1", "--threads", "1")
    assert p.returncode == 2 and "temperature must be >= 0" in p.stderr
    assert "Traceback" not in p.stderr
