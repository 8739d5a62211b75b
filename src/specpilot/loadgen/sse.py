"""The SSE parser of the load generator: OpenAI stream events -> chunk timings and text.

Why not ``httpx-sse``: a chunk's timestamp must be the time its bytes arrived. This parser is
fed one network read at a time, stamped once (``time.perf_counter()``) *before* any parsing,
so every event of that read gets that read's timestamp: a burst that arrived together has gaps
of exactly 0, and the cost of parsing earlier events never shifts later ones. An event iterator
such as ``httpx-sse``'s ``aiter_sse`` yields events after decoding lines, so stamping at yield
time would add parse time and turn a burst into small fake gaps (what a speculative server's
multi-token chunks look like is the thing we measure).

    >>> from specpilot.records import RequestRecord
    >>> rec = RequestRecord("r", "a", "p", "g", "p-000000", 0.0, "")
    >>> st = SseStream(rec, [])
    >>> st.feed(b'data: {"choices":[{"delta":{"content":"Hi"}}]}\\n\\ndata: [DONE]\\n\\n', 1.5)
    >>> st.done, rec.first_content_t, st.chunks[0].tokens_in_chunk
    (True, 1.5, 1)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from specpilot.records import ChunkTiming, RequestRecord

EXTRAS_KEYS = ("id", "usage", "metrics", "timings", "meta_info")  # what engine parsers read


class SseStream:
    """Parses SSE bytes as they arrive into ``rec`` (first content, chunks, finish reason).

    ``extras`` collects the last value of each top-level key an engine parser may need
    (``usage``, ``metrics``, ``timings``, ``meta_info``, ``id``), merged across events: vLLM and
    the builtin server put ``metrics`` and ``usage`` in different final chunks.
    """

    def __init__(
        self,
        rec: RequestRecord,
        chunks: list[ChunkTiming],
        count_tokens: Callable[[str], int] | None = None,
        on_event: Callable[[str, float, dict[str, Any]], None] | None = None,
    ) -> None:
        self.rec = rec
        self.chunks = chunks
        self.count_tokens = count_tokens
        self.on_event = on_event
        self.buf = b""
        self.text: list[str] = []
        self.done = False
        self.last_ct = 0
        self.usage: dict[str, Any] | None = None
        self.extras: dict[str, Any] = {}
        self.error: str | None = None
        self.token_source = "chunks"

    def feed(self, data: bytes, t: float) -> None:
        if b"\r" in data or self.buf.endswith(b"\r"):
            data = (self.buf + data).replace(b"\r\n", b"\n")
            self.buf = b""
        buf = self.buf + data
        while True:
            i = buf.find(b"\n\n")
            if i < 0:
                break
            raw, buf = buf[:i], buf[i + 2 :]
            payload = b"\n".join(
                line[5:].lstrip(b" ") for line in raw.split(b"\n") if line.startswith(b"data:")
            )
            if payload:
                self.event(payload, t)
        self.buf = buf

    def event(self, payload: bytes, t: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self.error = f"unparseable event: {payload[:120]!r}"
            return
        if not isinstance(obj, dict):
            return
        rec = self.rec
        if self.on_event is not None:
            self.on_event(rec.request_id, t, obj)
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            self.error = str(err.get("message", err) if isinstance(err, dict) else err)[:500]
            return
        for key in EXTRAS_KEYS:
            if obj.get(key) is not None:
                self.extras[key] = obj[key]
        usage = obj.get("usage")
        ct = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if usage:
            self.usage = usage
        text, useful = self._content(obj)
        if not (useful or text):
            return
        self._chunk(text, ct, t)

    def _content(self, obj: dict[str, Any]) -> tuple[str, bool]:
        """The event's text (tool-call names and arguments included) and whether it is content."""
        text = ""
        useful = False
        for ch in obj.get("choices") or ():
            delta = ch.get("delta")
            if delta is not None:  # chat
                piece = delta.get("content")
                if piece:
                    text += piece
                calls = delta.get("tool_calls")
                if calls:
                    useful = True
                    for c in calls:
                        fn = c.get("function") or {}
                        text += str(fn.get("name") or "") + str(fn.get("arguments") or "")
            else:  # completions
                piece = ch.get("text")
                if piece:
                    text += piece
            if ch.get("finish_reason"):
                self.rec.finish_reason = ch["finish_reason"]
        return text, useful

    def _chunk(self, text: str, ct: Any, t: float) -> None:
        rec = self.rec
        if ct is not None:
            n = int(ct) - self.last_ct
            self.last_ct = int(ct)
            self.token_source = "usage"
        elif self.count_tokens is not None:
            n = self.count_tokens(text) if text else 1
            self.token_source = "tokenizer"
        else:
            n = 1
        if ct is None:
            self.last_ct += n  # so that usage counts arriving later continue from here
        if rec.first_content_t is None:
            rec.first_content_t = t
        rec.chunks += 1
        self.text.append(text)
        self.chunks.append(ChunkTiming(rec.request_id, t, n, rec.run_id, len(self.chunks)))
