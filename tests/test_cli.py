"""The command line as a user runs it: user errors vs bugs, and `specpilot generate` (real
subprocess, real default target)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from specpilot.cli import main, user_error_text
from specpilot.errors import ConfigError, EngineStartError, InputFileError, SpecpilotError


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specpilot.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={
            "HF_HUB_OFFLINE": "1",
            "PATH": "/usr/bin:/bin",
            "OMP_NUM_THREADS": "1",
            # a worktree run (PYTHONPATH=src) tests its own sources, not the installed ones
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        },
    )


@pytest.mark.slow
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


@pytest.mark.slow
def test_generate_bad_input_names_the_field() -> None:
    p = run("generate", "--prompt", "hi", "-k", "0")
    assert p.returncode == 2 and "-k must be >= 1" in p.stderr and "--no-spec" in p.stderr
    p = run("generate", "--prompt", "hi", "--no-spec", "--temperature", "-1", "--threads", "1")
    assert p.returncode == 2 and "temperature must be >= 0" in p.stderr
    assert "Traceback" not in p.stderr


# ---------------------------------------------------------------------- user errors vs bugs
def _workload_with_trace(tmp: Path, trace_text: str) -> Path:
    (tmp / "t.csv").write_text(trace_text)
    wl = {
        "groups": {"code": {}},
        "phases": [{"name": "p", "arrival": {"kind": "trace", "path": "t.csv", "window": "all"}}],
    }
    f = tmp / "w.yaml"
    f.write_text(yaml.safe_dump(wl))
    return f


def test_a_user_error_prints_message_and_fix_without_traceback(tmp_path, capsys):
    f = _workload_with_trace(tmp_path, "when,in,out\n1,2,3\n")
    assert main(["schedule", str(f)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("specpilot schedule: error: ") and "no timestamp column" in err[0]
    assert err[1].startswith("  fix: name it one of timestamp, time")
    assert len(err) == 2  # no traceback
    assert main(["schedule", str(tmp_path / "missing.yaml")]) == 2  # a path the user named
    assert "missing.yaml" in capsys.readouterr().err


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    f = _workload_with_trace(tmp_path, "t,input_tokens,output_tokens\n0,1,2\n1,3,4\n")
    assert main(["schedule", str(f)]) == 0

    def broken_find_windows(*a, **kw):  # a library's ValueError deep inside: a bug, not input
        return np.array([1, 2]) + np.array([1, 2, 3])

    monkeypatch.setattr("specpilot.workload.trace.find_windows", broken_find_windows)
    with pytest.raises(ValueError, match="operands could not be broadcast"):
        main(["trace-windows", str(tmp_path / "t.csv")])  # main re-raises: Python prints it


def test_traceback_on_request_for_user_errors(tmp_path, monkeypatch):
    f = _workload_with_trace(tmp_path, "when,in,out\n1,2,3\n")
    monkeypatch.setenv("SPECPILOT_TRACEBACK", "1")
    with pytest.raises(InputFileError):
        main(["schedule", str(f)])


def test_which_exceptions_count_as_user_errors():
    from specpilot.analysis.service.traces import TraceError
    from specpilot.engine.gguf_read import GGUFFormatError
    from specpilot.engine.loader import ModelLoadError, TokenizerMismatchError
    from specpilot.quality.checks import CheckError
    from specpilot.store import PilotFileError

    assert user_error_text(ConfigError("rate must be > 0", fix="set rate")) == (
        "rate must be > 0\n  fix: set rate"
    )
    assert user_error_text(EngineStartError("llama-server exited 1")) == "llama-server exited 1"
    # every user-input error class is in the errors.py tree: no lists of names or modules
    for cls in (TraceError, GGUFFormatError, ModelLoadError, TokenizerMismatchError, CheckError,
                PilotFileError):  # fmt: skip
        assert issubclass(cls, SpecpilotError), cls
        assert user_error_text(cls("bad input")) == "bad input"
    # a plain ValueError is a bug wherever it comes from (the migrated modules raise ConfigError)
    assert user_error_text(ValueError("x")) is None
    assert user_error_text(KeyError("phase")) is None
    from specpilot.engine.sampling import SamplingParams

    with pytest.raises(ConfigError):
        SamplingParams(temperature=-1.0).validate(None, 1)


def test_user_errors_stay_catchable_as_before_and_survive_pickling():
    import pickle

    err = InputFileError("bad.csv:3: not valid JSON", fix="one object per line")
    assert isinstance(err, ValueError) and isinstance(err, SpecpilotError)
    assert isinstance(EngineStartError("x"), RuntimeError)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is InputFileError and back.describe() == err.describe()
