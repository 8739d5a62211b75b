"""The request body guard in front of every route: its size and its JSON nesting depth.

:class:`BodyGuard` reads each request body as it streams in, counting bytes: past
``max_bytes`` it stops reading and answers 413 (by the Content-Length at once when there is
one; a chunked body has none). A body within the limit is scanned once for its JSON nesting
depth: deeper than ``max_depth`` is a 400 naming the depth found and the limit. One check for
every route and field (tools, messages, response_format, extensions nobody reads), so nothing
downstream (JSON decoding, pydantic validation and serialization, chat templates) ever sees a
value deep enough to hit its own recursion limit, which used to be a 500. The body is then
handed to the app unchanged.

    >>> json_depth(b'{"tools": [{"parameters": {"type": "object"}}]}')
    4
    >>> json_depth(b'["[[[ brackets in strings do not count"]')
    1
"""

from __future__ import annotations

import re

import numpy as np
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specpilot.serve.protocol import error_body

# Far deeper than any real request (a tool schema 60 objects deep), far below where pydantic's
# serializer gives up (~250 levels) or Python's recursion limit (~1000).
MAX_JSON_DEPTH = 128
# A JSON string, escapes included (the unrolled loop: linear, no backtracking).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(body: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (0: a scalar or nothing).

    Brackets are counted outside strings, in C (regex, translate, numpy), so a 4 MB body costs
    milliseconds and no recursion. Invalid JSON gets a number too; the parser reports it.
    """
    skeleton = _STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    if not skeleton:
        return 0
    a = np.frombuffer(skeleton, dtype=np.uint8)
    steps = np.where((a == ord("[")) | (a == ord("{")), 1, -1)
    return max(0, int(np.cumsum(steps).max()))


class BodyGuard:
    """ASGI middleware: 413 for a body over ``max_bytes``, 400 for one nested past ``max_depth``."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.app = app
        self.max_bytes, self.max_depth = max_bytes, max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        try:
            body = await self._read(receive)
        except _ClientGone:
            return  # nobody to answer
        if body is None:
            await self._too_large(scope, receive, send)
            return
        depth = json_depth(body)
        if depth > self.max_depth:
            await self._too_deep(depth, scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it is past ``max_bytes`` (the rest is not read)."""
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise _ClientGone
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = error_body(
            f"the request body is over the server's limit of {self.max_bytes} bytes: send a "
            "shorter prompt (the model's context is far smaller)",
            code="request_too_large",
        )
        await JSONResponse(body, status_code=413)(scope, receive, send)

    async def _too_deep(self, depth: int, scope: Scope, receive: Receive, send: Send) -> None:
        body = error_body(
            f"the request body nests arrays and objects {depth} levels deep, more than the "
            f"server's limit of {self.max_depth}: flatten it (a tool schema or message content "
            f"at most {self.max_depth} levels deep, counting the request object itself)",
            code="json_too_deep",
        )
        await JSONResponse(body, status_code=400)(scope, receive, send)


class _ClientGone(Exception):
    """The client disconnected before its body was in."""


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the client's own messages
    (a disconnect while the response streams)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
