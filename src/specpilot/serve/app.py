"""The OpenAI-compatible HTTP server over one Engine (through the Scheduler).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (JSON or SSE with
``data: [DONE]``), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus),
``GET /version`` (version, draft and strategy table: read-only, for comparing replicas), and the
admin switch (loopback only, ``Authorization: Bearer <admin token>``): ``GET|PUT
/admin/strategy``, ``POST /admin/strategy/reload``, ``POST /admin/drain``, ``POST /admin/resume``.
With ``ServerConfig.api_key`` set, ``/v1`` answers only ``Authorization: Bearer <api key>``
(:mod:`.apikey`, vLLM's ``--api-key``).

This module builds the app: configuration and lifecycle (:mod:`.state`), the routes
(:mod:`.routes`, :mod:`.admin`) and the error handlers. Every error is OpenAI's
``{"error": {"message", "type", "param", "code"}}``: a bad request is a 400 naming the field
(a body that is not JSON says where it breaks; one too large or nested too deep is refused
by :mod:`.body` before any route reads it), and a bug is a 500 that leaves the keep-alive
connection usable. The request path is :mod:`.prompts` -> :mod:`.generation` ->
:mod:`.streaming` / :mod:`.responses`.

    >>> app = create_app(ServerConfig(model_name="m"), engine=engine)        # doctest: +SKIP
    >>> uvicorn.run(app, host="127.0.0.1", port=8000)                         # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specpilot.engine.generate import Engine
from specpilot.serve import admin, routes
from specpilot.serve.apikey import ApiKeyGate
from specpilot.serve.body import BodyGuard
from specpilot.serve.protocol import APIError, error_body
from specpilot.serve.responses import spec_metrics
from specpilot.serve.state import LOOPBACK, ServerConfig, ServerState

__all__ = ["LOOPBACK", "ServerConfig", "create_app", "spec_metrics"]
log = logging.getLogger("specpilot.serve")
# FastAPI's detail when the body cannot be decoded at all (json.loads raised something other
# than JSONDecodeError: bytes that are not UTF-8; nesting past Python's recursion limit never
# gets here, serve.body refuses it first).
_FASTAPI_UNPARSABLE = "There was an error parsing the body"
_UNPARSABLE = "the request body is not valid JSON: it must be UTF-8 text"
# Union members pydantic puts into an error's location; the field path is what a client needs.
# Only whole tags: "str", "list[str]", "literal['auto']", "function-after[...]", a model class;
# never a field name that merely starts like one ("stream", "strict").
_UNION_MEMBER = re.compile(
    r"^(str|int|bool|float|list|dict|set|tuple|bytes|none)(\[.*\])?$|^[a-z-]+\[.*\]$"
    r"|^function-|^[A-Z]\w*$"
)


def create_app(
    config: ServerConfig | None = None,
    engine: Engine | None = None,
    loader: Callable[[], Engine] | None = None,
) -> FastAPI:
    """An app serving ``engine`` (ready at start-up) or whatever ``loader()`` returns (503 until then)."""
    state = ServerState(config or ServerConfig(), engine, loader)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start()
        yield
        state.stop()

    app = FastAPI(title="specpilot", version="0.1.0", lifespan=lifespan)
    app.state.server = state
    app.add_middleware(_InternalErrors)
    app.add_middleware(
        BodyGuard,
        max_bytes=state.cfg.max_body_bytes,
        max_depth=state.cfg.max_json_depth,
        max_values=state.cfg.max_json_values,
    )
    if state.cfg.api_key:  # before any body is read, like the admin gate
        app.add_middleware(ApiKeyGate, api_key=state.cfg.api_key)
    app.add_middleware(admin.AdminGate, cfg=state.cfg)  # outermost: auth before any body
    _error_handlers(app, state)
    app.include_router(routes.router)
    app.include_router(admin.router)
    return app


def invalid_body_error(exc: RequestValidationError) -> APIError:
    """The 400 for a request that failed validation: its first error, by field path."""
    first: dict[str, Any] = dict(exc.errors()[0]) if exc.errors() else {}
    if first.get("type") == "json_invalid":
        return APIError(400, _json_error(first, exc.body), code="invalid_json")
    if tuple(first.get("loc", ())) == ("body",) and first.get("type") == "missing":
        msg = (
            "the request body is empty: send a JSON object with model and messages (chat) or "
            "prompt (completions)"
        )
        return APIError(400, msg, code="invalid_json")
    if tuple(first.get("loc", ())) == ("body",) and first.get("type") == "model_attributes_type":
        msg = "the request body must be a JSON object (sent with Content-Type: application/json)"
        return APIError(400, msg, code="invalid_json")
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(p for p in loc if not _UNION_MEMBER.match(p)) or None
    msg = str(first.get("msg", "invalid request body"))
    return APIError(400, f"{param}: {msg}" if param else msg, param=param, code="invalid_parameter")


def _json_error(err: dict[str, Any], doc: Any) -> str:
    """'not valid JSON' with where it breaks (json's own line/column, from the body)."""
    reason = str((err.get("ctx") or {}).get("error", "JSON decode error"))
    loc = err.get("loc", ())
    pos = loc[-1] if loc and isinstance(loc[-1], int) else None
    if pos is None or not isinstance(doc, str | bytes):
        return f"the request body is not valid JSON: {reason}"
    text = doc.decode("utf-8", "replace") if isinstance(doc, bytes) else doc
    where = json.JSONDecodeError(reason, text, pos)  # computes lineno / colno as json does
    return (
        f"the request body is not valid JSON: {reason} at line {where.lineno} "
        f"column {where.colno} (char {pos})"
    )


def _error_handlers(app: FastAPI, state: ServerState) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        state.metrics.request_outcome("invalid")
        return JSONResponse(invalid_body_error(exc).body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        msg, code = str(exc.detail), None
        if exc.status_code == 400 and msg == _FASTAPI_UNPARSABLE:
            msg, code = _UNPARSABLE, "invalid_json"
        return JSONResponse(
            error_body(msg, type=kind, code=code),
            status_code=exc.status_code,
            headers=exc.headers,
        )


class _InternalErrors:
    """A bug in a handler answers a JSON 500 and keeps the connection open.

    Starlette's own last-resort handler answers too, but then re-raises, and the server drops
    the keep-alive connection, so a client's next request on it fails. Here the error is logged
    with its traceback and not re-raised, unless the response had already started (a stream),
    where only closing the connection can tell the client.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            body = error_body(f"internal error: {type(exc).__name__}", type="server_error")
            await JSONResponse(body, status_code=500)(scope, receive, send)
