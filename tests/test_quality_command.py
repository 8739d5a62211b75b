"""``specpilot quality RUN.duckdb``: recheck + gate from a pilot's records.

A hand-built pilot (three arms' answers, one of them broken) is written to a real pilot file;
the command reads it back through the store's reader and everything after it (checks,
sandbox, gate, report, exit code, ``--write``) runs for real.
"""

from __future__ import annotations

import json

import pytest

from specpilot.cli import main
from specpilot.records import ArmRecord, OutputRecord, PilotData, PilotRecord, RequestRecord
from specpilot.workload.groups import group_prompts


def _data() -> PilotData:
    code = group_prompts("code")[0]
    good = f"```python\n{code.meta['reference']}```"
    reqs = []
    for arm, text in (
        ("baseline", good),
        ("speculative", good),
        ("broken", "```python\ndef nope():\n    pass\n```"),
    ):
        for i in range(3):
            reqs.append(
                RequestRecord(
                    f"run-{arm}",
                    arm,
                    "peak",
                    "code",
                    f"peak-{i:06d}",
                    0.0,
                    "ok",
                    prompt_id=code.id,
                    output_text=text,
                )
            )
    arms = [
        ArmRecord("p", f"run-{a}", a, r, "builtin", manifest_sha256=f"sha-{a}")
        for a, r in (("baseline", "baseline"), ("speculative", "speculative"), ("broken", "extra"))
    ]
    tokens = ["def", " f"]
    tops = [[["def", -0.1], ["class", -4.0]], [[" f", -0.1], [" g", -3.0]]]
    cut = {"finish_reason": "length", "max_tokens": 2}  # capped: compared, not checked

    def out(arm: str, text: str, toks: list[str], lps: list[float]) -> OutputRecord:
        return OutputRecord(
            f"run-{arm}", arm, "code", code.id, 0, None, 0.0, text, toks, lps, tops, **cut
        )

    outs = [
        out("baseline", "def f", tokens, [-0.1, -0.1]),
        out("speculative", "def f", tokens, [-0.1, -0.1]),
        out("broken", "def g", ["def", " g"], [-0.1, -3.0]),
    ]
    pilot = PilotRecord("p", "p", {"quality": {"sandbox": {"cpu_s": 5}}}, "", "0", 0.0)
    return PilotData(pilot, arms=arms, requests=reqs, outputs=outs)


@pytest.fixture
def pilot_file(tmp_path):
    from specpilot.store import Store

    path = tmp_path / "pilot.duckdb"
    data = _data()
    with Store(path) as st:
        st.add_pilot(data.pilot)
        for arm in data.arms:
            st.add_arm(arm)
        st.add_requests(data.requests)
        st.add_outputs(data.outputs)
    return str(path)


def test_quality_command_rechecks_and_gates_each_arm(pilot_file, capsys):
    rc = main(["quality", pilot_file])
    out = capsys.readouterr().out
    assert rc == 1  # the broken arm fails its gate
    rows = {
        tuple(line.split()[:2]): line.split()[2:4]
        for line in out.splitlines()[1:]
        if line.startswith(("baseline", "speculative", "broken"))
    }
    assert rows[("baseline", "code")] == ["3", "1.00"] and rows[("broken", "code")] == ["3", "0.00"]
    assert "gate speculative vs baseline: PASS" in out
    assert "gate broken vs baseline: FAIL" in out and "greedy defect on" in out
    assert main(["quality", pilot_file, "--json"]) == 1
    got = json.loads(capsys.readouterr().out)
    assert {q["arm"] for q in got["quality"]} == {"baseline", "speculative", "broken"}
    ran = [q for q in got["quality"] if q["kind"] == "code_tests" and q["arm"] != "broken"]
    assert ran and all(q["isolation"] in ("bwrap", "unshare", "rlimits") for q in ran)
    broken = [q for q in got["quality"] if q["kind"] == "code_tests" and q["arm"] == "broken"]
    assert {tuple(q["reasons"]) for q in broken} == {
        (f"entry point {group_prompts('code')[0].meta['entry_point']} not defined",)
    }
    assert {v["candidate_arm"]: v["passed"] for v in got["verdicts"]} == {
        "speculative": True,
        "broken": False,
    }
    assert main(["quality", pilot_file, "--write"]) == 1
    capsys.readouterr()
    from specpilot.store import read_pilot

    stored = read_pilot(pilot_file).quality
    assert len(stored) == len(got["quality"]) and {q.arm for q in stored} == {
        "baseline",
        "speculative",
        "broken",
    }


def test_quality_command_errors(tmp_path, capsys):
    assert main(["quality", str(tmp_path / "missing.duckdb")]) == 2
    assert "pilot file not found" in capsys.readouterr().err
