"""The pilot file: typed round trips, three arms x three phases, SQL aggregates against values
computed by hand, rewrites, the one writer thread, older files, and a kill mid-run."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import duckdb
import numpy as np
import pytest

from specpilot import records as R
from specpilot.records import ChunkTiming, PrefillRecord, RequestRecord, RoundRecord
from specpilot.store import SCHEMA_VERSION, TABLES, PilotFileError, Store, export_file, read_pilot

ARMS = (("baseline", 0), ("speculative", 3), ("alternative", 0))
PHASES = ("off_peak", "peak", "burst")


def _pilot() -> R.PilotRecord:
    hw = R.HardwareFacts("Xeon", ["avx2", "avx512_bf16"], 2, 2, 24 * 2**30, [], "Linux", "3.11")
    return R.PilotRecord("p1", "three-arm", {"seed": 1}, "ab" * 32, "0.1.0", 1.0e9, hardware=hw)


def _arm(name: str, k: int, order: int) -> R.ArmRecord:
    strategy = R.StrategySpec("draft", k, "d4", "cd" * 32) if k else R.StrategySpec()
    budget = R.ResourceBudget(8 * 2**30, 2, ["cpu"], "speculative", ["draft weights 28 MB"])
    return R.ArmRecord(
        "p1",
        f"run-{name}",
        name,
        name,
        "builtin",
        {"engine": "specpilot-builtin"},
        "ef" * 32,
        strategy,
        budget,
        run_order=order,
        status="complete",
        load_summary={"trustworthy": True},
    )


def _request(arm: str, phase: str, i: int, status: str = "ok", **kw) -> RequestRecord:
    return RequestRecord(
        run_id=f"run-{arm}",
        arm=arm,
        phase=phase,
        task_group="code" if i % 2 else "zh_business",
        request_id=f"{phase}-{i:06d}",
        scheduled_t=10.0 * i,
        status=status,
        sent_t=10.0 * i,
        first_content_t=10.0 * i + 0.2,
        done_t=10.0 * i + 1.0,
        http_status=200,
        prompt_tokens=20,
        output_tokens=7,
        chunks=3,
        prompt_id=f"p{i}",
        client_stages={"retrieval": 0.001},
        spec={"rounds": 2, "raw": {"x": [1, 2]}},
        served_k=3,
        output_text="你好 world",
        **kw,
    )


def _rounds(req: RequestRecord, k: int) -> list[RoundRecord]:
    # proposed k, accepted 3, 1, 0 (k=3): committed 4, 2, 1; plain: 3 rounds of 1 token
    acc = [3, 1, 0] if k else [0, 0, 0]
    return [
        RoundRecord(
            req.request_id,
            j,
            k,
            a,
            a + 1,
            0.002 * k,
            0.020 + 0.001 * k,
            0.001,
            batch_size=1 + j % 2,
            t_start=req.sent_t + j,
            run_id=req.run_id,
            arm=req.arm,
            phase=req.phase,
        )
        for j, a in enumerate(acc)
    ]


def _chunks(req: RequestRecord) -> list[ChunkTiming]:
    # gaps 0.3 and 0.5 s; 1, 2 and 4 tokens
    return [
        ChunkTiming(req.request_id, req.first_content_t + dt, n, req.run_id, j)
        for j, (dt, n) in enumerate(((0.0, 1), (0.3, 2), (0.8, 4)))
    ]


def _fill(st: Store, phases: tuple[str, ...] = PHASES) -> list[RequestRecord]:
    st.add_pilot(_pilot())
    reqs = []
    for order, (arm, k) in enumerate(ARMS):
        st.add_arm(_arm(arm, k, order))
        st.add_phases(
            R.PhaseRecord(
                f"run-{arm}",
                arm,
                ph,
                30.0 * n,
                30.0 * n + 30,
                0.1,
                3,
                5.0,
                1.7e9,
                5.0 + 30 * n,
                35.0 + 30 * n,
                "complete",
            )
            for n, ph in enumerate(phases)
        )
        for ph in phases:
            for i in range(3):
                status = "timeout" if i == 2 else "ok"
                req = _request(arm, ph, i, status)
                pre = PrefillRecord(
                    req.request_id, 20, 0.05, 0.01, 1, req.sent_t, req.run_id, arm, ph
                )
                st.sink(req, _chunks(req), _rounds(req, k), pre)
                reqs.append(req)
    return reqs


def test_three_arms_three_phases_round_trip_typed(tmp_path):
    path = tmp_path / "pilot.duckdb"
    with Store(path) as st:
        reqs = _fill(st)
        snap = R.MetricSnapshot("run-speculative", "speculative", "peak", "after", 12.5, "builtin",
                                {"spec_rounds": 12.0}, "# raw", rss_bytes=300_000_000,
                                kv_allocated_bytes=2**20, kv_used_bytes=2**18)  # fmt: skip
        q = R.QualityRecord("run-baseline", "baseline", "code", "p1", "tests_pass", "code_tests",
                            "key", False, ["tests fail: test_empty"], detail={"stderr": "x"})  # fmt: skip
        out = R.OutputRecord("run-baseline", "baseline", "code", "p1", 0, 7, 0.7, "def f(): ...",
                             ["def", " f"], [-0.1, -0.2], [[["def", -0.1], ["class", -2.3]]])  # fmt: skip
        con = R.ConsistencyRecord("p1", "code", "p1", "baseline", "speculative", False, 4, "a",
                                  "b", -0.5, -0.6, 0.1, 0.5)  # fmt: skip
        comp = R.CompatRecord("run-speculative", "speculative", "stop_in_round", "pass", "ok", 0.2)
        drill = R.DrillRecord("run-speculative", "speculative", "peak", "runtime_switch", "done",
                              events=[{"t": 1.0, "event": "requested"}])  # fmt: skip
        st.add_snapshots([snap])
        st.add_quality([q])
        st.add_outputs([out])
        st.add_consistency([con])
        st.add_compat([comp])
        st.add_drills([drill])
    data = read_pilot(path, rounds=True)
    assert data.pilot == _pilot()
    assert data.arms == [_arm(a, k, n) for n, (a, k) in enumerate(ARMS)]
    # ordered by run, then planned start
    assert [(p.arm, p.phase) for p in data.phases] == [
        (a, p) for a in sorted(dict(ARMS)) for p in PHASES
    ]
    key = lambda r: (r.run_id, r.arm, r.scheduled_t, r.request_id)  # noqa: E731
    assert data.requests == sorted(reqs, key=key)
    assert data.snapshots == [snap] and data.quality == [q] and data.outputs == [out]
    assert data.consistency == [con] and data.compat == [comp] and data.drills == [drill]
    assert len(data.rounds) == 27 * 3 and len(data.prefills) == 27
    # typed columns, not JSON text: SQL can use them directly
    with duckdb.connect(str(path), read_only=True) as db:
        types = dict(db.execute("SELECT column_name, data_type FROM information_schema.columns "
                                "WHERE table_name = 'requests'").fetchall())  # fmt: skip
        assert types["prompt_tokens"] == "BIGINT" and types["served_k"] == "BIGINT"
        assert types["client_stages"] == "JSON" and types["warmup"] == "BOOLEAN"
        flags = db.execute("SELECT hardware.cpu_flags FROM pilots").fetchone()[0]
        assert flags == ["avx2", "avx512_bf16"]
        k = db.execute("SELECT strategy.k FROM arms WHERE arm = 'speculative'").fetchone()[0]
        assert k == 3


def test_no_column_is_a_reserved_sql_keyword():
    reserved = {
        name
        for name, cat in duckdb.sql(
            "SELECT keyword_name, keyword_category FROM duckdb_keywords()"
        ).fetchall()
        if cat == "reserved"
    }
    cols = {c for t in TABLES.values() for c in t.columns}
    assert "task_group" in cols and "check_name" in cols
    assert not cols & reserved, cols & reserved


def test_request_rounds_verify_costs_and_chunk_gaps_by_hand(tmp_path):
    with Store(tmp_path / "p.duckdb") as st:
        _fill(st)
        warm = _request("speculative", "warmup", 9, warmup=True)
        st.sink(warm, _chunks(warm), _rounds(warm, 3))  # excluded from gaps and verify costs
        data = st.read()
    # warm-up requests are left out of the round aggregates too (they once made a "warmup"
    # cell and leaked into every pooled figure)
    assert all(rr.phase != "warmup" for rr in data.request_rounds)
    assert warm.request_id not in {rr.request_id for rr in data.request_rounds}
    spec = [rr for rr in data.request_rounds if rr.arm == "speculative" and rr.phase == "peak"]
    rr = next(r for r in spec if r.request_id == "peak-000001")
    counts = (rr.rounds, rr.spec_rounds, rr.proposed, rr.accepted, rr.committed)
    assert counts == (3, 3, 9, 4, 7) and all(type(c) is int for c in counts)
    assert rr.task_group == "code" and rr.truncated_rounds == 0
    # batch sizes 1, 2, 1: the request's share of draft time 0.006 * (1 + 1/2 + 1)
    assert rr.draft_s == pytest.approx(0.006 * 2.5) and rr.verify_s == pytest.approx(0.023 * 2.5)
    assert rr.mean_batch_size == pytest.approx(4 / 3)
    assert rr.pos_proposed == [3, 3, 3]  # every round proposed 3
    assert rr.pos_accepted == [2, 1, 1]  # accepted 3, 1, 0: >=1 twice, >=2 once, >=3 once
    assert rr.accepted_hist == [1, 1, 0, 1]
    plain = next(r for r in data.request_rounds if r.arm == "baseline")
    assert plain.spec_rounds == 0 and plain.pos_proposed == [] and plain.accepted_hist == []
    assert plain.committed == 3
    # verify cost: speculative rows (tokens 4) at batch 1 (rounds 0 and 2 of 9 requests) vs 2
    vc = {(v.arm, v.tokens, v.batch_size): v for v in data.verify_costs}
    assert vc[("speculative", 4, 1)].samples == 18 and vc[("speculative", 4, 2)].samples == 9
    assert vc[("speculative", 4, 1)].median_s == pytest.approx(0.023)
    assert vc[("baseline", 1, 1)].median_s == pytest.approx(0.020)
    assert {v.source for v in data.verify_costs} == {"rounds"}
    # gaps: ok, non-warm-up requests only; per request 0.3 and 0.5 s with 2 and 4 tokens
    g = {(c.arm, c.phase, c.task_group): c for c in data.chunk_gaps}
    assert len(g) == 3 * 3 * 2  # timeouts (i == 2) are excluded; groups code / zh_business
    cell = g[("speculative", "peak", "code")]
    pairs = sorted(zip(np.round(cell.gap_s, 9).tolist(), cell.tokens.tolist(), strict=True))
    assert pairs == [(0.3, 2), (0.5, 4)]
    assert sorted(g[("baseline", "burst", "zh_business")].gap_s) == pytest.approx([0.3, 0.5])


def test_llamacpp_requests_become_round_summaries_from_their_totals(tmp_path):
    """llama.cpp gives per-response totals (``draft_n`` / ``draft_n_accepted``, decode time), no
    rounds: each ok request is one round-summary row, decode steps = (tokens - 1) - accepted."""
    with Store(tmp_path / "p.duckdb") as st:
        st.add_pilot(_pilot())
        for order, name in enumerate(("llamacpp-plain", "llamacpp-ngram")):
            st.add_arm(dataclasses.replace(_arm(name, 0, order), engine="llamacpp"))
        spec = {"engine": "llamacpp", "source": "timings", "proposed": 9, "accepted": 6}

        def req(arm, i, status="ok", **kw):
            return dataclasses.replace(_request(arm, "peak", i, status), output_tokens=21, **kw)

        ng = req("llamacpp-ngram", 1, decode_s=0.5, spec=spec)
        plain = req("llamacpp-plain", 1, decode_s=0.8, spec=None)
        bad = req("llamacpp-ngram", 2, "timeout", decode_s=0.1, spec=spec)
        for r in (ng, plain, bad):
            st.sink(r)
        b = _request("builtin", "peak", 3)  # a builtin request without rounds gets no row
        st.add_arm(_arm("builtin", 0, 2))
        st.sink(b)
        data, cols = st.read(), st.read(columns=True)
    got = {r.arm: r for r in data.request_rounds}
    assert set(got) == {"llamacpp-plain", "llamacpp-ngram"}  # the timeout has no row
    n = got["llamacpp-ngram"]
    assert (n.rounds, n.spec_rounds, n.proposed, n.accepted, n.committed) == (14, 0, 9, 6, 20)
    assert n.verify_s == pytest.approx(0.5) and n.draft_s == 0.0 and n.accepted_hist == []
    p = got["llamacpp-plain"]
    assert (p.rounds, p.proposed, p.committed, p.verify_s) == (20, 0, 20, pytest.approx(0.8))
    assert sorted(cols.request_rounds_columns["arm"].tolist()) == sorted(got)


def test_columns_for_analysis_at_scale_match_the_records(tmp_path):
    """``read(columns=True)``: the same requests and round aggregates as numpy columns; the
    analysis gives the same round summaries and load cells from either form."""
    from specpilot.analysis.pilot import analyze

    with Store(tmp_path / "p.duckdb") as st:  # one episode of each level (pilot.design)
        _fill(st, tuple(f"{p}~01" for p in PHASES))
        st.sink(dataclasses.replace(_request("speculative", "peak~01", 7), status="not_sent",
                                    sent_t=None, client_stages={}))  # fmt: skip
        recs, cols = st.read(), st.read(columns=True)
    assert cols.requests == [] and cols.request_rounds == []
    rc = cols.request_columns
    assert rc["request_id"].tolist() == [r.request_id for r in recs.requests]
    assert rc["output_tokens"].tolist() == [float(r.output_tokens) for r in recs.requests]
    sent = rc["sent_t"][rc["request_id"] == "peak~01-000007"]
    assert np.isnan(sent).all() and "output_text" not in rc and "spec" not in rc
    stage = rc["client_stage:retrieval"]
    assert np.isnan(stage[rc["status"] == "not_sent"]).all()
    assert (stage[rc["status"] != "not_sent"] == 0.001).all()
    rr = cols.request_rounds_columns
    spec = rr["arm"] == "speculative"
    assert rr["pos_accepted"][spec].tolist()[0] == [2, 1, 1]
    assert rr["pos_proposed"][~spec].sum() == 0 and rr["accepted_hist"].shape[1] == 4
    a, b = analyze(recs), analyze(cols)
    assert a.rounds and a.rounds == b.rounds and a.load_cells == b.load_cells
    # one path through the analysis: the pilot's own report (records) and `specpilot report
    # FILE` (columns) write the same report.json
    from specpilot.report import build_report

    docs = [json.dumps(build_report(d, plots=False).document, sort_keys=True, default=str)
            for d in (recs, cols)]  # fmt: skip
    assert docs[0] == docs[1]


def test_a_request_written_again_replaces_its_chunks_rounds_and_prefill(tmp_path):
    with Store(tmp_path / "p.duckdb") as st:
        req = _request("speculative", "peak", 1)
        st.sink(req, _chunks(req), _rounds(req, 3), PrefillRecord(req.request_id, 20, 0.1, 0.0))
        again = dataclasses.replace(req, status="error", chunks=1)
        st.sink(again, _chunks(again)[:1], _rounds(again, 3)[:1])
        st.flush()
        assert st.committed_requests == 2
        assert [r.status for r in st.requests()] == ["error"]
        assert len(st.records("chunks")) == 1 and len(st.records("rounds")) == 1
        assert st.records("prefills") == []
        # the same request in another arm is another request
        st.sink(dataclasses.replace(req, arm="baseline"), _chunks(req))
        assert len(st.records("chunks")) == 4


def test_one_writer_thread_takes_sinks_from_threads_and_isolates_a_bad_write(tmp_path):
    st = Store(tmp_path / "p.duckdb")

    def writer(t: int) -> None:
        for i in range(150):
            req = _request("a", f"t{t}", i)
            st.sink(req, _chunks(req), _rounds(req, 3))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    bad = dataclasses.replace(_request("a", "peak", 0), run_id=None)  # NULL key: refused
    with pytest.raises(duckdb.Error):
        st.add_requests([bad])
    for th in threads:
        th.join()
    st.flush()
    counts = st.counts()
    assert counts["requests"] == 300 and counts["chunks"] == 900 and counts["rounds"] == 900
    assert st.committed_requests == 300
    st.close()
    with pytest.raises(ValueError, match="closed"):
        st.sink(_request("a", "p", 1))


def test_bulk_columns_compute_chunk_gaps_like_the_sink(tmp_path):
    with Store(tmp_path / "p.duckdb") as st:
        st.add_pilot(_pilot())
        st.add_requests([_request("a", "peak", 1), _request("a", "peak", 3)])
        n = st.add_columns("chunks", {
            "request_id": np.array(["peak-000001"] * 3 + ["peak-000003"] * 2, dtype=object),
            "t": np.array([1.0, 1.25, 2.0, 5.0, 5.5]), "index": np.array([0, 1, 2, 0, 1]),
            "tokens_in_chunk": np.array([1, 2, 3, 1, 1]), "run_id": "run-a", "arm": "a",
        })  # fmt: skip
        assert n == 5
        gaps = st.read().chunk_gaps[0]
    pairs = sorted(zip(np.round(gaps.gap_s, 9).tolist(), gaps.tokens.tolist(), strict=True))
    assert pairs == [(0.25, 2), (0.5, 1), (0.75, 3)]


def test_a_version_1_file_is_refused_with_the_fix_and_still_exports(tmp_path):
    old = tmp_path / "old.duckdb"
    with duckdb.connect(str(old)) as db:  # the layout the run store of version 1 wrote
        db.execute("CREATE TABLE schema_version (version INTEGER, specpilot_version VARCHAR, "
                   "applied_at TIMESTAMP, note VARCHAR)")  # fmt: skip
        db.execute("INSERT INTO schema_version VALUES (1, '0.1.0', now(), 'created')")
        db.execute("CREATE TABLE runs (run_id VARCHAR, config JSON)")
        db.execute("CREATE TABLE manifests (run_id VARCHAR, arm VARCHAR, manifest JSON)")
        db.execute("INSERT INTO runs VALUES ('r1', '{}')")
    for read_only in (True, False):
        with pytest.raises(PilotFileError) as err:
            Store(old, read_only=read_only)
        msg = str(err.value)
        assert "schema version 1" in msg and f"version {SCHEMA_VERSION}" in msg
        assert "specpilot load" in msg and "specpilot export" in msg
    rows = {p.name: n for p, n in export_file(old, tmp_path / "pq").items()}
    assert rows["runs.parquet"] == 1 and "manifests.parquet" in rows
    with duckdb.connect(str(old), read_only=True) as db:  # untouched by the refusal
        assert db.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 1


def test_other_files_newer_versions_and_new_record_fields(tmp_path):
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as db:
        db.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(PilotFileError, match="not a specpilot pilot file"):
        Store(other)
    path = tmp_path / "p.duckdb"
    with Store(path) as st:
        st.add_requests([_request("a", "peak", 1)])
    with duckdb.connect(str(path)) as db:  # written before RequestRecord.output_text existed
        db.execute('ALTER TABLE requests DROP COLUMN "output_text"')
    with Store(path, read_only=True) as st:  # reading an older file: the field's default
        assert st.requests()[0].output_text is None
    with Store(path) as st:  # writing: the column is added and noted
        notes = [r[0] for r in st.query("SELECT note FROM schema_version ORDER BY applied_unix")]
        assert notes == ["created", "added requests.output_text"]
    with duckdb.connect(str(path)) as db:
        db.execute("INSERT INTO schema_version VALUES (3, '9.0', 0, 'future')")
    with pytest.raises(PilotFileError, match="newer specpilot"):
        Store(path, read_only=True)


def test_read_pilot_needs_exactly_one_pilot_and_parquet_export(tmp_path):
    path = tmp_path / "p.duckdb"
    with Store(path) as st:
        st.add_requests([_request("a", "peak", i) for i in range(5)])
        paths = st.export_parquet(tmp_path / "pq")
    with pytest.raises(PilotFileError, match="0 pilot records"):
        read_pilot(path)
    assert {"requests.parquet", "chunks.parquet", "pilots.parquet"} <= {p.name for p in paths}
    pq = tmp_path / "pq" / "requests.parquet"
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{pq}')").fetchall()[0][0] == 5


CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from specpilot.loadgen import LoadConfig, LoadRunner
    from specpilot.loadgen.testserver import TestServer, TestServerConfig
    from specpilot.records import ScheduledRequest
    from specpilot.store import PhaseRecorder, Store
    msg = [{"role": "user", "content": "hi"}]
    items = [ScheduledRequest(i, i * 0.02, "steady", "g", "p", msg, 6) for i in range(40)]
    items += [ScheduledRequest(40 + i, i * 0.02, "burst", "g", "p", msg, 6) for i in range(2000)]
    st = Store(sys.argv[1])
    with TestServer(TestServerConfig(itl_s=0.005)) as srv:
        cfg = LoadConfig.build(srv.url, run_id="crash", arm="spec", progress=False,
                               phase_timing="back_to_back")
        runner = LoadRunner(items, cfg, st.sink)
        PhaseRecorder(st, "crash", "spec", None, {"steady": 0.8, "burst": 40.0}).attach(runner)
        def report():
            while True:
                st.flush()
                print(st.committed_requests, flush=True)  # durable up to here
                time.sleep(0.05)
        threading.Thread(target=report, daemon=True).start()
        runner.run()
    """
)


def test_a_kill_mid_run_keeps_every_confirmed_record_and_shows_the_cut(tmp_path):
    """SIGKILL to a process running a real load into a pilot file, in its second phase."""
    path = tmp_path / "crash.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    confirmed = 0
    assert proc.stdout is not None
    while confirmed < 120:  # the steady phase (40) is over; the burst is under way
        line = proc.stdout.readline()
        assert line, "the child ended before the kill"
        confirmed = int(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    with Store(path, read_only=True) as st:
        reqs = st.requests("crash")
        chunks = st.records("chunks", run_id="crash")
        phases = {p.phase: p for p in st.records("phases")}
    assert confirmed <= len(reqs) < 2040  # every confirmed request survived; the run was cut
    per: dict[str, int] = {}
    for c in chunks:
        per[c.request_id] = per.get(c.request_id, 0) + 1
    for r in reqs:  # each request was committed with all its chunks, none half there
        assert per.get(r.request_id, 0) == r.chunks and r.status == "ok"
    assert phases["steady"].status == "complete" and phases["steady"].actual_end_t is not None
    assert phases["burst"].status == "running" and phases["burst"].actual_start_t is not None
    assert phases["burst"].actual_end_t is None  # the cut: started, never ended
    assert phases["steady"].t_run == phases["burst"].t_run is not None


@pytest.mark.parametrize("damage", ["truncated", "byte_removed", "random"])
def test_a_damaged_pilot_file_is_one_clear_error_never_a_duckdb_traceback(tmp_path, damage):
    path = tmp_path / "pilot.duckdb"
    with Store(path) as st:
        _fill(st)
    blob = path.read_bytes()
    if damage == "truncated":
        blob = blob[: len(blob) // 2]
    elif damage == "byte_removed":
        blob = blob[:5000] + blob[5001:]
    else:
        blob = np.random.default_rng(0).bytes(64 * 1024)
    path.write_bytes(blob)
    with pytest.raises(PilotFileError) as err:
        read_pilot(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert any(w in str(err.value) for w in ("damaged", "cannot open", "not a"))


def test_step_cadence_is_the_time_from_one_step_start_to_the_next_without_a_prefill(tmp_path):
    """Rows of one decode step share its start; the step's time is the gap to the next start
    (the loop's work outside the round included), and a gap that holds a prefill is left out."""
    run = "pilot-1.speculative.r0"

    def rnd(req, i, t, b):
        return RoundRecord(req, i, 3, 1, 2, 0.01, 0.05, 0.0, batch_size=b, t_start=t,
                           run_id=run, arm="speculative", phase="peak")  # fmt: skip

    # steps at 0.0 (2 rows), 0.3 (2 rows), 0.6 (1 row), 1.0 (1 row); a prefill at 0.7
    rows = [rnd("a", 0, 0.0, 2), rnd("b", 0, 0.0, 2), rnd("a", 1, 0.3, 2), rnd("b", 1, 0.3, 2),
            rnd("a", 2, 0.6, 1), rnd("a", 3, 1.0, 1)]  # fmt: skip
    with Store(tmp_path / "p.duckdb") as st:
        st.add_pilot(_pilot())
        st.add_rounds(rows)
        st.add_prefills([PrefillRecord("c", 10, 0.2, 0.0, t_start=0.7, run_id=run,
                                       arm="speculative", phase="peak")])  # fmt: skip
        got = st.read().step_cadence
    by_b = {c.batch_size: c for c in got}
    assert set(by_b) == {2}  # the 1-row step at 0.6 has the prefill in its gap; 1.0 is last
    assert by_b[2].samples == 2 and by_b[2].median_s == pytest.approx(0.3)
