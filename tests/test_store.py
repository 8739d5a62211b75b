"""The DuckDB result store: round trips, incremental writes that survive a kill, Parquet."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import duckdb
import pytest

from specpilot.records import ChunkTiming, MetricSnapshot, PrefillRecord, RequestRecord, RoundRecord
from specpilot.store import SCHEMA_VERSION, Store


def _req(i: int, run: str = "r1", arm: str = "baseline", status: str = "ok") -> RequestRecord:
    return RequestRecord(
        run_id=run,
        arm=arm,
        phase="peak",
        task_group="code",
        request_id=f"peak-{i:06d}",
        scheduled_t=100.0 + i,
        status=status,
        sent_t=100.001 + i,
        first_content_t=100.2 + i,
        done_t=101.0 + i,
        http_status=200,
        prompt_tokens=42,
        output_tokens=16,
        chunks=4,
        finish_reason="length",
        deadline_s=25.0,
        ttft_slo_s=1.0,
        client_stages={"retrieval": 0.0012},
        spec={"draft_n": 12, "draft_n_accepted": 7},
    )


def test_round_trip_of_every_record_type(tmp_path):
    path = tmp_path / "run.duckdb"
    with Store(path) as st:
        run = st.start_run(
            "r1",
            name="pilot",
            config={"seed": 1},
            schedule={"version": 1, "requests": []},
            manifests={"baseline": {"engine": "builtin"}},
        )
        assert st.schema_version == SCHEMA_VERSION
        st.add_requests([_req(0), _req(1, status="timeout")])
        st.add_chunks(
            [ChunkTiming("peak-000000", 100.2 + k * 0.05, 4, run) for k in range(4)], arm="baseline"
        )
        rounds = [
            RoundRecord(
                "peak-000000", k, 4, 2, 3, 0.01, 0.03, 0.002, 1, 100.2 + k, None, run, "baseline"
            )
            for k in range(3)
        ]
        st.add_rounds(rounds)
        st.add_prefills([PrefillRecord("peak-000000", 42, 0.12, 0.02, 1, 100.0, run, "baseline")])
        st.add_snapshot(
            MetricSnapshot(
                run,
                "baseline",
                "peak",
                "before",
                99.0,
                "builtin",
                {"spec_decode_num_drafts": 0.0},
                "# raw",
            )
        )
        st.add_quality(
            [
                {
                    "run_id": run,
                    "arm": "baseline",
                    "group": "code",
                    "request_id": "peak-000000",
                    "check": "tests_pass",
                    "passed": True,
                    "score": 1.0,
                    "detail": {"failed": []},
                }
            ]
        )
        st.add_compat(
            [
                {
                    "run_id": run,
                    "arm": "baseline",
                    "feature": "stop",
                    "passed": False,
                    "why": "ignored",
                }
            ]
        )
        st.add_drills(
            [
                {
                    "run_id": run,
                    "arm": "speculative",
                    "kind": "rollback",
                    "passed": True,
                    "interruption_s": 2.5,
                }
            ]
        )
        st.add_manifest(run, "speculative", {"engine": "builtin", "draft": "d4"})
        st.finish_run(run, "complete")
    with Store(path, read_only=True) as st:
        assert st.requests("r1") == [_req(0), _req(1, status="timeout")]
        assert st.requests("r1", phase="nope") == []
        assert [c.t for c in st.chunks("r1", "baseline")] == pytest.approx(
            [100.2, 100.25, 100.3, 100.35]
        )
        assert st.rounds("r1") == rounds
        assert st.prefills()[0].target_s == 0.12
        snap = st.snapshots("r1")[0]
        assert snap.metrics == {"spec_decode_num_drafts": 0.0} and snap.raw == "# raw"
        assert st.quality("r1")[0]["detail"] == {"failed": []}
        assert st.compat()[0]["why"] == "ignored" and st.drills()[0]["interruption_s"] == 2.5
        assert st.manifests("r1") == {
            "baseline": {"engine": "builtin"},
            "speculative": {"engine": "builtin", "draft": "d4"},
        }
        runs = st.runs()
        assert (
            runs[0]["status"] == "complete"
            and runs[0]["config"] == {"seed": 1}
            and runs[0]["finished_at"]
        )
        assert st.schedule("r1") == {"version": 1, "requests": []}
        assert st.counts()["requests"] == 2
        with pytest.raises(duckdb.Error):
            st.add_requests([_req(3)])  # read-only


def test_duplicate_run_and_last_write_wins(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        st.start_run("a")
        with pytest.raises(ValueError, match="already exists"):
            st.start_run("a")
        st.add_requests([_req(0, run="a")])
        st.add_requests([_req(0, run="a", status="error")])
        st.add_requests([_req(0, run="a", arm="speculative")])
        assert [(r.arm, r.status) for r in st.requests("a")] == [
            ("baseline", "error"),
            ("speculative", "ok"),
        ]
        generated = st.start_run()
        assert generated != "a" and len(st.runs()) == 2


def test_sink_group_commit_from_a_writer_thread(tmp_path):
    st = Store(tmp_path / "s.duckdb")
    st.start_run("r1")

    def writer():
        for i in range(300):
            st.sink(_req(i), [ChunkTiming(f"peak-{i:06d}", 1.0 + k, 1, "r1") for k in range(5)])

    th = threading.Thread(target=writer)
    th.start()
    th.join()
    st.flush()
    assert st.counts()["requests"] == 300 and st.counts()["chunks"] == 1500
    assert {c.request_id for c in st.chunks("r1", "baseline")} == {
        f"peak-{i:06d}" for i in range(300)
    }
    st.close()
    with pytest.raises(ValueError, match="closed"):
        st.sink(_req(1), [])


def test_a_new_record_field_becomes_a_column(tmp_path):
    path = tmp_path / "old.duckdb"
    with Store(path) as st:
        st.start_run("r1")
        st.add_requests([_req(0)])
    con = duckdb.connect(str(path))
    con.execute(
        'ALTER TABLE requests DROP COLUMN "spec"'
    )  # a file written before the field existed
    con.close()
    with Store(path) as st:
        assert st.requests("r1")[0].spec is None
        notes = [r[0] for r in st.query("SELECT note FROM schema_version ORDER BY applied_at")]
        assert notes == ["created", "added requests.spec"]


def test_parquet_export(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        st.start_run("r1")
        st.add_requests([_req(i) for i in range(5)])
        paths = st.export_parquet(tmp_path / "pq")
    names = {p.name for p in paths}
    assert {"requests.parquet", "chunks.parquet", "runs.parquet", "schema_version.parquet"} <= names
    n = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{tmp_path / 'pq' / 'requests.parquet'}')"
    ).fetchall()[0][0]
    assert n == 5


CHILD = textwrap.dedent(
    """
    import sys
    from specpilot.records import ChunkTiming, RequestRecord
    from specpilot.store import Store
    st = Store(sys.argv[1])
    st.start_run("crash")
    i = 0
    while True:
        rec = RequestRecord("crash", "b", "peak", "g", f"peak-{i:06d}", float(i), "ok")
        st.sink(rec, [ChunkTiming(rec.request_id, float(i) + k / 10, 1) for k in range(10)])
        if i % 20 == 19:
            st.flush()
            print(i + 1, flush=True)   # everything up to here is committed
        i += 1
    """
)


def test_a_killed_writer_loses_at_most_the_in_flight_records(tmp_path):
    path = tmp_path / "crash.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    committed = 0
    deadline = time.monotonic() + 20
    assert proc.stdout is not None
    while committed < 200 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed = int(line)
    os.kill(proc.pid, signal.SIGKILL)  # mid-write: the child never stops writing on its own
    proc.wait()
    proc.stdout.close()
    assert committed >= 200, "the child did not get far enough to test anything"
    with Store(path) as st:
        reqs = st.requests("crash")
        assert len(reqs) >= committed
        # Each request was committed with its chunks in one transaction: none is half there.
        per = {}
        for c in st.chunks("crash"):
            per[c.request_id] = per.get(c.request_id, 0) + 1
        assert set(per) == {r.request_id for r in reqs} and set(per.values()) == {10}
        assert st.runs()[0]["status"] == "running"  # never finished: visible as such
