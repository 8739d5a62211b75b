"""Server-sent events: a request's engine events become OpenAI stream chunks.

Text is released only when it is final: the last ``max(len(stop)) - 1`` characters are held
back while a stop string could still complete, and an incomplete UTF-8 sequence (U+FFFD at the
end) waits for its next token, so the concatenated deltas equal the non-streamed text. With
tools on, a :class:`~specpilot.serve.toolcalls.ToolCallStream` turns the deltas into content
and tool-call pieces. The last chunk carries ``finish_reason`` (and ``metrics``), then an
optional usage chunk, then ``data: [DONE]``.

    >>> StreamingResponse(sse_events(ctx, queue), media_type="text/event-stream")  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from specpilot.engine.generate import TokenLogprob
from specpilot.engine.scheduler import FINISHED, TicketEvent
from specpilot.serve.responses import (
    OMIT,
    Omit,
    ReplyContext,
    call_json,
    chat_logprobs,
    completion_logprobs,
    ended_badly,
    envelope,
    stream_choice,
)
from specpilot.serve.toolcalls import ToolCallStream

DONE = "data: [DONE]\n\n"


def sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def safe_len(text: str, stops: tuple[str, ...]) -> int:
    """Characters of ``text`` that can be sent now (see the module docstring)."""
    n = len(text)
    if stops:
        n -= max(len(s) for s in stops) - 1
    while n > 0 and text[n - 1] == "\ufffd":
        n -= 1
    return max(n, 0)


class _Chunks:
    """One stream's state: text sent so far, tool-call parser, logprob text offset."""

    def __init__(self, c: ReplyContext) -> None:
        self.c = c
        self.parser = ToolCallStream() if c.tools_on else None
        self.n_calls = 0
        self.sent = 0
        self.lp_offset = 0
        self.n_tokens = 0

    def chunk(
        self,
        delta: dict[str, Any] | str,
        finish: str | None = None,
        lps: list[TokenLogprob] | None = None,
    ) -> dict[str, Any]:
        c, tok = self.c, self.c.tokenizer
        logprobs: dict[str, Any] | None = None
        if c.want_logprobs and lps:
            if c.chat:
                logprobs = chat_logprobs(tok, lps)
            else:
                logprobs = completion_logprobs(tok, lps, self.lp_offset)
                self.lp_offset += sum(len(tok.decode([x.token_id])) for x in lps)
        usage: dict[str, int] | Omit | None = OMIT  # OpenAI: absent unless include_usage
        if c.continuous_usage:
            usage = c.usage(self.n_tokens)
        elif c.include_usage:
            usage = None
        return envelope(c, [stream_choice(c, delta, finish, logprobs)], stream=True, usage=usage)

    def pieces(self, ev: TicketEvent, has_lps: bool) -> list[dict[str, Any]]:
        """The deltas this event releases (text held back per the module docstring)."""
        c = self.c
        safe = len(ev.text) if ev.done else safe_len(ev.text, c.stops)
        delta = ev.text[self.sent : safe] if safe > self.sent else ""
        self.sent = max(self.sent, safe)
        if self.parser is None:
            if delta or has_lps:
                return [{"content": delta} if c.chat else {"text": delta}]
            return []
        out: list[dict[str, Any]] = []
        for kind, val in self.parser.feed(delta) + (self.parser.finish() if ev.done else []):
            if kind == "content":
                out.append({"content": val})
            else:
                out.append({"tool_calls": [call_json(val, self.n_calls, c.rid, stream=True)]})
                self.n_calls += 1
        if not out and has_lps:
            out.append({"content": ""})
        return out

    def closing(self, output_tokens: int) -> tuple[list[dict[str, Any]], str]:
        """The last chunk (finish reason, metrics) and the usage chunk when asked for."""
        c = self.c
        finish = "tool_calls" if self.n_calls else (c.ticket.finish_reason or "stop")
        last = self.chunk({} if c.chat else "", finish)
        metrics = c.metrics()
        if metrics is not None:
            last["metrics"] = metrics
        out = [last]
        if c.include_usage:
            out.append(envelope(c, [], stream=True, usage=c.usage(output_tokens)))
        return out, finish


async def _next(queue: asyncio.Queue[TicketEvent]) -> tuple[TicketEvent, list[TokenLogprob]]:
    """The next event; when the client fell behind, queued events merge into the latest."""
    ev = await queue.get()
    lps = list(ev.new_logprobs)
    while not ev.done and not queue.empty():
        ev = queue.get_nowait()
        lps.extend(ev.new_logprobs)
    return ev, lps


async def sse_events(c: ReplyContext, queue: asyncio.Queue[TicketEvent]) -> AsyncIterator[str]:
    """The SSE body of one streamed request; a disconnect cancels it in the scheduler."""
    chunks = _Chunks(c)
    try:
        if c.chat:
            yield sse(chunks.chunk({"role": "assistant", "content": ""}))
        while True:
            ev, lps = await _next(queue)
            chunks.n_tokens = ev.output_tokens
            if ev.done and c.ticket.status != FINISHED:
                err = ended_badly(c.ticket)
                assert err is not None
                yield sse(err.body())
                yield DONE
                return
            for i, piece in enumerate(chunks.pieces(ev, bool(lps))):
                yield sse(
                    chunks.chunk(piece if c.chat else piece["text"], None, lps if i == 0 else None)
                )
            if ev.done:
                break
        closing, finish = chunks.closing(ev.output_tokens)
        for obj in closing:
            yield sse(obj)
        c.state.metrics.succeeded(finish)
        yield DONE
    finally:
        # A disconnect cancels this generator: take the request out of the batch at once.
        if not c.ticket.done and c.state.scheduler is not None:
            c.state.scheduler.cancel(c.rid)
