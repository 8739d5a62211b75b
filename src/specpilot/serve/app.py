"""The OpenAI-compatible HTTP server over one Engine (through the Scheduler).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (JSON or SSE with
``data: [DONE]``), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus), and the
admin switch (loopback only, ``Authorization: Bearer <admin token>``): ``GET|PUT
/admin/strategy``, ``POST /admin/strategy/reload``, ``POST /admin/drain``, ``POST /admin/resume``.

The HTTP layer validates, tokenizes, resolves the strategy (k) for the request's scope and
submits to the scheduler; the scheduler thread reports progress through a callback that hands
events to the event loop (``call_soon_threadsafe``). A client that disconnects is cancelled at
once (its request leaves the batch before the next round; its KV slot is freed).

Streaming text is released only when it is final: the last ``max(len(stop)) - 1`` characters
are held back while a stop string could still complete, and an incomplete UTF-8 sequence
(U+FFFD at the end) waits for its next token. Concatenated deltas equal the non-streamed text.

    >>> app = create_app(ServerConfig(model_name="m"), engine=engine)        # doctest: +SKIP
    >>> uvicorn.run(app, host="127.0.0.1", port=8000)                         # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from specpilot.engine.generate import Engine, TokenLogprob
from specpilot.engine.sampling import SamplingParams
from specpilot.engine.scheduler import (
    FINISHED,
    QUEUE_TIMEOUT,
    TIMEOUT,
    Draining,
    QueueFull,
    Scheduler,
    SchedulerConfig,
    Ticket,
    TicketEvent,
)
from specpilot.serve.metrics import CONTENT_TYPE, ServerMetrics
from specpilot.serve.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    StrategyUpdate,
    error_body,
)
from specpilot.serve.strategy import StrategySwitch
from specpilot.serve.toolcalls import (
    ParsedOutput,
    ToolCall,
    ToolCallStream,
    assistant_tool_text,
    parse_tool_calls,
    template_supports_tools,
    tools_system_prompt,
)

log = logging.getLogger("specpilot.serve")
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


@dataclass
class ServerConfig:
    model_name: str = "specpilot"
    aliases: tuple[str, ...] = ()
    draft_name: str | None = None  # None: no draft loaded, only k = 0
    default_k: int = 0
    max_k: int = 16
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    admin_token: str | None = None  # None: admin endpoints refuse (403)
    admin_hosts: frozenset[str] = LOOPBACK
    strategy_file: Path | None = None
    spec_metrics: str = "off"  # server-wide default: off | summary | detailed
    default_temperature: float = 1.0  # OpenAI's default


class _Server:
    """State shared by the handlers: engine, scheduler, metrics, strategy switch."""

    def __init__(
        self, cfg: ServerConfig, engine: Engine | None, loader: Callable[[], Engine] | None
    ):
        if engine is None and loader is None:
            raise ValueError("create_app needs an engine or a loader")
        self.cfg = cfg
        self.engine: Engine | None = None
        self.scheduler: Scheduler | None = None
        self.tokenizer: Any = None
        self.metrics = ServerMetrics(cfg.model_name)
        self.switch = StrategySwitch(
            cfg.default_k,
            has_draft=cfg.draft_name is not None,
            draft_name=cfg.draft_name,
            max_k=cfg.max_k,
        )
        if cfg.strategy_file is not None:
            self.switch.load_file(cfg.strategy_file)
        self.metrics.strategy(self.switch.table.flat())
        self.models = (cfg.model_name, *cfg.aliases)
        self.load_error: str | None = None
        self.draining = False
        self._pending_engine, self._loader = engine, loader
        self.started_t = time.time()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._pending_engine is not None:
            self._install(self._pending_engine)
        else:
            threading.Thread(target=self._load, name="specpilot-loader", daemon=True).start()

    def _load(self) -> None:
        assert self._loader is not None
        try:
            self._install(self._loader())
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("engine failed to load: %s", self.load_error)

    def _install(self, engine: Engine) -> None:
        if (engine.draft is None) != (self.cfg.draft_name is None):
            raise ValueError(
                "ServerConfig.draft_name must be set exactly when the engine has a draft"
            )
        if engine.tokenizer is None:
            raise ValueError("the engine needs a tokenizer to serve text")
        sched = Scheduler(engine, self.cfg.scheduler, observer=self.metrics)
        sched.start()
        self.tokenizer, self.scheduler = engine.tokenizer, sched
        self.engine = engine  # last: readiness is "engine is not None"

    def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop(timeout=10.0, cancel=True)

    @property
    def ready(self) -> bool:
        return self.engine is not None and self.scheduler is not None and self.scheduler.alive

    def check_ready(self) -> tuple[Engine, Scheduler]:
        if self.load_error is not None:
            raise APIError(
                503,
                f"the engine failed to load: {self.load_error}",
                type="server_error",
                code="engine_error",
            )
        if self.engine is None or self.scheduler is None:
            raise APIError(
                503,
                "the model is loading",
                type="server_error",
                code="loading",
                headers={"Retry-After": "5"},
            )
        if self.draining or not self.scheduler.accepting:
            raise APIError(
                503,
                "the server is draining",
                type="server_error",
                code="draining",
                headers={"Retry-After": "5"},
            )
        return self.engine, self.scheduler

    def check_model(self, name: str) -> None:
        if name not in self.models:
            raise APIError(
                404,
                f"The model `{name}` does not exist. Served: {list(self.models)}",
                param="model",
                code="model_not_found",
            )


def create_app(
    config: ServerConfig | None = None,
    engine: Engine | None = None,
    loader: Callable[[], Engine] | None = None,
) -> FastAPI:
    """An app serving ``engine`` (ready at start-up) or whatever ``loader()`` returns (503 until then)."""
    cfg = config or ServerConfig()
    srv = _Server(cfg, engine, loader)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        srv.start()
        yield
        srv.stop()

    app = FastAPI(title="specpilot", version="0.1.0", lifespan=lifespan)
    app.state.server = srv

    # ------------------------------------------------------------------ errors
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        # Union types report the tried member type in loc; keep the field path only.
        loc = [
            p
            for p in loc
            if not re.match(r"^(str|int|bool|float|list|dict|function-|literal|json-)", p)
        ]
        param = ".".join(loc) or None
        msg = (
            f"{param}: {first.get('msg', 'invalid')}"
            if param
            else str(first.get("msg", "invalid request body"))
        )
        srv.metrics.request_outcome("invalid")
        return JSONResponse(error_body(msg, param=param, code="invalid_parameter"), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), type=kind), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return JSONResponse(
            error_body(f"internal error: {type(exc).__name__}", type="server_error"),
            status_code=500,
        )

    # ------------------------------------------------------------------ plain endpoints
    @app.get("/health")
    async def health() -> Response:
        if srv.load_error:
            return JSONResponse({"status": "error", "error": srv.load_error}, status_code=503)
        if not srv.ready:
            return JSONResponse({"status": "loading"}, status_code=503)
        if srv.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        max_len = srv.engine.max_seq_len if srv.engine is not None else None
        data = [
            {
                "id": m,
                "object": "model",
                "created": int(srv.started_t),
                "owned_by": "specpilot",
                "root": cfg.model_name,
                "max_model_len": max_len,
            }
            for m in srv.models
        ]
        return {"object": "list", "data": data}

    @app.get("/metrics")
    async def metrics() -> Response:
        srv.metrics.refresh(srv.engine, srv.scheduler, srv.ready and not srv.draining)
        return Response(srv.metrics.exposition(), media_type=CONTENT_TYPE)

    # ------------------------------------------------------------------ generation
    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        engine, _ = srv.check_ready()
        srv.check_model(body.model)
        prompt_ids = _completion_prompt(srv, engine, body)
        return await _generate(srv, request, body, prompt_ids, chat=False, tools_on=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        srv.check_ready()
        srv.check_model(body.model)
        tools_on = bool(body.tools) and body.tool_choice != "none"
        prompt_ids = _chat_prompt(srv, body, tools_on)
        return await _generate(srv, request, body, prompt_ids, chat=True, tools_on=tools_on)

    # ------------------------------------------------------------------ admin
    def _admin(request: Request) -> None:
        host = request.client.host if request.client else ""
        if host not in cfg.admin_hosts:
            raise APIError(
                403, "admin endpoints answer loopback clients only", type="permission_error"
            )
        if not cfg.admin_token:
            raise APIError(
                403,
                "admin endpoints are disabled (start the server with an admin token)",
                type="permission_error",
            )
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {cfg.admin_token}".encode()):
            raise APIError(
                401,
                "missing or wrong admin token (Authorization: Bearer ...)",
                type="authentication_error",
            )

    def _strategy_view() -> dict[str, Any]:
        return {**srv.switch.table.to_dict(), "draft": cfg.draft_name, "max_k": cfg.max_k}

    @app.get("/admin/strategy")
    async def get_strategy(request: Request) -> dict[str, Any]:
        _admin(request)
        return _strategy_view()

    @app.put("/admin/strategy")
    async def put_strategy(update: StrategyUpdate, request: Request) -> dict[str, Any]:
        t0 = time.perf_counter()
        _admin(request)
        try:
            table = srv.switch.set(update.scope, update.k)
        except ValueError as exc:
            raise APIError(400, str(exc), param="k", code="invalid_strategy") from None
        dt = time.perf_counter() - t0
        srv.metrics.switched(dt)
        srv.metrics.strategy(table.flat())
        log.info(
            "strategy %s -> k=%s (version %d, in force after %.6fs)",
            update.scope,
            update.k,
            table.version,
            dt,
        )
        return {**_strategy_view(), "in_force_after_s": dt}

    @app.post("/admin/strategy/reload")
    async def reload_strategy(request: Request) -> dict[str, Any]:
        t0 = time.perf_counter()
        _admin(request)
        if cfg.strategy_file is None:
            raise APIError(
                400, "the server was started without --strategy-file", code="no_strategy_file"
            )
        try:
            table = srv.switch.load_file(cfg.strategy_file)
        except (OSError, ValueError, TypeError) as exc:  # yaml errors are ValueErrors
            raise APIError(
                400, f"strategy file not applied: {exc}", code="invalid_strategy"
            ) from None
        dt = time.perf_counter() - t0
        srv.metrics.switched(dt)
        srv.metrics.strategy(table.flat())
        return {**_strategy_view(), "in_force_after_s": dt}

    @app.post("/admin/drain")
    async def drain(request: Request) -> dict[str, Any]:
        _admin(request)
        srv.draining = True
        if srv.scheduler is not None:
            srv.scheduler.drain()
        running, waiting = srv.scheduler.counts() if srv.scheduler else (0, 0)
        return {"status": "draining", "running": running, "waiting": waiting}

    @app.post("/admin/resume")
    async def resume(request: Request) -> dict[str, Any]:
        _admin(request)
        srv.draining = False
        if srv.scheduler is not None:
            srv.scheduler.resume()
        return {"status": "ok"}

    return app


# ---------------------------------------------------------------------- prompts
def _completion_prompt(srv: _Server, engine: Engine, body: CompletionRequest) -> list[int]:
    p: Any = body.prompt
    if isinstance(p, list) and p and not isinstance(p[0], int):
        if len(p) != 1:
            raise APIError(
                400, "one prompt per request (batch prompts are not supported)", param="prompt"
            )
        p = p[0]
    if isinstance(p, str):
        ids = [int(i) for i in srv.tokenizer.encode(p)]
    else:
        ids = [int(i) for i in p]
        vocab = engine.target.cfg.vocab_size
        if any(not 0 <= i < vocab for i in ids):
            raise APIError(400, f"prompt token ids must be in [0, {vocab})", param="prompt")
    if not ids:
        raise APIError(400, "prompt must not be empty", param="prompt")
    return ids


def _chat_prompt(srv: _Server, body: ChatCompletionRequest, tools_on: bool) -> list[int]:
    tok = srv.tokenizer
    native = template_supports_tools(tok)
    msgs: list[dict[str, Any]] = []
    try:
        for m in body.messages:
            role = "system" if m.role == "developer" else m.role
            text = m.text()
            if m.role == "assistant" and m.tool_calls and not native:
                text = assistant_tool_text(text, [c.model_dump() for c in m.tool_calls])
            d: dict[str, Any] = {"role": role, "content": text}
            if native and m.tool_calls:
                d["tool_calls"] = [c.model_dump() for c in m.tool_calls]
            if m.tool_call_id:
                d["tool_call_id"] = m.tool_call_id
            msgs.append(d)
    except (ValueError, TypeError, json.JSONDecodeError) as exc:
        raise APIError(400, f"messages: {exc}", param="messages") from None
    tools = None
    if tools_on and body.tools:
        tools = [t.model_dump(exclude_none=True) for t in body.tools]
        choice = body.tool_choice
        if choice is not None and not isinstance(choice, str):
            name = choice.function.name
            tools = [t for t in tools if t["function"]["name"] == name]
            if not tools:
                raise APIError(
                    400, f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
                )
        if not native:
            choice_arg = (
                choice.model_dump()
                if choice is not None and not isinstance(choice, str)
                else choice
            )
            sys_text = tools_system_prompt(tools, choice_arg)
            if msgs and msgs[0]["role"] == "system":
                msgs[0] = {**msgs[0], "content": f"{msgs[0]['content']}\n\n{sys_text}"}
            else:
                msgs.insert(0, {"role": "system", "content": sys_text})
            tools = None
    try:
        text = tok.apply_chat_template(
            msgs, tools=tools, add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:  # jinja errors: a template rejecting this conversation
        raise APIError(
            400, f"messages: the chat template rejected them: {exc}", param="messages"
        ) from None
    return [int(i) for i in tok.encode(text, add_special_tokens=False)]


# ---------------------------------------------------------------------- generation
_PARAM = re.compile(r"^(temperature|top_k|top_p|max_tokens|stop|prompt|k|logprobs)\b")


def _param_of(message: str, chat: bool) -> str | None:
    m = _PARAM.match(message)
    if m is None:
        return None
    name = m.group(1)
    if name == "prompt" and chat:
        return "messages"
    return None if name == "k" else name


def _sampling(
    srv: _Server, body: CompletionRequest | ChatCompletionRequest, max_tokens: int
) -> SamplingParams:
    temp = body.temperature if body.temperature is not None else srv.cfg.default_temperature
    return SamplingParams(
        temperature=float(temp),
        top_k=max(0, body.top_k or 0),
        top_p=float(body.top_p if body.top_p is not None else 1.0),
        seed=body.seed,
        max_tokens=max_tokens,
        stop=body.stop_list(),
        ignore_eos=body.ignore_eos,
    )


async def _generate(
    srv: _Server,
    request: Request,
    body: CompletionRequest | ChatCompletionRequest,
    prompt_ids: list[int],
    *,
    chat: bool,
    tools_on: bool,
) -> Response:
    engine, sched = srv.check_ready()
    ctx = engine.max_seq_len
    n_prompt = len(prompt_ids)
    prompt_param = "messages" if chat else "prompt"
    if n_prompt >= ctx:
        raise APIError(
            400,
            f"This model's maximum context length is {ctx} tokens; the prompt has {n_prompt} tokens.",
            param=prompt_param,
            code="context_length_exceeded",
        )
    requested = body.max_completion_tokens if isinstance(body, ChatCompletionRequest) else None
    requested = requested or body.max_tokens
    if requested is not None and n_prompt + requested > ctx:
        raise APIError(
            400,
            f"This model's maximum context length is {ctx} tokens. However, you requested "
            f"{n_prompt + requested} tokens ({n_prompt} in the prompt, {requested} for the completion).",
            param="max_completion_tokens"
            if isinstance(body, ChatCompletionRequest) and body.max_completion_tokens
            else "max_tokens",
            code="context_length_exceeded",
        )
    params = _sampling(srv, body, requested or ctx - n_prompt)
    if isinstance(body, ChatCompletionRequest):
        n_logprobs = (body.top_logprobs or 0) if body.logprobs else None
        if body.top_logprobs and not body.logprobs:
            raise APIError(400, "top_logprobs needs logprobs = true", param="top_logprobs")
    else:
        n_logprobs = body.logprobs
    tag = body.tag or request.headers.get("x-specpilot-tag")
    k, scope = srv.switch.resolve(body.model, tag)
    version = srv.switch.table.version
    detail = body.spec_metrics if body.spec_metrics is not None else srv.cfg.spec_metrics
    detail = "summary" if detail is True else ("off" if detail is False else detail)
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[TicketEvent] = asyncio.Queue()

    def on_event(_: Ticket, ev: TicketEvent) -> None:
        if body.stream or ev.done:
            loop.call_soon_threadsafe(queue.put_nowait, ev)

    try:
        ticket = sched.submit(
            prompt_ids, params, k, request_id=rid, logprobs=n_logprobs, on_event=on_event
        )
    except QueueFull as exc:
        srv.metrics.request_outcome("rejected_queue_full")
        retry = str(math.ceil(exc.retry_after_s))
        raise APIError(
            429,
            str(exc),
            type="rate_limit_error",
            code="queue_full",
            headers={"Retry-After": retry},
        ) from None
    except Draining as exc:
        srv.metrics.request_outcome("rejected_draining")
        raise APIError(
            503, str(exc), type="server_error", code="draining", headers={"Retry-After": "5"}
        ) from None
    except ValueError as exc:
        srv.metrics.request_outcome("invalid")
        raise APIError(
            400, str(exc), param=_param_of(str(exc), chat), code="invalid_parameter"
        ) from None

    ctx_info = _Ctx(
        srv=srv,
        ticket=ticket,
        rid=rid,
        chat=chat,
        tools_on=tools_on,
        k=k,
        scope=scope,
        version=version,
        detail=detail,
        model=body.model,
        n_prompt=n_prompt,
        stops=params.stop,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        continuous_usage=bool(body.stream_options and body.stream_options.continuous_usage_stats),
    )
    headers = {
        "X-Request-Id": rid,
        "X-Specpilot-Strategy": f"k={k}; scope={scope}; version={version}",
    }
    if body.stream:
        return StreamingResponse(
            _stream(ctx_info, queue),
            media_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-cache"},
        )
    return await _complete(ctx_info, request, queue, headers)


@dataclass
class _Ctx:
    srv: _Server
    ticket: Ticket
    rid: str
    chat: bool
    tools_on: bool
    k: int
    scope: str
    version: int
    detail: str
    model: str
    n_prompt: int
    stops: tuple[str, ...]
    include_usage: bool
    continuous_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    def usage(self, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.n_prompt,
            "completion_tokens": completion,
            "total_tokens": self.n_prompt + completion,
        }


async def _wait_disconnect(request: Request) -> None:
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


def _ended_badly(c: _Ctx) -> APIError | None:
    t = c.ticket
    if t.status == FINISHED:
        return None
    if t.status == TIMEOUT:
        return APIError(
            504,
            "the request exceeded the server's timeout",
            type="timeout_error",
            code="request_timeout",
        )
    if t.status == QUEUE_TIMEOUT:
        return APIError(
            503,
            "the request waited in the queue longer than the queue timeout",
            type="server_error",
            code="queue_timeout",
            headers={"Retry-After": "5"},
        )
    if t.status == "error":
        return APIError(500, f"engine error: {t.error}", type="server_error", code="engine_error")
    return APIError(503, f"the request was {t.status}", type="server_error", code=t.status)


async def _complete(
    c: _Ctx, request: Request, queue: asyncio.Queue[TicketEvent], headers: dict[str, str]
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
        if c.srv.scheduler is not None:
            c.srv.scheduler.cancel(c.rid)
        return Response(status_code=499)
    ev = getter.result()
    err = _ended_badly(c)
    if err is not None:
        raise err
    finish = c.ticket.finish_reason or "stop"
    lps = c.ticket.state.token_logprobs if c.ticket.state is not None else []
    tok = c.srv.tokenizer
    if c.chat:
        parsed = parse_tool_calls(ev.text) if c.tools_on else ParsedOutput(ev.text)
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.calls:
            message["tool_calls"] = [
                _call_json(call, i, c.rid) for i, call in enumerate(parsed.calls)
            ]
            finish = "tool_calls"
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": _chat_logprobs(tok, lps) if c.ticket.logprobs is not None else None,
            "finish_reason": finish,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": ev.text,
            "finish_reason": finish,
            "logprobs": _completion_logprobs(tok, lps, 0)
            if c.ticket.logprobs is not None
            else None,
        }
        obj = "text_completion"
    out: dict[str, Any] = {
        "id": c.rid,
        "object": obj,
        "created": c.created,
        "model": c.model,
        "choices": [choice],
        "usage": c.usage(ev.output_tokens),
    }
    if c.detail != "off":
        out["metrics"] = spec_metrics(
            c.ticket, c.k, c.scope, c.srv.cfg.draft_name, c.detail == "detailed"
        )
    c.srv.metrics.succeeded(finish)
    return JSONResponse(out, headers=headers)


def _safe_len(text: str, stops: tuple[str, ...]) -> int:
    """Characters of ``text`` that can be sent now (see the module docstring)."""
    n = len(text)
    if stops:
        n -= max(len(s) for s in stops) - 1
    while n > 0 and text[n - 1] == "\ufffd":
        n -= 1
    return max(n, 0)


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def _stream(c: _Ctx, queue: asyncio.Queue[TicketEvent]) -> AsyncIterator[str]:
    obj = "chat.completion.chunk" if c.chat else "text_completion"
    tok = c.srv.tokenizer
    parser = ToolCallStream() if c.tools_on else None
    n_calls = 0
    sent = 0
    want_lp = c.ticket.logprobs is not None
    lp_offset = 0

    n_tokens = 0

    def chunk(
        delta: dict[str, Any] | str,
        finish: str | None = None,
        lps: list[TokenLogprob] | None = None,
    ) -> dict[str, Any]:
        nonlocal lp_offset
        ch: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if c.chat:
            ch["delta"] = delta
            if want_lp and lps:
                ch["logprobs"] = _chat_logprobs(tok, lps)
        else:
            ch["text"] = delta
            if want_lp and lps:
                ch["logprobs"] = _completion_logprobs(tok, lps, lp_offset)
                lp_offset += sum(len(tok.decode([x.token_id])) for x in lps)
        out: dict[str, Any] = {
            "id": c.rid,
            "object": obj,
            "created": c.created,
            "model": c.model,
            "choices": [ch],
        }
        if c.continuous_usage:
            out["usage"] = c.usage(n_tokens)
        elif c.include_usage:
            out["usage"] = None
        return out

    try:
        if c.chat:
            yield _sse(chunk({"role": "assistant", "content": ""}))
        while True:
            ev = await queue.get()
            lps = list(ev.new_logprobs)
            while not ev.done and not queue.empty():  # the client fell behind: merge
                nxt = queue.get_nowait()
                lps.extend(nxt.new_logprobs)
                ev = nxt
            n_tokens = ev.output_tokens
            if ev.done and c.ticket.status != FINISHED:
                err = _ended_badly(c)
                assert err is not None
                yield _sse(err.body())
                yield "data: [DONE]\n\n"
                return
            safe = len(ev.text) if ev.done else _safe_len(ev.text, c.stops)
            delta = ev.text[sent:safe] if safe > sent else ""
            sent = max(sent, safe)
            pieces: list[dict[str, Any]] = []
            if parser is None:
                if delta or lps:
                    pieces.append({"content": delta} if c.chat else {"text": delta})
            else:
                events = parser.feed(delta) + (parser.finish() if ev.done else [])
                for kind, val in events:
                    if kind == "content":
                        pieces.append({"content": val})
                    else:
                        pieces.append(
                            {"tool_calls": [_call_json(val, n_calls, c.rid, stream=True)]}
                        )
                        n_calls += 1
                if not pieces and lps:
                    pieces.append({"content": ""})
            for i, p in enumerate(pieces):
                lp_here = lps if i == 0 else None
                yield _sse(chunk(p if c.chat else p["text"], None, lp_here))
            if ev.done:
                break
        finish = c.ticket.finish_reason or "stop"
        if n_calls:
            finish = "tool_calls"
        last = chunk({} if c.chat else "", finish)
        if c.detail != "off":
            last["metrics"] = spec_metrics(
                c.ticket, c.k, c.scope, c.srv.cfg.draft_name, c.detail == "detailed"
            )
        yield _sse(last)
        if c.include_usage:
            usage_chunk = {
                "id": c.rid,
                "object": obj,
                "created": c.created,
                "model": c.model,
                "choices": [],
                "usage": c.usage(ev.output_tokens),
            }
            yield _sse(usage_chunk)
        c.srv.metrics.succeeded(finish)
        yield "data: [DONE]\n\n"
    finally:
        # A disconnect cancels this generator: take the request out of the batch at once.
        if not c.ticket.done and c.srv.scheduler is not None:
            c.srv.scheduler.cancel(c.rid)


# ---------------------------------------------------------------------- response pieces
def _call_json(call: ToolCall, index: int, rid: str, stream: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": f"call_{rid[-12:]}_{index}",
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if stream:
        out["index"] = index
    return out


def _token_str(tok: Any, token_id: int) -> str:
    return str(tok.decode([token_id]))


def _chat_logprobs(tok: Any, lps: list[TokenLogprob]) -> dict[str, Any]:
    content = []
    for lp in lps:
        s = _token_str(tok, lp.token_id)
        content.append(
            {
                "token": s,
                "logprob": _finite(lp.logprob),
                "bytes": list(s.encode("utf-8")),
                "top_logprobs": [
                    {
                        "token": (a := _token_str(tok, i)),
                        "logprob": _finite(v),
                        "bytes": list(a.encode("utf-8")),
                    }
                    for i, v in lp.top
                ],
            }
        )
    return {"content": content}


def _completion_logprobs(tok: Any, lps: list[TokenLogprob], offset: int) -> dict[str, Any]:
    tokens, token_lps, tops, offsets = [], [], [], []
    pos = offset
    for lp in lps:
        s = _token_str(tok, lp.token_id)
        tokens.append(s)
        token_lps.append(_finite(lp.logprob))
        tops.append({_token_str(tok, i): _finite(v) for i, v in lp.top} if lp.top else None)
        offsets.append(pos)
        pos += len(s)
    return {
        "tokens": tokens,
        "token_logprobs": token_lps,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def _finite(x: float) -> float:
    # JSON has no -inf; a token with probability 0 under the target (possible after top-k/top-p
    # sampling, since log-probs are raw) is reported at float32's lowest.
    return x if math.isfinite(x) else -3.4028234663852886e38


def spec_metrics(
    t: Ticket, k: int, scope: str, draft: str | None, detailed: bool
) -> dict[str, Any]:
    """The per-request record: vLLM's ``metrics.speculative_decoding`` plus specpilot's timings.

    vLLM fields (``--per-request-spec-decode-metrics``): num_spec_steps (rounds with k > 0),
    num_draft_tokens, num_accepted_draft_tokens (bonus token excluded), draft_acceptance_rate,
    mean_acceptance_length (1 + accepted / steps, bonus included), acceptance_histogram (index
    j: steps that accepted exactly j drafts), num_spec_tokens (k).

    ``specpilot``: rounds (all decode rounds), drafted, accepted, committed (tokens the decode
    rounds appended, bonus included; the first output token comes from prefill), the request's
    share of round time (each round's draft/verify/overhead divided by its batch size),
    queue/prefill/decode seconds, the strategy that served it; ``detailed`` adds every round
    (``round_records``) and the prefill (``prefill_record``), times on the server's clock.
    """
    rounds = t.rounds
    spec = [r for r in rounds if r.proposed > 0]
    drafted = sum(r.proposed for r in spec)
    accepted = sum(r.accepted for r in spec)
    hist = [0] * (max([k, *(r.proposed for r in spec)]) + 1)
    for r in spec:
        hist[r.accepted] += 1
    sd: dict[str, Any] = {
        "num_spec_steps": len(spec),
        "num_draft_tokens": drafted,
        "num_accepted_draft_tokens": accepted,
        "draft_acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1 + accepted / len(spec) if spec else None,
        "acceptance_histogram": hist,
        "num_spec_tokens": k,
    }
    if detailed:
        sd["per_step_accepted"] = [r.accepted for r in spec]
    own: dict[str, Any] = {
        "strategy": {"k": k, "draft": draft if k > 0 else None, "scope": scope},
        "rounds": len(rounds),
        "drafted": drafted,
        "accepted": accepted,
        "committed": sum(r.committed for r in rounds),
        "draft_s": sum(r.draft_s / r.batch_size for r in rounds),
        "verify_s": sum(r.verify_s / r.batch_size for r in rounds),
        "overhead_s": sum(r.overhead_s / r.batch_size for r in rounds),
        "mean_batch_size": sum(r.batch_size for r in rounds) / len(rounds) if rounds else None,
        "queue_s": t.queue_s,
        "prefill_s": t.prefill_s,
        "decode_s": t.decode_s,
        "status": t.status,
    }
    if detailed:
        own["round_records"] = [
            {
                "round_index": r.round_index,
                "proposed": r.proposed,
                "accepted": r.accepted,
                "committed": r.committed,
                "draft_s": r.draft_s,
                "verify_s": r.verify_s,
                "overhead_s": r.overhead_s,
                "batch_size": r.batch_size,
                "truncated": r.truncated,
                "t_start": r.t_start,
            }
            for r in rounds
        ]
        p = t.state.prefill if t.state is not None else None
        own["prefill_record"] = (
            None
            if p is None
            else {
                "prompt_tokens": p.prompt_tokens,
                "target_s": p.target_s,
                "draft_s": p.draft_s,
                "batch_size": p.batch_size,
                "t_start": p.t_start,
            }
        )
    return {"speculative_decoding": sd, "specpilot": own}
