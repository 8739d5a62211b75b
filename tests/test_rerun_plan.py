"""What ``specpilot rerun`` decides before anything starts (``pilot.run.rerun.Rerun.plan``,
``pilot.plan.rerun``), and every input it refuses, with the field and the fix; ``specpilot
diff`` across two schedules. No engine starts here.

The stored pilots are written as the pilot writes them: the default pilot's record through
the runner's own planning (``Pilot.prepare``, ``_fitted``, ``_design``) with the capacity figures
of a real run on this machine kind, the others from a small builtin + llama.cpp config.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from specpilot.cli import main
from specpilot.errors import InputFileError
from specpilot.pilot.config.file import (
    PilotConfigError,
    default_pilot_path,
    load_pilot,
    parse_pilot,
)
from specpilot.pilot.plan.rerun import parse_setting, with_settings
from specpilot.pilot.run.rerun import Rerun, replayed_schedule
from specpilot.pilot.run.runner import Pilot
from specpilot.records import PilotRecord
from specpilot.store import Store

SHIPPED = "shipped:smollm2-135m-instruct-d4"
CONFIG: dict[str, Any] = {
    "name": "small",
    "seed": 3,
    "workload": {
        "seed": 1,
        "groups": {"code": {}},
        "phases": [
            {
                "name": "peak",
                "duration_s": 5,
                "arrival": {"kind": "trace", "path": "traces/t.csv", "window": "all",
                            "target_rate": 2.0},
            }
        ],
    },
    "episodes": {"per_level": 2, "processes": 2, "planted": None},
    "arms": [
        {"name": "base", "role": "baseline", "engine": "builtin",
         "options": {"draft": None, "threads": 1}},
        {"name": "spec", "role": "speculative", "engine": "builtin",
         "options": {"draft": SHIPPED, "k": 3, "threads": 1}},
        {"name": "lp", "role": "extra", "engine": "llamacpp", "options": {"threads": 2}},
        {"name": "ln", "role": "extra", "engine": "llamacpp", "compare_to": "lp",
         "options": {"threads": 2, "spec_type": "ngram-mod", "draft_n_max": 3}},
    ],
}  # fmt: skip


def _trace(path: Path, shift: float = 0.0) -> None:
    rows = [
        f"2023-11-16 19:08:{10 + i * 0.5 + (shift if i == 3 else 0):09.6f},{100 + i},{20}"
        for i in range(12)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")


def _store(run: Path, record: PilotRecord) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    with Store(run / "pilot.duckdb") as st:
        st.add_pilot(record)
    return run


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """A finished small pilot's folder; its pilot file's folder was ``tmp_path/src``."""
    src = tmp_path / "src"
    _trace(src / "traces" / "t.csv")
    cfg = parse_pilot(json.loads(json.dumps(CONFIG)))
    schedule = replayed_schedule(cfg, src, {})
    record = PilotRecord(
        "small-1", "small", cfg.model_dump(mode="json"), cfg.sha256(), "0.1.0", 0.0,
        status="complete", schedule={**schedule.to_dict(), "workload_dir": str(src)},
    )  # fmt: skip
    return _store(tmp_path / "before", record)


def _rerun(run: Path, *argv: str) -> tuple[int, str, str]:
    return main(["rerun", str(run), "--out", str(run.parent / "after"), "--dry-run", *argv]), "", ""


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


def test_the_default_pilots_rerun_replays_its_schedule(tmp_path: Path, monkeypatch) -> None:
    """The embedded default as a run of it stores it (levels at fractions of a probed capacity,
    deadlines from the probe, lengths fitted to the budget): its rerun finds the traces it read
    (beside the embedded pilot file) and rebuilds the schedule request for request from the
    stored figures; other figures would be another schedule, and are refused by request."""
    monkeypatch.setenv("SPECPILOT_ADMIN_TOKEN", "t")
    monkeypatch.setenv("SPECPILOT_CACHE", str(tmp_path / "cache"))
    capacity = {
        "sustainable_rps": 0.7129,
        "deadlines_s": {
            "zh_business": 2.759,
            "code": 2.379,
            "structured": 2.656,
            "longform": 2.965,
        },
        "fitted_s": {"off_peak": 136.1, "peak": 75.6},
    }
    monkeypatch.setattr(Pilot, "_capacity", lambda self, *a: dict(capacity))
    cfg = load_pilot(default_pilot_path())
    pilot = Pilot(cfg, tmp_path / "x", base_dir=default_pilot_path().parent)
    prep = pilot._fitted(pilot.prepare(), time.perf_counter())  # as Pilot.run plans it
    schedule, design = pilot._design(prep.plans, prep.level_schedule, quiet=True)
    stored = {**schedule.to_dict(), "design": design, "capacity": prep.capacity}
    record = PilotRecord(
        "default-1", cfg.name, cfg.model_dump(mode="json"), cfg.sha256(), "0.1.0", 0.0,
        status="complete", schedule=stored,
    )  # fmt: skip
    before = _store(tmp_path / "before", record)
    # the report a run writes beside its file (a stand-in: no arm ran here)
    doc = {"pilot": {"pilot_id": "default-1", "config": {}}, "arms": [], "comparisons": []}
    (before / "report.json").write_text(json.dumps(doc))
    plan = Rerun(before, [], tmp_path / "after").plan()
    assert plan.base_dir == default_pilot_path().parent.resolve()
    assert plan.schedule.sha256() == schedule.sha256() and len(plan.schedule) > 20
    assert plan.change == "nothing: the same config"
    moved = {**stored, "capacity": {**capacity, "sustainable_rps": 0.9}}
    other = _store(tmp_path / "other", dataclasses.replace(record, schedule=moved))
    shutil.copy(before / "report.json", other / "report.json")
    with pytest.raises(InputFileError, match=r"not the one it replayed: request off_peak~01-"):
        Rerun(other, [], tmp_path / "after2").plan()


def test_a_folder_without_its_pilot_file_is_refused(tmp_path: Path, capsys) -> None:
    assert main(["rerun", str(tmp_path), "--out", str(tmp_path / "new")]) == 2
    err = _err(capsys)
    assert f"{tmp_path} has no pilot.duckdb" in err and "fix: give the folder" in err


def test_a_pilot_file_of_an_older_schema_is_refused_saying_which(tmp_path: Path, capsys) -> None:
    old = tmp_path / "run" / "pilot.duckdb"
    old.parent.mkdir()
    with duckdb.connect(str(old)) as db:  # the run store of schema version 1
        db.execute(
            "CREATE TABLE schema_version (version INTEGER, specpilot_version VARCHAR, "
            "applied_unix DOUBLE, note VARCHAR)"
        )
        db.execute("INSERT INTO schema_version VALUES (1, '0.1.0', 0, 'created')")
        db.execute("CREATE TABLE runs (run_id VARCHAR)")
    assert main(["rerun", str(old.parent), "--out", str(tmp_path / "new")]) == 2
    err = _err(capsys)
    assert "rerun:" in err and "schema version 1" in err and "pilot files of version 2" in err
    assert (
        "fix: a rerun replays the config and schedule that a pilot file of schema version 2" in err
    )


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("arms.spec.options.k", "no '=' between the option and its value"),
        ("workload.seed=3", "'workload.seed' is not arms.NAME.options.FIELD"),
        ("arms.nope.options.k=4", "no arm 'nope' in the previous run (base, spec, lp, ln)"),
        ("arms.spec.options.kk=4", "the builtin engine has no option 'kk'"),
        ("arms.spec.options.k=[4", "the value '[4' is not YAML"),
        ("arms.*.options.nothing=1", "no arm's engine has an option 'nothing'"),
    ],
)
def test_a_malformed_set_is_named_with_the_syntax(small: Path, capsys, setting, said) -> None:
    assert _rerun(small, "--set", setting)[0] == 2
    err = _err(capsys)
    assert f"--set {setting!r}: {said}" in err, err
    assert "fix: write it as --set arms.NAME.options.FIELD=VALUE" in err


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        (
            ["arms.spec.options.k=4", "arms.ln.options.draft_n_max=4"],
            "--set changes the strategy of arms 'ln', 'spec': a rerun changes one arm's one switch",
        ),
        (
            ["arms.spec.options.k=4", "arms.*.options.dtype=float32"],
            "--set changes arm 'spec''s switch (k) and also base.dtype, spec.dtype",
        ),
        (
            ["arms.spec.options.dtype=float32"],
            "--set changes dtype of arm 'spec' and not of 'base' (builtin)",
        ),
        (["arms.spec.options.k=0"], "arms[1].options.k: a draft with k = 0 never proposes"),
        (
            ["arms.spec.options.draft=null", "arms.spec.options.k=0"],
            "arm 'spec' is the speculative arm but switches nothing on",
        ),
    ],
)
def test_more_than_one_arms_one_switch_is_refused(small: Path, capsys, settings, said) -> None:
    argv = [x for s in settings for x in ("--set", s)]
    assert _rerun(small, *argv)[0] == 2
    err = _err(capsys)
    assert said in err, err
    assert "fix:" in err


@pytest.mark.parametrize(
    ("settings", "change"),
    [
        ([], "nothing: the same config"),
        (["arms.spec.options.k=4"], "arm 'spec' switch: k 3 -> 4"),
        (["arms.ln.options.spec_type=ngram-simple"], "arm 'ln' switch: spec_type ngram-mod -> "),
        # an upgrade: every builtin arm alike (the llama.cpp arms' threads were 2 already)
        (["arms.*.options.threads=2"], "an upgrade of every builtin arm: threads 1 -> 2"),
        (
            ["arms.*.options.dtype=float32", "arms.*.options.max_seq_len=1024"],
            "an upgrade of every builtin arm: dtype auto -> float32; max_seq_len 2048 -> 1024",
        ),
    ],
)
def test_one_switch_or_an_upgrade_is_planned(small: Path, capsys, settings, change) -> None:
    argv = [x for s in settings for x in ("--set", s)]
    assert _rerun(small, *argv)[0] == 0, _err(capsys)
    out = capsys.readouterr().out
    assert f"changes: {change}" in out, out
    assert "schedule: the previous run's" in out and "seed 1" in out


def test_an_arm_by_url_has_no_options_to_set() -> None:
    cfg = parse_pilot(
        {
            "workload": "w.yaml",
            "arms": [
                {"name": "b", "role": "baseline", "engine": "openai", "url": "http://h/v1"},
                {"name": "s", "role": "speculative", "engine": "openai", "url": "http://h/v1"},
            ],
        }
    )
    with pytest.raises(PilotConfigError, match="arm 's' is given by URL") as err:
        with_settings(cfg, [parse_setting("arms.s.options.k=4")], "run")
    assert err.value.fix and "rerun without --set" in err.value.fix


def test_a_workload_file_edited_since_is_refused_naming_the_first_request(
    small: Path, capsys
) -> None:
    _trace(small.parent / "src" / "traces" / "t.csv", shift=0.3)  # the 4th arrival moved
    assert _rerun(small)[0] == 2
    err = _err(capsys)
    # the 4th arrival now comes later, and the episodes are cut elsewhere: the 4th request
    # falls in the second episode
    assert "the schedule rebuilt from" in err, err
    assert "is not the one it replayed: request 4 of 10: peak~01-000003 (group code, prompt " in err
    assert ") in the first, peak~02-000003 (group code, prompt " in err
    assert "fix: restore the files its workload read" in err


def test_a_workload_file_not_found_names_it_and_base_dir(small: Path, capsys) -> None:
    src = small.parent / "src"
    moved = small.parent / "elsewhere"
    shutil.move(src, moved)
    assert _rerun(small)[0] == 2
    err = _err(capsys)
    assert "rerun: workload.phases[0].arrival.path: traces/t.csv is not at" in err, err
    assert "fix: give that folder with --base-dir DIR" in err
    assert _rerun(small, "--base-dir", str(moved))[0] == 0, _err(capsys)
    assert f"workload files from: {moved.resolve()}" in capsys.readouterr().out


def test_the_previous_runs_own_folder_is_not_an_out(small: Path, capsys) -> None:
    assert main(["rerun", str(small), "--out", str(small), "--dry-run"]) == 2
    assert "--out" in _err(capsys)


def _report(tmp: Path, name: str, requests: list[dict[str, Any]] | None) -> Path:
    from specpilot.report.compare import schedule_fingerprint

    d = tmp / name
    d.mkdir()
    sched = None if requests is None else schedule_fingerprint({"seed": 1, "requests": requests})
    doc = {
        "pilot": {"pilot_id": name, "config": {}, "schedule": sched},
        "arms": [],
        "comparisons": [],
    }
    (d / "report.json").write_text(json.dumps(doc))
    return d / "report.json"


def _requests(prompt: str) -> list[dict[str, Any]]:
    return [
        {
            "phase": "peak",
            "index": i,
            "group": "code",
            "prompt_id": f"{prompt if i == 2 else 'p'}-{i}",
            "send_t": i,
        }
        for i in range(4)
    ]


def test_diff_across_two_schedules_is_refused_naming_the_first_request(tmp_path, capsys) -> None:
    a = _report(tmp_path, "a", _requests("p"))
    b = _report(tmp_path, "b", _requests("q"))
    assert main(["diff", str(a), str(a)]) == 0  # itself: one schedule
    capsys.readouterr()
    assert main(["diff", str(a), str(b)]) == 2
    err = _err(capsys)
    assert "replayed different schedules" in err
    assert "request peak-000002: group code, prompt p-2, sent at 2 s in the first, " in err
    assert "prompt q-2" in err and "fix: diff compares two runs of one schedule" in err


def test_diff_of_a_report_that_names_no_schedule_needs_its_pilot_file(tmp_path, capsys) -> None:
    a = _report(tmp_path, "a", _requests("p"))
    old = _report(tmp_path, "old", None)
    assert main(["diff", str(old.parent), str(a)]) == 2
    err = _err(capsys)
    assert "does not name its schedule" in err and "fix: give the run's folder" in err
