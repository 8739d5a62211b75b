"""``specpilot serve --api-key``: the ``/v1`` routes answer only requests that carry
``Authorization: Bearer <key>``.

The scope is vLLM's ``--api-key`` (its ``AuthenticationMiddleware``): every path under
``/v1`` is guarded, ``OPTIONS`` (CORS preflight) passes, and ``/health``, ``/metrics`` and
``/admin`` (which has its own token, ``serve.admin``) stay as they are. The refusal is a 401
in OpenAI's error shape, as every other error of this server (vLLM answers
``{"error": "Unauthorized"}``; OpenAI answers ``invalid_api_key`` in its error object). The
key is compared as a sha256 digest in constant time, and never logged or echoed.

    >>> gate = ApiKeyGate(app, "k")                                         # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from specpilot.serve.protocol import error_body

GUARDED = "/v1"


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def bearer_matches(authorization: str, key_digest: bytes) -> bool:
    """``Authorization: Bearer <key>`` with the key whose sha256 is ``key_digest``.

    >>> bearer_matches("Bearer k1", _digest("k1")), bearer_matches("Basic k1", _digest("k1"))
    (True, False)
    """
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(_digest(token.strip()), key_digest)


def guarded(path: str) -> bool:
    """The paths the key guards: ``/v1`` and everything under it.

    >>> guarded("/v1/models"), guarded("/v1"), guarded("/v10"), guarded("/health")
    (True, True, False, False)
    """
    return path == GUARDED or path.startswith(GUARDED + "/")


class ApiKeyGate:
    """ASGI middleware: a guarded request without the key is answered 401 before its body is
    read (it learns nothing about how the body would be judged)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.key_digest = _digest(api_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope.get("method") != "OPTIONS"
            and guarded(str(scope.get("path", "")).removeprefix(str(scope.get("root_path", ""))))
            and not bearer_matches(Headers(scope=scope).get("authorization", ""), self.key_digest)
        ):
            body = error_body(
                "missing or wrong API key: send Authorization: Bearer <key>",
                type="invalid_request_error",
                code="invalid_api_key",
            )
            response = JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
