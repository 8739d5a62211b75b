"""An episode pilot whose engine processes cannot all fit in memory is refused after the first
start (its resident memory measured, not assumed), before anything is measured: exit 2, the
field and the largest value that fits, every engine stopped. One real builtin engine starts."""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest
import yaml

from pilot_cases import at_fixed_rates
from specpilot.cli import main

DEFAULT = Path(__file__).resolve().parent.parent / "examples" / "pilot-default.yaml"
GIB = 2**30


@pytest.mark.slow
@pytest.mark.skipif(
    psutil.virtual_memory().available > 26 * GIB,
    reason="32 builtin processes of ~0.9 GiB fit in this machine's memory: nothing to refuse",
)
def test_more_processes_than_memory_holds_are_refused_naming_the_largest_that_fit(tmp_path, capsys):
    data = at_fixed_rates(yaml.safe_load(DEFAULT.read_text()))
    # no look and no budget: the memory refusal is the one under test
    # each arm on processes of its own (not in place): 32 processes
    data["episodes"] = {**data["episodes"], "processes": 16, "per_level": 17, "looks": [],
                        "budget_min": None, "in_place": False}  # fmt: skip
    data["workload"]["phases"] = [
        {
            **p,
            "arrival": {
                **p["arrival"],
                "path": str((DEFAULT.resolve().parent / p["arrival"]["path"]).resolve()),
            },
        }
        for p in data["workload"]["phases"]
    ]  # the traces relative to the example, the file in tmp_path
    f = tmp_path / "big.yaml"
    f.write_text(yaml.safe_dump(data))
    rc = main(["pilot", str(f), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    got = re.search(r"episodes\.processes 16: 32 engine processes .* at most (\d+)", err)
    assert got is not None, err[-3000:]
    assert 1 <= int(got.group(1)) < 16
    # refused after the first start: nothing was measured, no engine left behind
    import duckdb

    con = duckdb.connect(str(tmp_path / "out" / "pilot.duckdb"), read_only=True)
    assert con.execute("select count(*) from requests where not warmup").fetchall() == [(0,)]
    # our own children only: another test worker may run engines of its own meanwhile
    left = [c for c in psutil.Process().children(recursive=True) if "serve" in _cmdline(c)]
    assert not left, left


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # gone meanwhile
        return ""
