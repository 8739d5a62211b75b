"""One generation request: check its limits, pick its strategy, submit it, answer it.

The scheduler thread reports progress through a callback that hands events to the event loop
(``call_soon_threadsafe``). A streamed request answers with SSE (:mod:`.streaming`); a whole one
waits for its last event or for the client to go away, which cancels it at once (the request
leaves the batch before the next round and its KV slot is freed).

    >>> await generate(state, request, body, ids, model="m", chat=True, tools_on=False)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from specpilot.engine.sampling import SamplingParams
from specpilot.engine.scheduler import Draining, QueueFull, Scheduler, Ticket, TicketEvent
from specpilot.serve.protocol import APIError, ChatCompletionRequest, CompletionRequest
from specpilot.serve.responses import ReplyContext, ended_badly, full_response
from specpilot.serve.state import ServerState
from specpilot.serve.streaming import sse_events

Body = CompletionRequest | ChatCompletionRequest
SAMPLING_EPS = 1e-5  # vLLM's _SAMPLING_EPS: a lower temperature is greedy decoding
_PARAM = re.compile(r"^(temperature|top_k|top_p|max_tokens|stop|prompt|k|logprobs)\b")


def _param_of(message: str, chat: bool) -> str | None:
    """The request field an engine-side ValueError names (its message starts with it)."""
    m = _PARAM.match(message)
    if m is None:
        return None
    name = m.group(1)
    if name == "prompt" and chat:
        return "messages"
    return None if name == "k" else name


def _max_tokens(body: Body, n_prompt: int, context: int) -> int:
    """The completion budget; a prompt or a request that does not fit the context is a 400."""
    chat = isinstance(body, ChatCompletionRequest)
    if n_prompt >= context:
        raise APIError(
            400,
            f"This model's maximum context length is {context} tokens; the prompt has {n_prompt} tokens.",
            param="messages" if chat else "prompt",
            code="context_length_exceeded",
        )
    from_chat = body.max_completion_tokens if isinstance(body, ChatCompletionRequest) else None
    requested = from_chat or body.max_tokens
    if requested is not None and n_prompt + requested > context:
        raise APIError(
            400,
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{n_prompt + requested} tokens ({n_prompt} in the prompt, {requested} for the completion).",
            param="max_completion_tokens" if from_chat else "max_tokens",
            code="context_length_exceeded",
        )
    return requested or context - n_prompt


def _sampling(state: ServerState, body: Body, max_tokens: int) -> SamplingParams:
    temp = body.temperature if body.temperature is not None else state.cfg.default_temperature
    if temp < SAMPLING_EPS:  # as vLLM: greedy (logits / 5e-324 overflow to inf, then NaN)
        temp = 0.0
    return SamplingParams(
        temperature=float(temp),
        top_k=max(0, body.top_k or 0),
        # The engine masks in float32, where 5e-324 is 0 and would drop every token; any top_p
        # below the top token's probability (>= 1/vocab) keeps that one token, as this does.
        top_p=max(float(body.top_p if body.top_p is not None else 1.0), SAMPLING_EPS),
        seed=body.seed,
        max_tokens=max_tokens,
        stop=body.stop_list(),
        ignore_eos=body.ignore_eos,
    )


def _logprobs(body: Body) -> int | None:
    """How many top log-probs per token (0: only the chosen token's), None: no log-probs."""
    if not isinstance(body, ChatCompletionRequest):
        return body.logprobs
    if body.top_logprobs and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs = true", param="top_logprobs")
    return (body.top_logprobs or 0) if body.logprobs else None


def _detail(state: ServerState, body: Body) -> str:
    detail = body.spec_metrics if body.spec_metrics is not None else state.cfg.spec_metrics
    return "summary" if detail is True else ("off" if detail is False else str(detail))


def _submit(
    state: ServerState,
    sched: Scheduler,
    prompt_ids: list[int],
    params: SamplingParams,
    k: int,
    rid: str,
    logprobs: int | None,
    stream: bool,
    chat: bool,
) -> tuple[Ticket, asyncio.Queue[TicketEvent]]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[TicketEvent] = asyncio.Queue()

    def on_event(_: Ticket, ev: TicketEvent) -> None:
        if stream or ev.done:
            loop.call_soon_threadsafe(queue.put_nowait, ev)

    try:
        ticket = sched.submit(
            prompt_ids, params, k, request_id=rid, logprobs=logprobs, on_event=on_event
        )
    except QueueFull as exc:
        state.metrics.request_outcome("rejected_queue_full")
        retry = str(math.ceil(exc.retry_after_s))
        raise APIError(
            429,
            str(exc),
            type="rate_limit_error",
            code="queue_full",
            headers={"Retry-After": retry},
        ) from None
    except Draining as exc:
        state.metrics.request_outcome("rejected_draining")
        raise APIError(
            503, str(exc), type="server_error", code="draining", headers={"Retry-After": "5"}
        ) from None
    except ValueError as exc:  # the engine's own checks of the sampling parameters
        state.metrics.request_outcome("invalid")
        raise APIError(
            400, str(exc), param=_param_of(str(exc), chat), code="invalid_parameter"
        ) from None
    return ticket, queue


def strategy_header(k: int, scope: str, version: int) -> str:
    """``X-Specpilot-Strategy``; a scope is percent-encoded beyond ASCII (headers are latin-1)."""
    return f"k={k}; scope={quote(scope, safe=':/')}; version={version}"


async def generate(
    state: ServerState,
    request: Request,
    body: Body,
    prompt_ids: list[int],
    *,
    model: str,
    chat: bool,
    tools_on: bool,
) -> Response:
    """Submit and answer one request for the served name ``model`` (see the module docstring)."""
    engine, sched = state.check_ready()
    params = _sampling(state, body, _max_tokens(body, len(prompt_ids), engine.max_seq_len))
    n_logprobs = _logprobs(body)
    k, scope = state.switch.resolve(model, body.tag or request.headers.get("x-specpilot-tag"))
    version = state.switch.table.version
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    ticket, queue = _submit(state, sched, prompt_ids, params, k, rid, n_logprobs, body.stream, chat)
    opts = body.stream_options
    ctx = ReplyContext(
        state=state,
        ticket=ticket,
        rid=rid,
        chat=chat,
        tools_on=tools_on,
        k=k,
        scope=scope,
        version=version,
        detail=_detail(state, body),
        model=model,
        n_prompt=len(prompt_ids),
        stops=params.stop,
        include_usage=bool(opts and opts.include_usage),
        continuous_usage=bool(opts and opts.continuous_usage_stats),
    )
    headers = {"X-Request-Id": rid, "X-Specpilot-Strategy": strategy_header(k, scope, version)}
    if body.stream:
        return StreamingResponse(
            sse_events(ctx, queue),
            media_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-cache"},
        )
    return await _complete(ctx, request, queue, headers)


async def _wait_disconnect(request: Request) -> None:
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


async def _complete(
    c: ReplyContext,
    request: Request,
    queue: asyncio.Queue[TicketEvent],
    headers: dict[str, str],
) -> Response:
    getter = asyncio.ensure_future(queue.get())
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({getter, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not getter.done():
            getter.cancel()
    if getter not in done:  # the client went away: free the slot now
        if c.state.scheduler is not None:
            c.state.scheduler.cancel(c.rid)
        return Response(status_code=499)
    ev = getter.result()
    err = ended_badly(c.ticket)
    if err is not None:
        raise err
    out, finish = full_response(c, ev.text, ev.output_tokens)
    c.state.metrics.succeeded(finish)
    return JSONResponse(out, headers=headers)
