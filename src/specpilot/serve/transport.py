"""HTTP transport limits uvicorn lacks: a client must deliver a whole request in time.

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but never a client that
sends its headers or body slowly: 150 half-open header connections stayed open 30 s, a slow
body was never cut (issue 22, "slowloris"). :class:`TimedH11Protocol` starts a clock when a
connection opens and at the first byte of each next request, and closes the connection when
the request (headers and body) is not complete within ``read_timeout_s``. Requests in flight
are not affected once they are received: generation time is the scheduler's business.

    >>> TimedH11Protocol.read_timeout_s
    10.0
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for receiving each request."""

    read_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._read_timer: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(self.read_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        timer = getattr(self, "_read_timer", None)
        if timer is not None:
            timer.cancel()
        self._read_timer = None

    def _timed_out(self) -> None:
        self._read_timer = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.logger.info(
                "closing a connection that sent no whole request in %.0f s", self.read_timeout_s
            )
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._read_timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            self._disarm()  # the request is in (or the connection is done)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def timed_protocol(read_timeout_s: float) -> Any:
    """A ``TimedH11Protocol`` subclass with this deadline (what ``uvicorn.run(http=...)`` takes)."""
    return type("TimedH11Protocol", (TimedH11Protocol,), {"read_timeout_s": float(read_timeout_s)})
