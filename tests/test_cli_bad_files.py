"""Broken input files of every kind a user hands specpilot (pilot, workload, trace, GGUF,
DuckDB): each is one error line naming the file (and the line where it has one) with the fix,
exit status 2, and no traceback. ``main`` re-raises a bug, so a case that hits one fails here
with its traceback.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.cli import main

BASE: dict[str, Any] = {
    "name": "probe",
    "workload": {
        "groups": {"code": {"weight": 1, "output": {"mean": 16}}},
        "phases": [{"name": "p1", "duration_s": 20, "arrival": {"kind": "poisson", "rate": 1.0}}],
    },
    "arms": [
        {"name": "baseline", "role": "baseline", "engine": "builtin",
         "options": {"draft": None, "threads": 1}},
        {"name": "speculative", "role": "speculative", "engine": "builtin",
         "options": {"draft": "shipped:smollm2-135m-instruct-d4", "k": 3, "threads": 1}},
    ],
    "drill": {"phase": "p1"},
}  # fmt: skip


def _variant(change) -> str:
    d = copy.deepcopy(BASE)
    change(d)
    return yaml.safe_dump(d, sort_keys=False)


def _arm0(d):
    return d["arms"][0]


# (case, file text, what the one line must say)
PILOTS = [
    ("yaml", "name: x\narms: [\n", "not valid YAML"),
    ("list", "- a\n- b\n", "expected a mapping at the top level"),
    ("typo", _variant(lambda d: _arm0(d)["options"].update(thread=1)), "did you mean 'threads'"),
    ("misplaced", _variant(lambda d: d.update(target="/m.gguf")), "belongs under arms[].options"),
    ("engine", _variant(lambda d: _arm0(d).update(engine="foo")), "set engine to one of"),
    ("inline-workload", _variant(lambda d: d["workload"]["groups"]["code"].update(weight=-1)),
     ":5: workload.groups.code.weight"),
    ("analysis", _variant(lambda d: d.update(analysis={"verdict": {"min_pairs": "many"}})),
     "analysis.verdict.min_pairs"),
    ("quality", _variant(lambda d: d.update(quality={"greedy_prompts": -1})),
     "quality.greedy_prompts"),
    ("quick", _variant(lambda d: d.update(quick={"workload": {"phases": "bad"}})),
     "(with its quick: overrides)"),
    ("drill", _variant(lambda d: d.update(drill={"phase": "nope"})),
     ":29: drill.phase: 'nope' is not a phase of the workload (p1)"),
    ("two-switches", _variant(lambda d: d["arms"][1]["options"].update(threads=2)),
     "differ in threads (2 vs 1)"),
    ("trace", _variant(lambda d: d["workload"]["phases"][0].update(
        arrival={"kind": "trace", "path": "nope.csv", "window": "all"})), "trace not found"),
    ("workload-file", _variant(lambda d: d.update(workload="missing.yaml")),
     "workload file not found"),
]  # fmt: skip


def _run(capsys, argv: list[str]) -> list[str]:
    rc = main(argv)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2, err
    assert not any("Traceback" in ln for ln in err), err
    return err


@pytest.mark.parametrize(("case", "text", "says"), PILOTS, ids=[c[0] for c in PILOTS])
def test_a_broken_pilot_file_is_one_error_naming_file_and_fix(tmp_path, capsys, case, text, says):
    f = tmp_path / f"{case}.yaml"
    f.write_text(text)
    err = _run(capsys, ["pilot", str(f), "--dry-run"])
    assert err[0].startswith("specpilot pilot: error: ") and str(f) in err[0], err
    whole = "\n".join(err)
    assert says in whole, whole
    # every problem line carries its fix ("-> ...") or the error has a fix line
    problems = [ln for ln in err[1:] if not ln.lstrip().startswith("fix:")]
    assert all(" -> " in ln for ln in problems) or any("fix:" in ln for ln in err), whole


def test_broken_workload_and_trace_files(tmp_path, capsys):
    wl = tmp_path / "w.yaml"
    wl.write_text("groups: {code: {weight: -2}}\nphases: []\n")
    err = _run(capsys, ["schedule", str(wl)])
    assert f"{wl}:1: groups.code.weight" in err[1] and f"{wl}:2: phases" in err[2], err
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,input_tokens\n1,abc\n")
    err = _run(capsys, ["trace-windows", str(trace)])
    assert str(trace) in err[0] and "no output-token column" in err[0]
    assert err[1].startswith("  fix: name it one of output_tokens")


@pytest.mark.parametrize("content", [b"GGUF\x03\x00\x00\x00garbage", b"", b"PK\x03\x04zip"])
def test_a_damaged_gguf_is_one_error(tmp_path, capsys, content):
    from specpilot.engine.gguf_read import GGUFFormatError, read_gguf

    f = tmp_path / "m.gguf"
    f.write_bytes(content)
    with pytest.raises(GGUFFormatError, match=str(f)):
        read_gguf(f)
    out = tmp_path / "hf"
    err = _run(capsys, ["export-hf", "--target", str(f), "--out", str(out)])
    assert str(f) in err[0] and "GGUF" in err[0], err


@pytest.mark.parametrize("command", ["report", "quality", "export"])
def test_a_file_that_is_not_duckdb(tmp_path, capsys, command):
    f = tmp_path / "p.duckdb"
    f.write_text("not a database\n")
    argv = [command, str(f)] + (["--parquet", str(tmp_path / "pq")] if command == "export" else [])
    err = _run(capsys, argv)
    assert str(f) in err[0] and "cannot open" in err[0], err
    assert not Path(tmp_path / "pq").exists() or not any((tmp_path / "pq").iterdir())


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path, capsys, monkeypatch):
    """``specpilot ... | head``: a closed pipe on stdout ends the command with 141 and no
    traceback (a real pipe whose read end is closed before the command writes)."""
    import io
    import os

    w = tmp_path / "w.yaml"
    w.write_text(
        "seed: 1\ngroups: {structured: {output: {mean: 4}}}\n"
        "phases: [{name: p, duration_s: 100, arrival: {kind: constant, rate: 5}}]\n"
    )
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    saved = os.dup(1)
    out = io.TextIOWrapper(io.FileIO(w_fd, "w"), write_through=True)
    monkeypatch.setattr(sys, "stdout", out)
    try:
        assert main(["schedule", str(w), "--json"]) == 141
    finally:
        monkeypatch.undo()
        os.dup2(saved, 1)
        os.close(saved)
        with contextlib.suppress(OSError):
            out.close()
    assert "Traceback" not in capsys.readouterr().err
