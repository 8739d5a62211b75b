"""CLI: specpilot schedule / trace-windows / export."""

from __future__ import annotations

import json

import yaml

from specpilot.cli import main
from specpilot.records import RequestRecord
from specpilot.store import Store

WORKLOAD = {
    "seed": 9,
    "groups": {"code": {}, "structured": {"weight": 2}},
    "phases": [
        {"name": "off_peak", "duration_s": 20, "arrival": {"kind": "poisson", "rate": 0.5}},
        {"name": "peak", "duration_s": 10, "arrival": {"kind": "gamma", "rate": 2.0, "cv": 2.0}},
    ],
}


def test_schedule_json_is_byte_identical_and_summary_prints(tmp_path, capsys):
    f = tmp_path / "w.yaml"
    f.write_text(yaml.safe_dump(WORKLOAD))
    assert main(["schedule", str(f), "--json"]) == 0
    first = capsys.readouterr().out
    assert main(["schedule", str(f), "--json"]) == 0
    assert capsys.readouterr().out == first
    d = json.loads(first)
    assert d["seed"] == 9 and [p["name"] for p in d["phases"]] == ["off_peak", "peak"]
    assert main(["schedule", str(f), "--json", "--seed", "10"]) == 0
    assert capsys.readouterr().out != first
    assert main(["schedule", str(f), "--phase", "peak", "--json"]) == 0
    assert {r["phase"] for r in json.loads(capsys.readouterr().out)["requests"]} == {"peak"}
    assert main(["schedule", str(f)]) == 0
    out = capsys.readouterr().out
    assert "off_peak" in out and "poisson" in out and "by group" in out


def test_schedule_reports_a_bad_file_without_a_traceback(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "groups": {"code": {}},
                "phases": [{"name": "p", "duration_s": 1, "arrival": {"kind": "poisson"}}],
            }
        )
    )
    assert main(["schedule", str(f)]) == 2
    err = capsys.readouterr().err
    assert (
        "phases[0].arrival: rate missing -> add rate: (requests/s), or target_utilization:" in err
        and "Traceback" not in err
    )


def test_trace_windows(tmp_path, capsys):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(600):
        sec = i if i < 300 else 300 + (i - 300) * 0.2  # 1/s, then 5/s
        rows.append(f"2023-11-16 18:{int(sec // 60):02d}:{sec % 60:09.6f}0,{100 + i},{10 + i % 7}")
    f = tmp_path / "trace.csv"
    f.write_text("\n".join(rows) + "\n")
    assert main(["trace-windows", str(f), "--window-s", "60", "--context-s", "30"]) == 0
    out = capsys.readouterr().out
    assert "600 requests" in out and "peak" in out and "off_peak" in out and "burst" in out
    assert main(["trace-windows", str(f), "--window-s", "60", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["windows"]["peak"]["rate"] > 4 and d["windows"]["off_peak"]["rate"] < 1.2


def test_export(tmp_path, capsys):
    db = tmp_path / "run.duckdb"
    with Store(db) as st:  # a pilot file (specpilot.store); export needs no pilot record
        st.add_requests([RequestRecord("r", "a", "p", "g", "p-000000", 0.0, "ok")])
    assert main(["export", str(db), "--parquet", str(tmp_path / "pq")]) == 0
    out = capsys.readouterr().out
    assert "requests.parquet  (1 rows)" in out
    assert (tmp_path / "pq" / "chunks.parquet").is_file()
    assert main(["export", str(tmp_path / "missing.duckdb"), "--parquet", str(tmp_path / "x")]) == 2
