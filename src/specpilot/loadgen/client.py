"""One streamed request: send, timestamp every chunk, end as exactly one RequestRecord.

Knows the OpenAI wire format (chat and completions, SSE, ``usage``), not any engine: engine
specifics arrive through ``Hooks.response_extras``, a backend's parser from the merged final
``usage``/``metrics``/``timings`` objects and the response headers to a typed
``ResponseExtras``, copied onto the record with ``ResponseExtras.apply_to``. Rounds and the
prefill the engine reports are relabelled with this request's ids and kept on the ``Outcome``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import httpx

# httpx imports its HTTP/1.1 machinery (httpcore's connection pool and anyio backend, h11) on
# the first connection: ~0.2 s that would block the event loop mid-run and delay every request
# due meanwhile. Import it with the load generator instead, off the clock.
with contextlib.suppress(ImportError):
    import h11  # noqa: F401
    import httpcore._async.http11
    import httpcore._backends.anyio  # noqa: F401

from specpilot.loadgen.config import LoadConfig, RunLabels, request_path
from specpilot.loadgen.sse import SseStream
from specpilot.records import (
    ChunkTiming,
    PrefillRecord,
    RequestRecord,
    ResponseExtras,
    RoundRecord,
    ScheduledRequest,
)

REJECT_STATUSES = (429, 503)


class Sink(Protocol):
    """Receives each finished request with what came with it; must return at once."""

    def __call__(
        self,
        record: RequestRecord,
        chunks: list[ChunkTiming],
        rounds: list[RoundRecord],
        prefill: PrefillRecord | None,
    ) -> None: ...


def request_id(req: ScheduledRequest) -> str:
    return f"{req.phase}-{req.index:06d}"


def new_record(
    req: ScheduledRequest,
    labels: RunLabels,
    scheduled_t: float,
    status: str,
    measured_stages: bool,
    cold: set[str],
) -> RequestRecord:
    """The record of a scheduled request before it is sent. Client stages: empty when they
    will be measured (the request's task fills them in), else the planned seconds."""
    rid = request_id(req)
    return RequestRecord(
        run_id=labels.run_id,
        arm=labels.arm,
        phase=req.phase,
        task_group=req.group,
        prompt_id=req.prompt_id,
        request_id=rid,
        scheduled_t=scheduled_t,
        status=status,
        deadline_s=req.deadline_s,
        ttft_slo_s=req.ttft_slo_s,
        client_stages={} if measured_stages else dict(req.client_stages),
        warmup=req.warmup,
        cold_start=rid in cold,
    )


@dataclass
class Outcome:
    """A request's record and what came with it; filled in place, so a stopped request keeps
    its chunks."""

    record: RequestRecord
    chunks: list[ChunkTiming] = field(default_factory=list)
    rounds: list[RoundRecord] = field(default_factory=list)
    prefill: PrefillRecord | None = None
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
    """Send one request now; every exit path leaves ``out.record`` with a status and done_t.

    ``asyncio.CancelledError`` (the runner stopping) is not caught here: the runner owns the
    status of requests it stops.
    """
    ep, design, path = cfg.endpoint, cfg.design, request_path(cfg, req)
    limit, reason = _time_limit(cfg, req)
    rec = out.record
    st = SseStream(rec, out.chunks, cfg.hooks.count_tokens, cfg.hooks.on_event)
    headers: dict[str, str] = {}
    rec.sent_t = time.perf_counter()
    try:
        async with asyncio.timeout(limit):
            async with client.stream(
                "POST", path, content=body, headers={"content-type": "application/json"}
            ) as resp:
                rec.http_status = resp.status_code
                headers = dict(resp.headers)
                if resp.status_code != 200:
                    await _refused(resp, rec, ep.headers)
                    return
                await _read_stream(resp, st, rec, cancel, design.cancel_after_chunks)
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
        _stream_status(rec, st)
    if rec.error and ep.headers:  # an exception's or a stream's error text, as the body's
        rec.error = redact(rec.error, ep.headers)
    finish(rec, st)
    if headers or st.extras:
        apply_extras(cfg, out, st, headers)
    out.token_source = st.token_source


def _time_limit(cfg: LoadConfig, req: ScheduledRequest) -> tuple[float, str]:
    """Seconds the request may take, and the error that says so: the client timeout, or the
    request's deadline where the design enforces a shorter one."""
    ep = cfg.endpoint
    limit = ep.timeout_s
    reason = f"client timeout after {ep.timeout_s:g}s"
    if cfg.design.enforce_deadlines and req.deadline_s is not None and req.deadline_s < limit:
        limit, reason = req.deadline_s, f"deadline {req.deadline_s:g}s"
    return limit, reason


async def _refused(resp: httpx.Response, rec: RequestRecord, sent: Mapping[str, str]) -> None:
    """A non-200 answer: rejected (429, 503) or an error, with the start of its body."""
    detail = (await resp.aread())[:300].decode("utf-8", "replace")
    rec.status = "rejected" if resp.status_code in REJECT_STATUSES else "error"
    # a server may echo what it was sent (a gateway's "bad key sk-...")
    rec.error = redact(f"HTTP {resp.status_code}: {detail}", sent)
    rec.done_t = time.perf_counter()


async def _read_stream(
    resp: httpx.Response, st: SseStream, rec: RequestRecord, cancel: bool, cancel_after: int
) -> None:
    """Feed the stream's chunks, each timestamped on arrival, until it ends, breaks, says
    [DONE] or (``cancel``) ``cancel_after`` chunks have come."""
    async for data in resp.aiter_bytes():
        t = time.perf_counter()
        st.feed(data, t)
        if st.error is not None:
            break
        if cancel and rec.chunks >= cancel_after:
            rec.status = "cancelled"
            rec.error = f"cancelled by the client after {rec.chunks} chunks"
            break
        if st.done:
            break
    rec.done_t = time.perf_counter()


def _stream_status(rec: RequestRecord, st: SseStream) -> None:
    """The status of a request nothing else ended: the stream's error, else ok when it said
    [DONE] or gave a finish reason, else an error."""
    if st.error is not None:
        rec.status, rec.error = "error", st.error
    elif st.done or rec.finish_reason:
        rec.status = "ok"
    else:
        rec.status, rec.error = "error", "stream ended without [DONE] or a finish_reason"


def finish(rec: RequestRecord, st: SseStream) -> None:
    """Token counts, the output text and its hash, from what was streamed."""
    if st.usage is not None:
        if st.usage.get("prompt_tokens") is not None:
            rec.prompt_tokens = int(st.usage["prompt_tokens"])
        if st.usage.get("completion_tokens") is not None and rec.status == "ok":
            rec.output_tokens = int(st.usage["completion_tokens"])
    if rec.output_tokens is None:
        rec.output_tokens = sum(c.tokens_in_chunk for c in st.chunks)
    if st.text:
        rec.output_text = "".join(st.text)
        rec.output_sha256 = hashlib.sha256(rec.output_text.encode()).hexdigest()


def apply_extras(cfg: LoadConfig, out: Outcome, st: SseStream, headers: dict[str, str]) -> None:
    """Run the engine's parser and copy its findings onto the record and the outcome.

    A parser that fails (a strict parser meeting an unknown key, or a bug) turns an ok request
    into ``error`` with the parser's message: the record says why its engine data is missing.
    """
    rec = out.record
    parse = cfg.hooks.response_extras
    if parse is None:
        extras = ResponseExtras(server_request_id=_header(headers, "x-request-id"))
    else:
        try:
            extras = parse(st.extras, headers)
        except Exception as exc:
            rec.status = "error"
            rec.error = f"response parser: {type(exc).__name__}: {exc}"[:500]
            return
    extras.apply_to(rec)
    if rec.server_request_id is None and isinstance(st.extras.get("id"), str):
        rec.server_request_id = st.extras["id"]
    for r in extras.rounds:
        r.request_id, r.run_id, r.arm, r.phase = rec.request_id, rec.run_id, rec.arm, rec.phase
    out.rounds = list(extras.rounds)
    if extras.prefill is not None:
        p = extras.prefill
        p.request_id, p.run_id, p.arm, p.phase = rec.request_id, rec.run_id, rec.arm, rec.phase
        out.prefill = p


def redact(text: str, headers: Mapping[str, str]) -> str:
    """``text`` with every header value sent (and its part after a scheme, ``Bearer KEY``'s
    KEY) replaced by ``***``: no record or message keeps a credential.

    >>> redact("bad key k-123 (Bearer k-123)", {"Authorization": "Bearer k-123"})
    'bad key *** (***)'
    """
    secrets = {v for v in headers.values() if v}
    secrets |= {v.partition(" ")[2].strip() for v in secrets if " " in v}
    for value in sorted((v for v in secrets if len(v) >= 4), key=len, reverse=True):
        text = text.replace(value, "***")
    return text


def _header(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name), None)


def served_model(url: str, headers: Mapping[str, str] | None = None) -> str:
    """The first model id the endpoint lists (servers that check the name need it);
    ``headers``: the endpoint's credentials."""
    import httpx

    try:
        r = httpx.get(url + "/v1/models", headers=dict(headers or {}), timeout=5.0)
        data = r.json().get("data") or []
        return str(data[0]["id"]) if data else "default"
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return "default"
