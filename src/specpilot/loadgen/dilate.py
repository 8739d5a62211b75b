"""A time-dilating TCP proxy on loopback: plants a slowdown of known size in front of a server.

A pilot's validation arm must be found "slower by the planted size"; this makes that size
exact for any HTTP/1.1 engine (the builtin server, llama.cpp, vLLM) without touching it. Bytes
from the client go upstream at once; a chunk the upstream sent ``t`` seconds after the start of
the current request reaches the client ``t * (1 + f)`` seconds after that start. So every
latency the client measures (first byte, each SSE event, the end) is ``(1 + f)`` times the
direct one, up to the proxy's own overhead (about a millisecond).

Why dilation and not a hold per token: a stream's events are spaced by the inter-token gap, and
a fixed hold hides in those gaps instead of adding up. With a 100 ms first token and 100 tokens
20 ms apart (E2E 2.08 s), holding each event 5 ms forwards event i at ``max(t_i, out_{i-1}) + 5
ms = t_i + 5 ms``: the whole stream shifts by one hold, TTFT and E2E +5 ms (+0.2 %), every gap
unchanged, not the +0.5 s that 100 x 5 ms suggests. Dilating by f = 0.2 instead gives TTFT 120
ms, every gap 24 ms and E2E 2.496 s: +20 % on every measure, the size that was planted.

The start of a request (``t0``) is the first client bytes of a connection, or the first client
bytes after the previous response began: a keep-alive connection carries several requests in
turn and each is dilated from its own start, never the connection's (HTTP/1.1 clients do not
pipeline; a pipelined request would restart the clock of the response still streaming).
Either side closing closes both: what the upstream sent before it went still arrives on its
dilated schedule, then the close (also dilated); a client going away drops what is pending.
An upstream that refuses the connection gets the client's connection reset. Bytes pass
unchanged (the upstream sees the proxy's address in ``Host``; engines ignore it).

    >>> import time, httpx
    >>> from specpilot.loadgen.testserver import TestServer, TestServerConfig
    >>> body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    >>> with TestServer(TestServerConfig(ttft_s=0.1)) as srv, DilatingProxy(srv.url, 0.5) as px:
    ...     t = time.perf_counter()
    ...     status = httpx.post(px.url + "/v1/chat/completions", json=body).status_code
    ...     elapsed = time.perf_counter() - t
    >>> status, 0.15 <= elapsed < 0.4, px.stats().requests
    (200, True, 1)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from specpilot.errors import ConfigError

__all__ = ["DilatingProxy", "ProxyStats", "dilated_due"]

_READ_BYTES = 65536
_CONNECT_TIMEOUT_S = 10.0


def dilated_due(t0: float, t_arrival: float, factor: float) -> float:
    """When a chunk that arrived at ``t_arrival`` goes on: ``t0 + (t_arrival - t0) * (1 + f)``.

    >>> dilated_due(10.0, 10.5, 0.2)
    10.6
    """
    return t0 + (t_arrival - t0) * (1.0 + factor)


@dataclass
class ProxyStats:
    """Counts since start. bytes_up: client -> upstream; bytes_down: upstream -> client."""

    connections: int = 0
    requests: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    connect_failures: int = 0  # upstream connects that failed (their clients were closed)


def _upstream_address(upstream: str) -> tuple[str, int]:
    parts = urlsplit(upstream)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(
            f"dilating proxy upstream {upstream!r}: an http URL with a host is needed",
            fix="give it like http://127.0.0.1:8123 (TLS is not proxied)",
        )
    return parts.hostname, parts.port or 80


class _Connection:
    """One client connection and its upstream connection; dilates upstream -> client."""

    def __init__(self, factor: float, stats: ProxyStats, client_w: asyncio.StreamWriter) -> None:
        self.factor = factor
        self.stats = stats
        self.client_w = client_w
        self.t0: float | None = None
        self.response_began = False
        # (due, bytes) in arrival order; b"" is the upstream's end, due like any chunk
        self.pending: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def run(
        self, client_r: asyncio.StreamReader, up_r: asyncio.StreamReader, up_w: asyncio.StreamWriter
    ) -> None:
        tasks = [
            asyncio.create_task(self.forward_up(client_r, up_w)),
            asyncio.create_task(self.read_down(up_r)),
            asyncio.create_task(self.write_down()),
        ]
        try:
            # the client going away, or the last delayed byte (upstream end) delivered, ends all
            await asyncio.wait([tasks[0], tasks[2]], return_when=asyncio.FIRST_COMPLETED)
        finally:
            _close(up_w)  # before any await: a second cancel (the loop ending) skips the rest
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def forward_up(self, client_r: asyncio.StreamReader, up_w: asyncio.StreamWriter) -> None:
        stats = self.stats
        with contextlib.suppress(ConnectionError):
            while data := await client_r.read(_READ_BYTES):
                if self.t0 is None or self.response_began:
                    self.t0, self.response_began = time.perf_counter(), False
                    stats.requests += 1
                stats.bytes_up += len(data)
                up_w.write(data)
                await up_w.drain()

    async def read_down(self, up_r: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):  # a reset ends the stream like a close
            while data := await up_r.read(_READ_BYTES):
                self._enqueue(data)
        self._enqueue(b"")

    def _enqueue(self, data: bytes) -> None:
        # stamped before anything else: the dilation is of the upstream's timing, not ours
        t = time.perf_counter()
        due = t if self.t0 is None else dilated_due(self.t0, t, self.factor)
        self.response_began = True
        self.pending.put_nowait((due, data))

    async def write_down(self) -> None:
        w = self.client_w
        with contextlib.suppress(ConnectionError):
            while True:
                due, data = await self.pending.get()
                if (delay := due - time.perf_counter()) > 0:
                    await asyncio.sleep(delay)
                if not data:
                    return
                self.stats.bytes_down += len(data)  # first: a caller may read it on arrival
                w.write(data)
                await w.drain()


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()


class DilatingProxy:
    """Proxies ``host:port`` to ``upstream`` with every response's timing dilated by ``1 + f``.

    Runs its own event loop on a daemon thread (callers are synchronous): ``start()``/``stop()``
    or ``with DilatingProxy(url, 0.2) as proxy: ... proxy.url``. ``port=0`` picks a free port.
    """

    def __init__(
        self, upstream: str, factor: float, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        if not factor >= 0:  # also NaN
            raise ConfigError(
                f"dilating proxy factor {factor}: must be >= 0", fix="0.2 plants +20 %"
            )
        self.upstream = upstream
        self.upstream_host, self.upstream_port = _upstream_address(upstream)
        self.factor = float(factor)
        self.host = host
        self._port = port
        self._stats = ProxyStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> DilatingProxy:
        if self._thread is not None:
            raise RuntimeError("dilating proxy already started")
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                asyncio.run(self._serve(ready, failed))

        self._thread = threading.Thread(target=run, daemon=True, name="dilating-proxy")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("dilating proxy did not start")
        if failed:
            raise failed[0]
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is not None and server is not None:

            def stop_all() -> None:
                server.close()
                for task in asyncio.all_tasks(loop):  # open connections too
                    task.cancel()

            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop_all)
        if self._thread is not None:
            self._thread.join(5)
        self._thread = self._loop = self._server = None

    def __enter__(self) -> DilatingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what callers read -----------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    def stats(self) -> ProxyStats:
        """A copy of the counts so far."""
        return dataclasses.replace(self._stats)

    # -- the loop --------------------------------------------------------------------------
    async def _serve(self, ready: threading.Event, failed: list[BaseException]) -> None:
        try:
            server = await asyncio.start_server(self._handle, self.host, self._port, backlog=4096)
        except OSError as exc:
            failed.append(exc)
            ready.set()
            return
        self._port = int(server.sockets[0].getsockname()[1])
        self._loop, self._server = asyncio.get_running_loop(), server
        ready.set()
        async with server:
            await server.serve_forever()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._stats.connections += 1
        try:
            try:
                up_r, up_w = await asyncio.wait_for(
                    asyncio.open_connection(self.upstream_host, self.upstream_port),
                    _CONNECT_TIMEOUT_S,
                )
            except OSError:  # refused, unreachable, timed out
                # The client's connection is reset: it gets an error at once, as it would
                # without the proxy (there a connect error; here, accepted first, a read error).
                self._stats.connect_failures += 1
                client_w.transport.abort()
                return
            await _Connection(self.factor, self._stats, client_w).run(client_r, up_r, up_w)
        except asyncio.CancelledError:
            pass  # the proxy stopping: close quietly
        finally:
            _close(client_w)
