"""One streamed request: send, timestamp every chunk, end as exactly one RequestRecord.

Knows the OpenAI wire format (chat and completions, SSE, ``usage``), not any engine: engine
specifics arrive through ``response_extras``, a function a backend supplies that maps the last
JSON object carrying ``usage`` or ``timings`` to record fields (``spec``, ``prefill_s``...).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from specpilot.records import ChunkTiming, RequestRecord, ScheduledRequest

REJECT_STATUSES = (429, 503)
PHASE_TIMINGS = ("schedule", "back_to_back")
EventHook = Callable[[str, float, dict[str, Any]], None]  # (request_id, t, parsed event)
Extras = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class LoadConfig:
    """How to talk to the endpoint and what to enforce. Times in seconds.

    timeout_s bounds a whole request (send to last byte) and is always enforced;
    deadline_s of a scheduled request is recorded and, with ``enforce_deadlines``, also ends
    the request (status ``timeout``, error ``deadline``).
    """

    url: str
    api: str = "chat"  # chat | completions
    model: str = "default"
    run_id: str = ""
    arm: str = ""
    timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    enforce_deadlines: bool = False
    cancel_fraction: float = 0.0  # of requests closed mid-stream on purpose (R7 cancellation)
    cancel_after_chunks: int = 2
    max_concurrency: int | None = None  # an explicit cap, reported as such; None: open loop
    lag_threshold_s: float = 0.010  # p99 dispatch lag above this: run flagged untrustworthy
    include_usage: bool = True  # stream_options.include_usage
    continuous_usage: bool = False  # vLLM's stream_options.continuous_usage_stats
    count_tokens: Callable[[str], int] | None = None  # tokenizer fallback when no usage deltas
    response_extras: Extras | None = None
    on_event: EventHook | None = None  # debugging / timing-error measurement
    seed: int = 0  # picks the cancelled requests
    cold_start_requests: int = 0  # the first N non-warm-up requests are marked cold_start
    abort_after_connect_errors: int | None = 20  # consecutive; then the rest is not_sent
    # Phase timing. "schedule": one open-loop timeline across phases, phase P starting at
    # ``phase_starts[P]`` seconds after the run's start (what the schedule's PhaseInfo.start_s
    # says; ``phase_starts_for`` computes them for a selection of phases). "back_to_back": each
    # phase starts (at its own t = 0) when the previous phase's requests have all finished.
    phase_timing: str = "schedule"
    phase_starts: dict[str, float] | None = None
    # Client-side stages (retrieval, tool calls) run before each request's HTTP call, inside
    # that request's task: ``stages`` is ``Schedule.stages`` (name -> spec), relative document
    # paths resolve against ``stages_base_dir``. False: not run; records keep the planned
    # seconds.
    run_stages: bool = True
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    stages_base_dir: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    progress: bool | None = None  # None: on when stderr is a TTY and $CI is unset

    def __post_init__(self) -> None:
        if self.phase_timing not in PHASE_TIMINGS:
            raise ValueError(
                f"phase_timing {self.phase_timing!r}: one of {', '.join(PHASE_TIMINGS)}"
            )

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/completions"


def request_body(cfg: LoadConfig, req: ScheduledRequest) -> bytes:
    """The JSON body for one scheduled request (built before the run, off the timed path)."""
    body: dict[str, Any] = {"model": cfg.model, "max_tokens": req.max_tokens, "stream": True}
    if cfg.api == "chat":
        body["messages"] = req.messages
    else:
        body["prompt"] = "\n".join(str(m.get("content", "")) for m in req.messages)
    body["temperature"] = req.temperature
    if req.top_p != 1.0:
        body["top_p"] = req.top_p
    if req.seed is not None:
        body["seed"] = req.seed
    if req.stop:
        body["stop"] = req.stop
    if req.ignore_eos:  # trace replay: the output length is the trace's (vLLM, SGLang, llama.cpp)
        body["ignore_eos"] = True
    so: dict[str, Any] = {}
    if cfg.include_usage:
        so["include_usage"] = True
    if cfg.continuous_usage:
        so["continuous_usage_stats"] = True
    if so:
        body["stream_options"] = so
    body.update(cfg.extra_body)
    return json.dumps(body, ensure_ascii=False).encode()


class _Stream:
    """Parses SSE bytes as they arrive; all events in one read share the read's timestamp."""

    def __init__(self, rec: RequestRecord, cfg: LoadConfig, chunks: list[ChunkTiming]) -> None:
        self.rec = rec
        self.cfg = cfg
        self.buf = b""
        self.chunks = chunks
        self.text: list[str] = []
        self.done = False
        self.last_ct = 0
        self.usage: dict[str, Any] | None = None
        self.extras_obj: dict[str, Any] | None = None
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
        if self.cfg.on_event is not None:
            self.cfg.on_event(rec.request_id, t, obj)
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            self.error = str(err.get("message", err) if isinstance(err, dict) else err)[:500]
            return
        usage = obj.get("usage")
        ct = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if usage:
            self.usage = usage
        if usage or "timings" in obj:
            self.extras_obj = obj
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
                rec.finish_reason = ch["finish_reason"]
        if not (useful or text):
            return
        if ct is not None:
            n = int(ct) - self.last_ct
            self.last_ct = int(ct)
            self.token_source = "usage"
        elif self.cfg.count_tokens is not None:
            n = self.cfg.count_tokens(text) if text else 1
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


@dataclass
class Outcome:
    """A request's record and chunks; filled in place, so a stopped request keeps its chunks."""

    record: RequestRecord
    chunks: list[ChunkTiming] = field(default_factory=list)
    connect_error: bool = False
    token_source: str = "chunks"


async def send(
    client: httpx.AsyncClient,
    cfg: LoadConfig,
    req: ScheduledRequest,
    body: bytes,
    out: Outcome,
    cancel: bool,
) -> None:
    """Send one request now; every exit path leaves ``rec`` with a status and done_t.

    ``asyncio.CancelledError`` (the runner stopping) is not caught here: the runner owns the
    status of requests it stops.
    """
    limit = cfg.timeout_s
    reason = f"client timeout after {cfg.timeout_s:g}s"
    if cfg.enforce_deadlines and req.deadline_s is not None and req.deadline_s < limit:
        limit, reason = req.deadline_s, f"deadline {req.deadline_s:g}s"
    rec = out.record
    st = _Stream(rec, cfg, out.chunks)
    rec.sent_t = time.perf_counter()
    try:
        async with asyncio.timeout(limit):
            async with client.stream(
                "POST", cfg.path, content=body, headers={"content-type": "application/json"}
            ) as resp:
                rec.http_status = resp.status_code
                if resp.status_code != 200:
                    detail = (await resp.aread())[:300].decode("utf-8", "replace")
                    rec.status = "rejected" if resp.status_code in REJECT_STATUSES else "error"
                    rec.error = f"HTTP {resp.status_code}: {detail}"
                    rec.done_t = time.perf_counter()
                    return
                async for data in resp.aiter_bytes():
                    t = time.perf_counter()
                    st.feed(data, t)
                    if st.error is not None:
                        break
                    if cancel and rec.chunks >= cfg.cancel_after_chunks:
                        rec.status = "cancelled"
                        rec.error = f"cancelled by the client after {rec.chunks} chunks"
                        break
                    if st.done:
                        break
                rec.done_t = time.perf_counter()
    except TimeoutError:
        rec.status, rec.error = "timeout", reason
    except httpx.TimeoutException as exc:
        rec.status, rec.error = "timeout", f"{type(exc).__name__}: {exc}"[:300]
    except httpx.ConnectError as exc:
        rec.status, rec.error = "error", f"ConnectError: {exc}"[:300]
        out.connect_error = True
    except (httpx.HTTPError, OSError) as exc:
        rec.status, rec.error = "error", f"{type(exc).__name__}: {exc}"[:300]
    if rec.done_t is None:
        rec.done_t = time.perf_counter()
    if rec.status == "":
        if st.error is not None:
            rec.status, rec.error = "error", st.error
        elif st.done or rec.finish_reason:
            rec.status = "ok"
        else:
            rec.status, rec.error = "error", "stream ended without [DONE] or a finish_reason"
    _finish(rec, st, cfg)
    out.token_source = st.token_source


def _finish(rec: RequestRecord, st: _Stream, cfg: LoadConfig) -> None:
    if st.usage is not None:
        if st.usage.get("prompt_tokens") is not None:
            rec.prompt_tokens = int(st.usage["prompt_tokens"])
        if st.usage.get("completion_tokens") is not None and rec.status == "ok":
            rec.output_tokens = int(st.usage["completion_tokens"])
    if rec.output_tokens is None:
        rec.output_tokens = sum(c.tokens_in_chunk for c in st.chunks)
    if st.text:
        rec.output_sha256 = hashlib.sha256("".join(st.text).encode()).hexdigest()
    if cfg.response_extras is not None and st.extras_obj is not None:
        for key, value in cfg.response_extras(st.extras_obj).items():
            setattr(rec, key, value)
