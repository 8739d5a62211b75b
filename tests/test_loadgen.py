"""Load generator: SSE parsing (pure), then accounting against the local SSE test server.

Every test checks the contract "one scheduled request -> exactly one record with a status".
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from specpilot.loadgen import LoadConfig, LoadRunner, quantile, request_id, run_schedule
from specpilot.loadgen.client import _Stream
from specpilot.loadgen.testserver import ServerConfig, TestServer
from specpilot.records import RequestRecord, ScheduledRequest

pytestmark = pytest.mark.timeout(60)


def sched(
    n: int, gap: float = 0.01, content: str = "hi", phase: str = "peak", max_tokens: int = 4, **kw
):
    return [
        ScheduledRequest(
            index=i,
            send_t=i * gap,
            phase=phase,
            group="g",
            prompt_id=f"p{i}",
            messages=[{"role": "user", "content": content}],
            max_tokens=max_tokens,
            **kw,
        )
        for i in range(n)
    ]


def cfg(url: str, **kw) -> LoadConfig:
    kw.setdefault("progress", False)
    return LoadConfig(url=url, run_id="t", arm="a", **kw)


def _rec() -> RequestRecord:
    return RequestRecord("r", "a", "p", "g", "x", 0.0, "")


# -- SSE parsing -----------------------------------------------------------------------------
def test_sse_events_split_across_reads_and_crlf():
    rec = _rec()
    st = _Stream(rec, LoadConfig(url="x"), [])
    ev1 = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\r\n\r\n'
    ev2 = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\r\n\r\n'
    ev3 = b'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\n'
    blob = ev1 + ev2 + ev3 + b"data: [DONE]\n\n"
    # split at every awkward place, including inside "\r\n"
    for cut in (3, len(ev1) - 1, len(ev1) + 5, len(ev1 + ev2) - 2):
        rec = _rec()
        st = _Stream(rec, LoadConfig(url="x"), [])
        st.feed(blob[:cut], 1.0)
        st.feed(blob[cut:], 2.0)
        assert st.done and "".join(st.text) == "Hello", cut
        assert rec.chunks == 2 and rec.finish_reason == "stop"
    # the role-only chunk is not content: TTFT starts at the first text
    rec = _rec()
    st = _Stream(rec, LoadConfig(url="x"), [])
    st.feed(ev1, 1.0)
    assert rec.first_content_t is None
    st.feed(ev2, 2.0)
    assert rec.first_content_t == 2.0


def test_tool_call_delta_counts_as_content_and_usage_deltas_count_tokens():
    rec = _rec()
    st = _Stream(rec, LoadConfig(url="x"), [])
    tool = {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ""}}]},
            }
        ]
    }
    st.feed(b"data: " + json.dumps(tool).encode() + b"\n\n", 5.0)
    assert rec.first_content_t == 5.0
    # vLLM continuous usage: a burst of 3 tokens in one chunk is counted as 3
    for t, ct in ((6.0, 4), (7.0, 7)):
        ev = {
            "choices": [{"index": 0, "delta": {"content": "x"}}],
            "usage": {"completion_tokens": ct},
        }
        st.feed(b"data: " + json.dumps(ev).encode() + b"\n\n", t)
    assert [c.tokens_in_chunk for c in st.chunks] == [1, 3, 3]
    assert st.token_source == "usage"


def test_completions_format_and_tokenizer_fallback():
    rec = _rec()
    st = _Stream(rec, LoadConfig(url="x", count_tokens=lambda s: len(s.split())), [])
    st.feed(
        b'data: {"choices":[{"index":0,"text":" a b c"}]}\n\ndata: {"choices":[{"index":0,"text":" d","finish_reason":"length"}]}\n\n',
        1.0,
    )
    assert [c.tokens_in_chunk for c in st.chunks] == [3, 1]
    assert rec.finish_reason == "length"


def test_quantile_is_nearest_rank():
    xs = list(range(1, 101))
    assert quantile(xs, 0.99) == 99 and quantile(xs, 0.5) == 50 and quantile([], 0.5) is None


# -- against the test server ---------------------------------------------------------------
def test_open_loop_timing_matches_the_server_timetable():
    """TTFT and chunk gaps against a server with a known timetable; clock error via t_server."""
    errors: list[float] = []

    def on_event(rid, t, obj):
        if "t_server" in obj:
            errors.append(t - obj["t_server"])

    with TestServer(ServerConfig(ttft_s=0.05, itl_s=0.01)) as srv:
        res = run_schedule(sched(10, gap=0.02, max_tokens=5), cfg(srv.url, on_event=on_event))
    recs = res.records
    assert [r.status for r in recs] == ["ok"] * 10
    for r in recs:
        ttft = r.first_content_t - r.sent_t
        assert 0.05 <= ttft < 0.09, ttft
        assert r.output_tokens == 5 and r.chunks == 5 and r.finish_reason == "length"
        assert r.output_sha256 is not None and r.prompt_tokens == 1
    gaps = sorted(
        b.t - a.t
        for a, b in zip(res.chunks, res.chunks[1:], strict=False)
        if a.request_id == b.request_id
    )
    assert 0.009 < gaps[len(gaps) // 2] < 0.02
    # the server stamps each chunk on the shared monotonic clock: client-side error is small
    assert errors and 0 <= quantile(errors, 0.5) < 0.005
    # open loop: sends follow the schedule, not the previous request's completion
    sends = [r.sent_t - recs[0].sent_t for r in recs]
    assert all(abs(s - 0.02 * i) < 0.01 for i, s in enumerate(sends)), sends
    assert res.summary.trustworthy and res.summary.dispatch_lag_p99_s < 0.01


def test_every_request_accounted_for_timeouts_rejections_errors_cancellations():
    """A mixed burst: forced timeouts (hang), 429s (tiny queue), 500s, client cancellations."""
    kinds = ["[[hang]]", "[[error]]", "ok", "ok", "ok"]
    items = []
    for i in range(40):
        kind = kinds[i % len(kinds)]
        content = "hi" if kind == "ok" else kind
        items.append(
            ScheduledRequest(
                i,
                0.005 * i,
                "burst",
                "g",
                f"p{i}",
                [{"role": "user", "content": content}],
                max_tokens=8,
            )
        )
    seen = []
    lock = threading.Lock()

    def sink(rec, chunks):
        with lock:
            seen.append(rec.request_id)

    with TestServer(ServerConfig(max_queue=6, itl_s=0.01)) as srv:
        res = run_schedule(items, cfg(srv.url, timeout_s=0.4, cancel_fraction=0.3, seed=1), sink)
        server_requests = srv.stats.requests
    recs = res.records
    counts = res.summary.status_counts
    assert len(recs) == 40 and sorted(seen) == sorted(request_id(r) for r in items)
    assert all(r.status in ("ok", "timeout", "rejected", "error", "cancelled") for r in recs)
    assert sum(counts.values()) == 40 and counts["not_sent"] == 0
    assert counts["rejected"] > 0 and all(
        r.http_status == 429 for r in recs if r.status == "rejected"
    )
    assert counts["timeout"] > 0 and counts["cancelled"] > 0 and counts["ok"] > 0
    assert {r.http_status for r in recs if r.status == "error"} == {500}
    for r, req in zip(recs, items, strict=True):
        assert r.sent_t is not None and r.done_t is not None and r.done_t >= r.sent_t
        if "[[hang]]" in req.messages[0]["content"] and r.status != "rejected":
            assert r.status == "timeout" and "client timeout" in r.error
    assert server_requests == 40  # all were really sent


def test_deadlines_enforced_and_recorded():
    items = sched(3, content="[[sleep:0.5]]", deadline_s=0.1)
    with TestServer() as srv:
        rec = run_schedule(items, cfg(srv.url)).records
        enforced = run_schedule(items, cfg(srv.url, enforce_deadlines=True)).records
    assert {r.status for r in rec} == {"ok"} and rec[0].deadline_s == 0.1
    assert {r.status for r in enforced} == {"timeout"} and "deadline" in enforced[0].error
    assert all(r.done_t - r.sent_t < 0.3 for r in enforced)


def test_phases_warmup_cold_start_and_concurrency_cap():
    warm = sched(2, phase="warmup", warmup=True)
    main = sched(12, gap=0.0, phase="peak", content="[[sleep:0.05]]")
    with TestServer() as srv:
        res = run_schedule(warm + main, cfg(srv.url, max_concurrency=3, cold_start_requests=4))
    recs = res.records
    assert [r.warmup for r in recs] == [True, True] + [False] * 12
    assert [r.cold_start for r in recs] == [False, False] + [True] * 4 + [False] * 8
    assert res.summary.max_in_flight <= 3 and res.summary.concurrency_cap == 3
    # the warm-up phase drained before the peak phase began
    assert max(r.done_t for r in recs[:2]) <= min(r.sent_t for r in recs[2:])
    assert all(r.status == "ok" for r in recs)
    # the cap's waits show in the send lag, not in the generator's own dispatch lag
    assert res.summary.send_lag_p99_s > 0.05 and res.summary.trustworthy


def test_lagging_generator_is_flagged_untrustworthy():
    def block(rid, t, obj):
        time.sleep(0.02)  # a stalled event loop: sends go out late

    with TestServer() as srv:
        res = run_schedule(sched(10, gap=0.005, max_tokens=2), cfg(srv.url, on_event=block))
    assert not res.summary.trustworthy
    assert "dispatch lag" in res.summary.reasons[0]
    assert all(r.status == "ok" for r in res.records)


def test_stop_keeps_records_and_marks_the_rest():
    items = sched(30, gap=0.05, content="[[sleep:0.3]]")
    with TestServer() as srv:
        runner = LoadRunner(items, cfg(srv.url))
        threading.Timer(0.6, runner.stop, args=("test stop",)).start()
        res = runner.run()
    counts = res.summary.status_counts
    assert len(res.records) == 30 and sum(counts.values()) == 30
    assert counts["ok"] >= 3 and counts["not_sent"] >= 15
    assert counts["error"] >= 1  # in flight at the stop (not a user interrupt)
    assert res.summary.stop_reason == "test stop" and not res.summary.trustworthy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(url: str, proc: subprocess.Popen) -> None:
    import httpx

    for _ in range(200):
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            if httpx.get(url + "/health", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError("server did not become healthy")


def test_server_killed_mid_run():
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specpilot.loadgen.testserver",
            "--port",
            str(port),
            "--itl",
            "0.05",
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_health(url, proc)
        items = sched(60, gap=0.05, max_tokens=10)  # 3 s of arrivals; each request ~0.5 s
        threading.Timer(1.0, proc.kill).start()
        res = run_schedule(items, cfg(url, abort_after_connect_errors=5))
    finally:
        proc.kill()
        proc.wait()
    recs = res.records
    statuses = [r.status for r in recs]
    assert len(recs) == 60 and set(statuses) <= {"ok", "error", "not_sent"}
    first_bad = statuses.index("error")
    assert statuses[:first_bad] == ["ok"] * first_bad and first_bad >= 10  # before the kill
    assert all(s != "ok" for s in statuses[first_bad:])  # nothing after the kill succeeded
    assert "not_sent" in statuses and "aborted" in res.summary.stop_reason
    # a request cut mid-stream keeps the chunks that arrived before the kill
    cut = [r for r in recs if r.status == "error" and r.chunks > 0]
    assert cut and all(r.first_content_t is not None for r in cut)


def test_ctrl_c_stops_cleanly(tmp_path):
    """SIGINT to a real process: it exits 0 with every request recorded."""
    script = tmp_path / "run.py"
    out = tmp_path / "out.json"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys
            from specpilot.loadgen import LoadConfig, run_schedule
            from specpilot.loadgen.testserver import TestServer, ServerConfig
            from specpilot.records import ScheduledRequest
            items = [ScheduledRequest(i, i * 0.05, "p", "g", "x", [{{"role": "user", "content": "[[sleep:1]]"}}], 4)
                     for i in range(100)]
            with TestServer() as srv:
                print("ready", flush=True)
                res = run_schedule(items, LoadConfig(url=srv.url, progress=False))
            json.dump(res.summary.to_dict(), open({str(out)!r}, "w"))
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(20) == 0
    proc.stdout.close()
    summary = json.loads(out.read_text())
    c = summary["status_counts"]
    assert summary["interrupted"] and sum(c.values()) == 100
    assert c["ok"] >= 5 and c["cancelled"] >= 10 and c["not_sent"] >= 50


def test_progress_quiet_without_tty(capfd):
    with TestServer() as srv:
        run_schedule(sched(3), LoadConfig(url=srv.url))
    assert capfd.readouterr().err == ""
