"""Slow clients are cut, slow answers are not: ``serve.transport.TimedH11Protocol`` behind a real
uvicorn server on loopback (a small Starlette app; the deadline set to 0.5 s)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from specpilot.backends.process import free_port
from specpilot.serve.transport import timed_protocol


async def echo(request: Request) -> PlainTextResponse:
    body = await request.body()
    if request.query_params.get("slow"):
        await asyncio.sleep(1.2)  # a slow answer, longer than the read deadline
    return PlainTextResponse(f"got {len(body)}")


@pytest.fixture(scope="module")
def server():
    port = free_port()
    app = Starlette(routes=[Route("/echo", echo, methods=["POST"])])
    cfg = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                         http=timed_protocol(0.5), timeout_keep_alive=5)  # fmt: skip
    srv = uvicorn.Server(cfg)
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield port
    srv.should_exit = True
    t.join(10)


def _closed_after(sock: socket.socket, limit_s: float) -> float | None:
    """Seconds until the server closes ``sock`` (None: still open after ``limit_s``)."""
    sock.settimeout(limit_s)
    t0 = time.monotonic()
    try:
        data = sock.recv(4096)
    except TimeoutError:
        return None
    return time.monotonic() - t0 if data == b"" or data.startswith(b"HTTP/1.1 4") else None


def _request(body: bytes, path: str = "/echo") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def _reply(sock: socket.socket) -> bytes:
    """One whole HTTP response (headers, then content-length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    n = int(
        next(
            h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")
        )
    )
    while len(body) < n:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


def test_half_sent_headers_are_cut_at_the_deadline(server):
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n")  # never the blank line
        took = _closed_after(s, 3.0)
    assert took is not None and took < 2.0, took


def test_a_slow_body_is_cut_at_the_deadline(server):
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        took = _closed_after(s, 3.0)
    assert took is not None and took < 2.0, took


def test_whole_requests_keep_alive_and_slow_answers_are_not_cut(server):
    with socket.create_connection(("127.0.0.1", server)) as s:
        s.settimeout(5)
        for body in (b"abc", b"defgh"):  # two requests on one connection, 0.7 s apart
            s.sendall(_request(body))
            reply = _reply(s)
            assert reply.startswith(b"HTTP/1.1 200") and f"got {len(body)}".encode() in reply
            time.sleep(0.7)  # idle longer than the read deadline: keep-alive's business
        s.sendall(_request(b"z", "/echo?slow=1"))  # the answer takes 1.2 s > 0.5 s
        reply = _reply(s)
        assert reply.startswith(b"HTTP/1.1 200") and b"got 1" in reply
