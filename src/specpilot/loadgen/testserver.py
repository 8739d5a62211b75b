"""A minimal OpenAI-compatible streaming server for testing and benchmarking the load generator.

It speaks just enough HTTP/1.1 (keep-alive, chunked SSE) to be fast on one core, streams
made-up tokens on a fixed timetable, and can misbehave on request: a queue limit that answers
429, a hang, a slow first token, an HTTP 500, tool-call deltas. Every chunk carries the
server's ``time.perf_counter()`` (``"t_server"``): on Linux that clock is CLOCK_MONOTONIC,
shared by all processes, so a client on the same machine can measure its own timing error.

    $ python -m specpilot.loadgen.testserver --port 8123 --ttft 0.05 --itl 0.01 &
    $ curl -N localhost:8123/v1/chat/completions -d '{"messages":[{"role":"user",
    ...   "content":"hi"}],"max_tokens":4,"stream":true}'

In-process (tests): ``with TestServer(TestServerConfig(max_queue=2)) as srv: srv.url``.

Directives in the last message's content change one request's behaviour:
``[[hang]]`` never answers, ``[[sleep:S]]`` waits S seconds before the first token,
``[[error]]`` answers 500, ``[[tool]]`` streams a tool call instead of text, ``[[tokens:N]]``
streams N tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

_DIRECTIVE = re.compile(r"\[\[(\w+)(?::([\d.]+))?\]\]")


@dataclass
class TestServerConfig:
    """How the fake engine behaves. Times in seconds; 0 means "as fast as possible"."""

    __test__ = False  # not a pytest test class

    host: str = "127.0.0.1"
    port: int = 0
    ttft_s: float = 0.0
    itl_s: float = 0.0
    output_tokens: int | None = None  # None: honour max_tokens (default 16)
    tokens_per_chunk: int = 1
    max_queue: int | None = None  # concurrent requests admitted; beyond it: 429
    reject_status: int = 429
    model: str = "specpilot-testserver"
    record: bool = False  # keep (arrival time, parsed body) of every completion request


@dataclass
class ServerStats:
    requests: int = 0
    rejected: int = 0
    completed: int = 0
    disconnected: int = 0
    active: int = 0
    tokens: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    received: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # cfg.record


def _directives(body: dict[str, Any]) -> dict[str, float | None]:
    msgs = body.get("messages")
    text = str(msgs[-1].get("content", "")) if msgs else str(body.get("prompt", ""))
    return {
        m.group(1): (float(m.group(2)) if m.group(2) else None) for m in _DIRECTIVE.finditer(text)
    }


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _Handler:
    def __init__(self, cfg: TestServerConfig) -> None:
        self.cfg = cfg
        self.stats = ServerStats()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length", "0"))
                raw = await reader.readexactly(n) if n else b""
                keep = await self.route(method, path.split("?", 1)[0], raw, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    break
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            asyncio.LimitOverrunError,
            asyncio.CancelledError,  # server shutdown: end quietly
            ValueError,
        ):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _simple(
        self, writer: asyncio.StreamWriter, status: int, obj: Any, ctype: str = "application/json"
    ) -> None:
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.stats.by_status[status] = self.stats.by_status.get(status, 0) + 1
        writer.write(
            b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (status, ctype.encode(), len(body), body)
        )

    async def route(self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter) -> bool:
        if method == "GET" and path == "/health":
            self._simple(writer, 200, {"status": "ok"})
            return True
        if method == "GET" and path == "/metrics":
            s = self.stats
            text = (
                f"testserver_requests_total {s.requests}\ntestserver_rejected_total {s.rejected}\n"
                f"testserver_completed_total {s.completed}\ntestserver_active {s.active}\n"
                f"testserver_tokens_total {s.tokens}\n"
            )
            self._simple(writer, 200, text.encode(), "text/plain; version=0.0.4")
            return True
        if method == "GET" and path == "/v1/models":
            self._simple(
                writer, 200, {"object": "list", "data": [{"id": self.cfg.model, "object": "model"}]}
            )
            return True
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            self._simple(writer, 404, {"error": {"message": f"no route {method} {path}"}})
            return True
        self.stats.requests += 1
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._simple(writer, 400, {"error": {"message": "invalid JSON"}})
            return True
        if self.cfg.record:
            self.stats.received.append((time.perf_counter(), body))
        if self.cfg.max_queue is not None and self.stats.active >= self.cfg.max_queue:
            self.stats.rejected += 1
            self._simple(
                writer,
                self.cfg.reject_status,
                {"error": {"message": "queue full", "type": "overloaded"}},
            )
            return True
        self.stats.active += 1
        try:
            return await self.generate(path, body, writer)
        finally:
            self.stats.active -= 1

    async def generate(self, path: str, body: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        d = _directives(body)
        if "hang" in d:
            await asyncio.sleep(3600)
        if "error" in d:
            self._simple(writer, 500, {"error": {"message": "forced error"}})
            return True
        reply = _Reply.of(self.cfg, path, body, d)
        if not body.get("stream"):
            await self._whole(reply, writer)
            return True
        return await self._stream(reply, writer)

    async def _whole(self, r: _Reply, writer: asyncio.StreamWriter) -> None:
        """Answer in one JSON body after the time the stream would have taken."""
        await asyncio.sleep(r.ttft_s + self.cfg.itl_s * max(r.n - 1, 0))
        text = " tok" * r.n
        choice: dict[str, Any] = (
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            if r.chat
            else {"index": 0, "text": text, "finish_reason": "length"}
        )
        self.stats.completed += 1
        self.stats.tokens += r.n
        self._simple(
            writer,
            200,
            {
                "id": "cmpl-test",
                "object": "chat.completion",
                "choices": [choice],
                "usage": r.usage(r.n),
            },
        )

    async def _stream(self, r: _Reply, writer: asyncio.StreamWriter) -> bool:
        """Stream the reply as chunked SSE on the configured timetable (first token after
        ``r.ttft_s``, then one chunk every ``itl_s``); False when the client went away."""
        cfg = self.cfg
        self.stats.by_status[200] = self.stats.by_status.get(200, 0) + 1
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        try:
            if r.chat:
                writer.write(r.event({"role": "assistant", "content": ""}, None, 0))
            if r.ttft_s:
                await writer.drain()
                await asyncio.sleep(r.ttft_s)
            sent = 0
            k = max(1, cfg.tokens_per_chunk)
            while sent < r.n:
                m = min(k, r.n - sent)
                sent += m
                writer.write(r.event(r.piece(m, sent), None, sent))
                if cfg.itl_s and sent < r.n:
                    await writer.drain()
                    await asyncio.sleep(cfg.itl_s)
            finish = "tool_calls" if r.tool else "length"
            writer.write(r.event({} if r.chat else "", finish, sent))
            if r.usage_final:
                writer.write(r.final_usage(sent))
            writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, RuntimeError):
            self.stats.disconnected += 1
            return False
        self.stats.completed += 1
        self.stats.tokens += r.n
        return True


@dataclass(frozen=True)
class _Reply:
    """What one completion request gets: ``n`` made-up tokens (a tool call's argument deltas
    with ``tool``), for the chat or the completions route, with usage as its stream options
    ask (``usage_each``: in every chunk; ``usage_final``: a last chunk of its own)."""

    n: int
    chat: bool
    tool: bool
    prompt_tokens: int
    ttft_s: float
    usage_each: bool
    usage_final: bool
    model: str

    @classmethod
    def of(
        cls, cfg: TestServerConfig, path: str, body: dict[str, Any], d: dict[str, float | None]
    ) -> _Reply:
        so = body.get("stream_options") or {}
        return cls(
            n=int(d.get("tokens") or cfg.output_tokens or body.get("max_tokens") or 16),
            chat=path.endswith("chat/completions"),
            tool="tool" in d,
            prompt_tokens=(
                sum(len(str(m.get("content", "")).split()) for m in body.get("messages", [])) or 1
            ),
            ttft_s=d.get("sleep") or cfg.ttft_s,
            usage_each=bool(so.get("continuous_usage_stats")),
            usage_final=bool(so.get("include_usage")),
            model=cfg.model,
        )

    @property
    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def usage(self, sent: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": sent,
            "total_tokens": self.prompt_tokens + sent,
        }

    def piece(self, m: int, sent: int) -> dict[str, object] | str:
        """The delta of a chunk of ``m`` tokens, ``sent`` in all so far."""
        if self.tool:
            args = json.dumps({"i": sent})
            return {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "f", "arguments": args},
                    }
                ]
            }
        return {"content": " tok" * m} if self.chat else " tok" * m

    def event(self, delta_or_text: dict[str, object] | str, finish: str | None, sent: int) -> bytes:
        """One SSE chunk, stamped with the server's clock (``t_server``)."""
        if self.chat:
            ch: dict[str, Any] = {"index": 0, "delta": delta_or_text, "finish_reason": finish}
        else:
            ch = {"index": 0, "text": delta_or_text, "finish_reason": finish}
        o: dict[str, Any] = {
            "id": "cmpl-test",
            "object": self.chunk_object,
            "model": self.model,
            "choices": [ch],
        }
        if self.usage_each:
            o["usage"] = self.usage(sent)
        o["t_server"] = time.perf_counter()
        return _chunk(b"data: " + json.dumps(o, separators=(",", ":")).encode() + b"\n\n")

    def final_usage(self, sent: int) -> bytes:
        """The usage-only chunk that ends a stream which asked for ``include_usage``."""
        final = {
            "id": "cmpl-test",
            "object": self.chunk_object,
            "model": self.model,
            "choices": [],
            "usage": self.usage(sent),
            "t_server": time.perf_counter(),
        }
        return _chunk(b"data: " + json.dumps(final).encode() + b"\n\n")


async def serve(
    cfg: TestServerConfig,
    ready: threading.Event | None = None,
    holder: dict[str, Any] | None = None,
) -> None:
    handler = _Handler(cfg)
    server = await asyncio.start_server(handler.handle, cfg.host, cfg.port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    if holder is not None:
        holder.update(
            port=port, stats=handler.stats, loop=asyncio.get_running_loop(), server=server
        )
    if ready is not None:
        ready.set()
    else:
        print(f"listening on http://{cfg.host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


class TestServer:
    """Runs the server on a background thread (its own event loop); for tests."""

    __test__ = False  # not a pytest test class

    def __init__(self, cfg: TestServerConfig | None = None) -> None:
        self.cfg = cfg or TestServerConfig()
        self._holder: dict[str, Any] = {}
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TestServer:
        ready = threading.Event()

        def run() -> None:
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                asyncio.run(serve(self.cfg, ready, self._holder))

        self._thread = threading.Thread(target=run, daemon=True, name="testserver")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("test server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop = self._holder.get("loop")
        server = self._holder.get("server")
        if loop is not None and server is not None:

            def stop_all() -> None:
                server.close()
                for task in asyncio.all_tasks(loop):  # the hung handlers too
                    task.cancel()

            loop.call_soon_threadsafe(stop_all)
        if self._thread is not None:
            self._thread.join(5)

    @property
    def port(self) -> int:
        return int(self._holder["port"])

    @property
    def url(self) -> str:
        return f"http://{self.cfg.host}:{self.port}"

    @property
    def stats(self) -> ServerStats:
        stats: ServerStats = self._holder["stats"]
        return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Instant OpenAI-compatible SSE test server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--ttft", type=float, default=0.0)
    ap.add_argument("--itl", type=float, default=0.0)
    ap.add_argument("--output-tokens", type=int, default=None)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--max-queue", type=int, default=None)
    a = ap.parse_args(argv)
    cfg = TestServerConfig(
        a.host, a.port, a.ttft, a.itl, a.output_tokens, a.tokens_per_chunk, a.max_queue
    )
    with contextlib.suppress(KeyboardInterrupt):
        try:
            import uvloop

            uvloop.run(serve(cfg))
        except ImportError:
            asyncio.run(serve(cfg))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
