"""The time-dilating proxy against the real SSE test server on loopback, measured by the load
generator itself: every latency through the proxy must be (1 + f) times the direct one."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from specpilot.errors import ConfigError
from specpilot.loadgen import LoadConfig, LoadResult, run_schedule
from specpilot.loadgen.dilate import DilatingProxy, dilated_due
from specpilot.loadgen.testserver import TestServer, TestServerConfig
from specpilot.records import ScheduledRequest

pytestmark = pytest.mark.timeout(60)

UPSTREAM = TestServerConfig(ttft_s=0.06, itl_s=0.015)


def tolerance(expected: float) -> float:
    """The proxy's overhead and the timing jitter of three event loops on two busy cores."""
    return 0.015 + 0.03 * expected


def schedule(n: int, gap: float) -> list[ScheduledRequest]:
    """Requests of different first-token waits and lengths, so that each has its own timing."""
    return [
        ScheduledRequest(
            index=i,
            send_t=i * gap,
            phase="p",
            group="g",
            prompt_id=f"p{i}",
            messages=[{"role": "user", "content": f"[[sleep:{0.04 + 0.02 * i:.2f}]] hi"}],
            max_tokens=3 + i,
        )
        for i in range(n)
    ]


Timings = dict[str, list[float]]  # per request: seconds from its send to each measured point


def run(url: str, sched: list[ScheduledRequest]) -> LoadResult:
    return run_schedule(sched, LoadConfig.build(url, progress=False, timeout_s=10.0))


def latencies(result: LoadResult) -> Timings:
    """Per request: TTFT, every content chunk's time since the send, E2E."""
    out: Timings = {}
    for rec in result.records:
        assert rec.status == "ok", rec.error
        assert rec.sent_t is not None and rec.first_content_t is not None and rec.done_t
        chunks = [c.t - rec.sent_t for c in result.chunks if c.request_id == rec.request_id]
        out[rec.request_id] = [rec.first_content_t - rec.sent_t, *chunks, rec.done_t - rec.sent_t]
    return out


def misses(direct: Timings, proxied: Timings, factor: float) -> list[str]:
    """Every measured point through the proxy that is not (1 + f) times the direct one."""
    assert direct.keys() == proxied.keys()
    out = []
    for rid, d in direct.items():
        assert len(d) == len(proxied[rid]), rid
        for i, (a, b) in enumerate(zip(d, proxied[rid], strict=True)):
            want = a * (1 + factor)
            if abs(b - want) > tolerance(want):
                out.append(f"{rid}[{i}]: direct {a:.4f}s, proxied {b:.4f}s, want {want:.4f}s")
    return out


def lower(best: Timings | None, new: Timings) -> Timings:
    if best is None:
        return new
    return {rid: [min(a, b) for a, b in zip(best[rid], new[rid], strict=True)] for rid in new}


def compare(measure: Callable[[str], Timings], factor: float) -> DilatingProxy:
    """Measures directly, then through a proxy (fresh each time); asserts dilation; returns the
    last proxy. The two cores are busy with other work, and a descheduled thread now and then
    delays one read by tens of ms. Such delays only ever add, so a miss measures both sides
    again, up to three times, and compares the element-wise minimum."""
    best_d: Timings | None = None
    best_p: Timings | None = None
    with TestServer(UPSTREAM) as srv:
        for _ in range(3):
            best_d = lower(best_d, measure(srv.url))
            with DilatingProxy(srv.url, factor) as proxy:
                best_p = lower(best_p, measure(proxy.url))
            if not (missed := misses(best_d, best_p, factor)):
                return proxy
    pytest.fail("\n".join(missed))


def scheduled(
    sched: list[ScheduledRequest], texts: list[list[str | None]] | None = None
) -> Callable[[str], Timings]:
    """A measure that runs ``sched`` with the load generator (keeping its texts)."""

    def measure(url: str) -> Timings:
        result = run(url, sched)
        if texts is not None:
            texts.append([r.output_text for r in result.records])
        return latencies(result)

    return measure


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the timing arithmetic ----------------------------------------------------------------------
def test_due_time_is_the_arrival_stretched_from_the_request_start():
    assert dilated_due(5.0, 5.0, 0.5) == 5.0
    assert dilated_due(5.0, 6.0, 0.5) == pytest.approx(6.5)
    assert dilated_due(5.0, 6.0, 0.0) == 6.0


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match=">= 0"):
        DilatingProxy("http://127.0.0.1:1", -0.1)
    with pytest.raises(ConfigError, match="http URL"):
        DilatingProxy("https://127.0.0.1:1", 0.2)


# -- streaming through the load generator ---------------------------------------------------
@pytest.mark.parametrize("factor", [0.2, 0.5])
def test_concurrent_streams_are_dilated_per_chunk(factor: float):
    """Overlapping requests (one connection each): TTFT, every chunk and E2E times (1 + f)."""
    proxy = compare(scheduled(schedule(5, gap=0.02)), factor)
    stats = proxy.stats()
    assert stats.connections == 5 and stats.requests == 5 and proxy.factor == factor
    assert stats.bytes_up > 0 and stats.bytes_down > 0 and stats.connect_failures == 0


def test_factor_zero_is_transparent():
    texts: list[list[str | None]] = []
    proxy = compare(scheduled(schedule(3, gap=0.02), texts), 0.0)
    assert proxy.stats().requests == 3
    assert texts[0] == texts[1] and texts[0][0]  # bytes passed on unchanged


# -- keep-alive, streaming and not, with a plain HTTP client ----------------------------------
def bodies() -> list[dict[str, object]]:
    """Streaming and non-streaming requests in turn, each with its own first-token wait."""
    return [
        {
            "messages": [{"role": "user", "content": f"[[sleep:{0.04 + 0.03 * i:.2f}]]"}],
            "max_tokens": 2 + i,
            "stream": i % 2 == 0,
        }
        for i in range(4)
    ]


def timed_requests(url: str) -> Timings:
    """Per request on one keep-alive connection (the load generator closes a stream's
    connection at [DONE], before the chunked body's end): seconds from the send to the
    response head, to each SSE event, to the end."""
    out = {}
    with httpx.Client(base_url=url, timeout=10.0) as client:
        for i, body in enumerate(bodies()):
            t = time.perf_counter()
            with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                assert resp.status_code == 200
                times = [time.perf_counter() - t]
                for data in resp.iter_bytes():
                    times += [time.perf_counter() - t] * data.count(b"data:")
            out[str(i)] = [*times, time.perf_counter() - t]
    # head, events (role, tokens, finish, [DONE]), end; a non-streaming body has no events
    assert [len(v) for v in out.values()] == [7, 2, 9, 2]
    return out


@pytest.mark.parametrize("factor", [0.2, 0.5])
def test_keep_alive_requests_are_each_dilated_from_their_own_start(factor: float):
    """Requests in turn on one connection, streaming and not: a delay carried over from the
    previous request (or counted from the connection's start) would put the later ones off."""
    proxy = compare(timed_requests, factor)
    assert proxy.stats().connections == 1 and proxy.stats().requests == 4


# -- the upstream going away -----------------------------------------------------------------
def test_no_upstream_is_an_error_for_the_client_as_without_the_proxy():
    url = f"http://127.0.0.1:{free_port()}"
    sched = schedule(2, gap=0.05)
    direct = run(url, sched)
    with DilatingProxy(url, 0.5) as proxy:
        t = time.perf_counter()
        proxied = run(proxy.url, sched)
        elapsed = time.perf_counter() - t
    assert [r.status for r in direct.records] == ["error", "error"]
    assert [r.status for r in proxied.records] == ["error", "error"], proxied.records
    assert elapsed < 2.0 and proxy.stats().connect_failures >= 2


def test_upstream_dying_mid_request_ends_the_client_request_with_an_error():
    """One request hangs before its head, one is mid-stream, when the upstream goes away (at
    the stream's first token)."""
    sched = schedule(2, gap=0.0)
    sched[0].messages = [{"role": "user", "content": "[[hang]]"}]
    sched[1].messages = [{"role": "user", "content": "[[tokens:200]]"}]
    srv = TestServer(UPSTREAM).__enter__()
    stopper = threading.Thread(target=srv.__exit__)

    def on_event(rid: str, t: float, obj: dict[str, Any]) -> None:
        if stopper.ident is None and obj["choices"][0]["delta"].get("content"):
            stopper.start()

    try:
        with DilatingProxy(srv.url, 0.5) as proxy:
            cfg = LoadConfig.build(proxy.url, progress=False, timeout_s=10.0, on_event=on_event)
            t = time.perf_counter()
            result = run_schedule(sched, cfg)
            elapsed = time.perf_counter() - t
    finally:
        stopper.join()
    assert [r.status for r in result.records] == ["error", "error"], result.records
    assert result.records[1].chunks > 0  # it was streaming when the upstream went
    assert elapsed < 2.0  # the dilated close, not the 10 s client timeout
