"""The admin endpoints: the runtime strategy switch (R8) and drain/resume.

Loopback clients only, with ``Authorization: Bearer <admin token>`` (no token configured: 403).

Threat model: the token is the guard; the loopback check is a second fence that a local
reverse proxy defeats (every client it forwards arrives from 127.0.0.1). So a request that
carries a proxy's headers (``Forwarded``, ``X-Forwarded-For``, ``X-Real-IP``, ``Via``) is
refused (403) first, unless ``admin_trust_proxy`` is set (then uvicorn takes the client from
``X-Forwarded-For`` of a loopback proxy, and that address must be in ``admin_hosts``); a
proxy that adds none of them cannot be told from a local client: do not route ``/admin``
through one.
``GET|PUT /admin/strategy`` (one scope), ``POST /admin/strategy`` (the whole table at once, in
``--strategy-file``'s format: a rollout's scope file), ``POST /admin/strategy/reload`` (re-read ``--strategy-file``; a bad
file changes nothing), ``POST /admin/drain`` (503 to new requests, running ones finish),
``POST /admin/resume``. A change applies to requests that arrive after it; the answer says how
long it took to be in force (``in_force_after_s``).

    >>> app.include_router(admin.router)                                    # doctest: +SKIP
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from specpilot.errors import SpecpilotError
from specpilot.serve.protocol import APIError, StrategyTableBody, StrategyUpdate
from specpilot.serve.state import ServerConfig, ServerState, State
from specpilot.serve.strategy import StrategyTable

log = logging.getLogger("specpilot.serve")
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip", "via")


def admin_refusal(cfg: ServerConfig, client: str, headers: Mapping[str, str]) -> APIError | None:
    """Why an /admin request is refused (403: proxied, not loopback, no token configured; 401:
    a missing or wrong token), or None when it may pass. Reads only the client and headers, so
    :class:`AdminGate` decides before any body is read."""
    proxied = [h for h in PROXY_HEADERS if h in headers]
    if proxied and not cfg.admin_trust_proxy:
        return APIError(
            403,
            f"admin endpoints refuse proxied requests ({', '.join(proxied)} present): the "
            "loopback check cannot see the real client behind a proxy; call /admin directly "
            "(or start the server with admin_trust_proxy)",
            type="permission_error",
        )
    if client not in cfg.admin_hosts:
        return APIError(
            403, "admin endpoints answer loopback clients only", type="permission_error"
        )
    if not cfg.admin_token:
        return APIError(
            403,
            "admin endpoints are disabled (start the server with an admin token)",
            type="permission_error",
        )
    got = headers.get("authorization", "")
    if not hmac.compare_digest(got.encode(), f"Bearer {cfg.admin_token}".encode()):
        return APIError(
            401,
            "missing or wrong admin token (Authorization: Bearer ...)",
            type="authentication_error",
        )
    return None


def require_admin(request: Request, state: State) -> None:
    """The routes' own fence (the same rule as :class:`AdminGate`, for a router mounted
    without it)."""
    host = request.client.host if request.client else ""
    refusal = admin_refusal(state.cfg, host, request.headers)
    if refusal is not None:
        raise refusal


class AdminGate:
    """ASGI middleware in front of the body guard: an /admin request that may not pass is
    answered (401/403) before its body is read, so an unauthenticated caller learns nothing
    about how its body would be judged (too large, too deep, not JSON)."""

    def __init__(self, app: ASGIApp, cfg: ServerConfig) -> None:
        self.app, self.cfg = app, cfg

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "http" and (path == "/admin" or path.startswith("/admin/")):
            client = scope.get("client")
            refusal = admin_refusal(self.cfg, client[0] if client else "", Headers(scope=scope))
            if refusal is not None:
                response = JSONResponse(
                    refusal.body(), status_code=refusal.status, headers=refusal.headers
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])


def _view(state: ServerState) -> dict[str, Any]:
    return {**state.switch.table.to_dict(), "draft": state.cfg.draft_name, "max_k": state.cfg.max_k}


def _applied(state: ServerState, table: StrategyTable, t0: float) -> dict[str, Any]:
    dt = time.perf_counter() - t0
    state.metrics.switched(dt)
    state.metrics.strategy(table.flat())
    return {**_view(state), "in_force_after_s": dt}


@router.get("/strategy")
async def get_strategy(state: State) -> dict[str, Any]:
    return _view(state)


@router.put("/strategy")
async def put_strategy(update: StrategyUpdate, state: State) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        table = state.switch.set(update.scope, update.k)
    except SpecpilotError as exc:
        raise APIError(400, str(exc), param="k", code="invalid_strategy") from None
    out = _applied(state, table, t0)
    log.info(
        "strategy %s -> k=%s (version %d, in force after %.6fs)",
        update.scope,
        update.k,
        table.version,
        out["in_force_after_s"],
    )
    return out


@router.post("/strategy")
async def post_strategy(body: StrategyTableBody, state: State) -> dict[str, Any]:
    """Replace the whole table (every scope checked first; a bad body changes nothing)."""
    t0 = time.perf_counter()
    try:
        table = state.switch.load(body.model_dump(exclude_none=True))
    except SpecpilotError as exc:
        raise APIError(400, str(exc), code="invalid_strategy") from None
    out = _applied(state, table, t0)
    log.info("strategy table replaced (version %d): %s", table.version, table.flat())
    return out


@router.post("/strategy/reload")
async def reload_strategy(state: State) -> dict[str, Any]:
    t0 = time.perf_counter()
    if state.cfg.strategy_file is None:
        raise APIError(
            400, "the server was started without --strategy-file", code="no_strategy_file"
        )
    try:
        table = state.switch.load_file(state.cfg.strategy_file)
    except SpecpilotError as exc:
        raise APIError(400, f"strategy file not applied: {exc}", code="invalid_strategy") from None
    return _applied(state, table, t0)


@router.post("/drain")
async def drain(state: State) -> dict[str, Any]:
    state.draining = True
    if state.scheduler is not None:
        state.scheduler.drain()
    running, waiting = state.scheduler.counts() if state.scheduler else (0, 0)
    return {"status": "draining", "running": running, "waiting": waiting}


@router.post("/resume")
async def resume(state: State) -> dict[str, Any]:
    state.draining = False
    if state.scheduler is not None:
        state.scheduler.resume()
    return {"status": "ok"}
