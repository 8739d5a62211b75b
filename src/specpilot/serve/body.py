"""The request body guard in front of every route: its size, its encoding, and how deep and
how large a JSON value it holds.

:class:`BodyGuard` reads each request body as it streams in, counting bytes: past
``max_bytes`` it stops reading and answers 413 (by the Content-Length at once when there is
one; a chunked body has none). A body within the limit is then read as the JSON parser will
read it (:func:`as_utf8`: UTF-8, or UTF-16/32 told by its first bytes as ``json.loads`` and RFC
8259 do, turned into UTF-8, which is what vLLM's FastAPI server accepts too) and measured in one
linear pass (:func:`json_shape`): nested past ``max_depth``, or holding more than
``max_values`` values, is a 400 naming the figure and the limit. One check for every route and
field (tools, messages, response_format, extensions nobody reads), so nothing downstream (JSON
decoding, pydantic validation and serialization, chat templates) ever sees a value deep enough
to hit its own recursion limit (that used to be a 500) or large enough to hold the event loop
for long (``json.loads`` keeps the interpreter while it builds every value). The app gets the
UTF-8 body the guard measured, so the guard and the parser cannot disagree about it.

A body past :data:`INLINE_BYTES` is checked in a worker thread (numpy lets go of the
interpreter while it scans), so a large hostile body never holds the event loop: ``/health``
and running streams go on. A smaller one costs well under a millisecond inline.

    >>> json_depth(b'{"tools": [{"parameters": {"type": "object"}}]}')
    4
    >>> json_shape(b'["[[[ brackets, commas in strings do not count", [1, 2]]')
    Shape(depth=2, values=5)
    >>> as_utf8('["\\u2200"]'.encode("utf-16-le")) == '["\\u2200"]'.encode()
    True
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import anyio.to_thread
import numpy as np
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specpilot.serve.protocol import error_body

__all__ = [
    "INLINE_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "BodyEncodingError",
    "BodyGuard",
    "CheckedBody",
    "Shape",
    "as_utf8",
    "check_body",
    "json_depth",
    "json_shape",
]

# Far deeper than any real request (a tool schema 60 objects deep), far below where pydantic's
# serializer gives up (~250 levels) or Python's recursion limit (~1000).
MAX_JSON_DEPTH = 128
# Far more values than a request the context can hold has (messages, content parts, tool-schema
# nodes, prompt token ids); json.loads builds this many in about 5 ms, where 4 MiB of "[]," took
# 0.2-0.9 s, all of it holding the event loop (benchmarks/body_guard.py).
MAX_JSON_VALUES = 1 << 16
# Bodies up to this size are checked on the event loop: the worst case costs about 12 ms per MB
# (benchmarks/body_guard.py), so 32 KiB stays under half a millisecond.
INLINE_BYTES = 32 << 10
# The scan's unit: its arrays (a few bytes per body byte) stay this size, whatever the body.
_CHUNK = 1 << 18
_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
_STEP = np.zeros(256, np.int8)  # +1 opens an array or object, -1 closes one
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


@dataclass(frozen=True)
class Shape:
    """What the parser would build from a body: how deep it nests, and how many values."""

    depth: int  # arrays and objects inside one another (0: a scalar or nothing)
    values: int  # 1 + the arrays, objects and commas outside strings: at least the values


def json_shape(body: bytes, *, chunk: int = _CHUNK) -> Shape:
    """The nesting depth and value count of a UTF-8 JSON text, in one linear pass.

    One vectorised pass per chunk, with no data-dependent loop or backtracking, so the cost
    is linear in the body on every input (unterminated strings, runs of escapes, brackets in
    strings): a quote is real unless an odd run of backslashes ends just before it; bytes
    between a real quote and the next are in a string; brackets outside strings step the
    depth, and they and the commas outside strings count the values (each value but a
    container's first follows a comma). The state (in a string, the backslash run, the depth)
    carries across chunks (``chunk`` bytes each: the arrays stay that size, whatever the
    body).

    On valid JSON the depth is the parser's exactly and the count at least its values (object
    keys aside). On invalid JSON both are at least what the parser reaches before it fails: up
    to there the text is valid, and the scan reads it as the parser does. UTF-8 is the one
    encoding where this works on bytes: no byte of a multi-byte character is a quote, a
    backslash, a comma or a bracket.
    """
    a = np.frombuffer(body, np.uint8)
    depth = deepest = 0
    values = 1 if len(a) else 0
    in_string = False
    run = 0  # backslashes ending the previous chunk
    for start in range(0, len(a), chunk):
        c = a[start : start + chunk]
        quote, run = _real_quotes(c, run)
        # parity of the real quotes so far: True from an opening quote to the byte before its
        # closing one (uint8 wraps, its parity does not)
        inside = (np.cumsum(quote, dtype=np.uint8) & 1).view(bool)
        if in_string:
            inside = ~inside
        steps = _STEP[c]
        steps[inside] = 0
        level = np.cumsum(steps, dtype=np.int32)
        deepest = max(deepest, depth + int(level.max()))
        depth += int(level[-1])
        values += int(np.count_nonzero(steps == 1))
        values += int(np.count_nonzero((c == _COMMA) & ~inside))
        in_string = bool(inside[-1])
    return Shape(max(0, deepest), values)


def json_depth(body: bytes) -> int:
    """How deep the arrays and objects of a UTF-8 JSON text nest (:func:`json_shape`)."""
    return json_shape(body).depth


def _real_quotes(c: np.ndarray, run: int) -> tuple[np.ndarray, int]:
    """(the chunk's unescaped quotes as a mask, the backslashes that end the chunk), given the
    ``run`` of backslashes that ended the chunk before it."""
    quote = c == _QUOTE
    backslash = c == _BACKSLASH
    if not backslash.any():
        quote[0] &= run % 2 == 0  # only the carried run can escape one: the first byte
        return quote, 0
    idx = np.arange(len(c), dtype=np.int32)
    # the last byte at or before each position that is not a backslash (-1 - run: the carried
    # run stands just before the chunk)
    last = np.maximum.accumulate(np.where(backslash, np.int32(-1 - run), idx))
    at = np.flatnonzero(quote)
    before = np.where(at > 0, at - 1 - last[np.maximum(at - 1, 0)], run)
    quote[at[(before & 1) == 1]] = False
    return quote, int(len(c) - 1 - last[-1])


class BodyEncodingError(ValueError):
    """The body's first bytes say UTF-16 or UTF-32 (as the JSON parser reads them), but the
    rest does not decode in that encoding."""

    def __init__(self, encoding: str, exc: UnicodeDecodeError) -> None:
        super().__init__(
            f"the request body reads as {encoding.upper()} by its first bytes (as JSON parsers "
            f"detect it, RFC 8259), but byte {exc.start} is not valid {encoding.upper()} "
            f"({exc.reason}): send the JSON as UTF-8"
        )
        self.encoding = encoding


def as_utf8(body: bytes) -> bytes:
    """The body as UTF-8, read as ``json.loads`` reads bytes: UTF-8 (a BOM allowed) stays as it
    is, UTF-16 or UTF-32 (by the pattern of zero bytes in the first four, RFC 4627 section 3,
    the same ``json.detect_encoding`` the parser uses) is decoded and re-encoded. Lone
    surrogates pass both ways, as the parser lets them (``surrogatepass``)."""
    encoding = json.detect_encoding(body)
    if encoding in ("utf-8", "utf-8-sig"):
        return body
    try:
        text = body.decode(encoding, "surrogatepass")
    except UnicodeDecodeError as exc:
        raise BodyEncodingError(encoding, exc) from None
    return text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class CheckedBody:
    """A body as the app will get it (UTF-8), and what the guard found wrong with it."""

    body: bytes
    problem: str | None = None  # None: the body passes
    code: str | None = None


def check_body(body: bytes, max_depth: int, max_values: int) -> CheckedBody:
    """The body in UTF-8, refused where its encoding is broken, it nests past ``max_depth`` or
    it holds more than ``max_values`` values (either costs the parser more than a request
    should, on the event loop: json.loads holds the interpreter throughout)."""
    try:
        utf8 = as_utf8(body)
    except BodyEncodingError as exc:
        return CheckedBody(body, str(exc), "invalid_encoding")
    # four counts bound both figures from above: most bodies need no scan
    opened = utf8.count(b"[") + utf8.count(b"{")
    if opened <= max_depth and 1 + opened + utf8.count(b",") <= max_values:
        return CheckedBody(utf8)
    shape = json_shape(utf8)
    if shape.depth > max_depth:
        return CheckedBody(utf8, _too_deep(shape.depth, max_depth), "json_too_deep")
    if shape.values > max_values:
        return CheckedBody(utf8, _too_many(shape.values, max_values), "json_too_many_values")
    return CheckedBody(utf8)


def _too_deep(depth: int, limit: int) -> str:
    return (
        f"the request body nests arrays and objects {depth} levels deep, more than the "
        f"server's limit of {limit}: flatten it (a tool schema or message content at most "
        f"{limit} levels deep, counting the request object itself)"
    )


def _too_many(values: int, limit: int) -> str:
    return (
        f"the request body holds {values} JSON values (arrays, objects and the items in "
        f"them), more than the server's limit of {limit}: send fewer messages, content parts, "
        "tool-schema nodes or prompt token ids (no prompt the model's context can hold needs "
        "that many)"
    )


class BodyGuard:
    """ASGI middleware: 413 for a body over ``max_bytes``; 400 for one that is neither UTF-8 nor
    the UTF-16/32 its first bytes say, nests past ``max_depth`` or holds over ``max_values``."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        max_depth: int = MAX_JSON_DEPTH,
        max_values: int = MAX_JSON_VALUES,
    ) -> None:
        self.app = app
        self.max_bytes, self.max_depth, self.max_values = max_bytes, max_depth, max_values

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
        limits = (self.max_depth, self.max_values)
        if len(body) > INLINE_BYTES:  # off the event loop: other requests go on meanwhile
            checked = await anyio.to_thread.run_sync(check_body, body, *limits)
        else:
            checked = check_body(body, *limits)
        if checked.problem is not None:
            await _refuse(400, checked.problem, checked.code, scope, receive, send)
            return
        if checked.body is not body:
            scope = {**scope, "headers": _with_length(scope, len(checked.body))}
        await self.app(scope, _replay(checked.body, receive), send)

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
        msg = (
            f"the request body is over the server's limit of {self.max_bytes} bytes: send a "
            "shorter prompt (the model's context is far smaller)"
        )
        await _refuse(413, msg, "request_too_large", scope, receive, send)


async def _refuse(
    status: int, message: str, code: str | None, scope: Scope, receive: Receive, send: Send
) -> None:
    await JSONResponse(error_body(message, code=code), status_code=status)(scope, receive, send)


def _with_length(scope: Scope, n: int) -> list[tuple[bytes, bytes]]:
    """The request's headers with Content-Length saying the re-encoded body's size."""
    kept = [(k, v) for k, v in scope.get("headers") or [] if k != b"content-length"]
    return [*kept, (b"content-length", str(n).encode())]


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
