"""The OpenAI-compatible routes: completions, chat completions, models, health, metrics, and
``/version`` (what the server runs, for a client comparing replicas given by URL: as vLLM's
``GET /version``, plus the speculative setup, which vLLM exposes nowhere).

Each generation route checks readiness and the model name, builds the prompt
(:mod:`.prompts`) and hands over to :func:`.generation.generate`.

    >>> app.include_router(router)                                          # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from specpilot import __version__
from specpilot.serve.generation import generate
from specpilot.serve.metrics import CONTENT_TYPE
from specpilot.serve.prompts import chat_prompt, completion_prompt
from specpilot.serve.protocol import APIError, ChatCompletionRequest, CompletionRequest
from specpilot.serve.state import State

router = APIRouter()


@router.get("/health")
async def health(state: State) -> Response:
    if state.load_error:
        return JSONResponse({"status": "error", "error": state.load_error}, status_code=503)
    if not state.ready:
        return JSONResponse({"status": "loading"}, status_code=503)
    if state.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/v1/models")
async def models(state: State) -> dict[str, Any]:
    max_len = state.engine.max_seq_len if state.engine is not None else None
    data = [
        {
            "id": m,
            "object": "model",
            "created": int(state.started_t),
            "owned_by": "specpilot",
            "root": state.cfg.model_name,
            "max_model_len": max_len,
        }
        for m in state.models
    ]
    return {"object": "list", "data": data}


@router.get("/version")
async def version(state: State) -> dict[str, Any]:
    """Read-only: the version, the served models, the draft loaded and the strategy table in
    force (the admin view without its token: nothing here is a secret or changes anything)."""
    return {
        "version": __version__,
        "engine": "builtin",
        "models": list(state.models),
        "draft": state.cfg.draft_name,
        "max_k": state.cfg.max_k,
        "strategy": state.switch.table.to_dict(),
    }


@router.get("/metrics")
async def metrics(state: State) -> Response:
    state.metrics.refresh(state.engine, state.scheduler, state.ready and not state.draining)
    return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request, state: State) -> Response:
    engine, _ = state.check_ready()
    model = state.served_model(body.model)
    _check_prompt_size(state, body)
    # tokenising a long prompt takes time: off the event loop, so it never stalls the others
    ids = await asyncio.to_thread(
        completion_prompt, state.tokenizer, engine.target.cfg.vocab_size, body
    )
    return await generate(state, request, body, ids, model=model, chat=False, tools_on=False)


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request, state: State) -> Response:
    state.check_ready()
    model = state.served_model(body.model)
    tools_on = bool(body.tools) and body.tool_choice != "none"
    _check_prompt_size(state, body)
    ids = await asyncio.to_thread(chat_prompt, state.tokenizer, body, tools_on)
    return await generate(state, request, body, ids, model=model, chat=True, tools_on=tools_on)


def _check_prompt_size(state: Any, body: Any) -> None:
    """A prompt whose text alone cannot fit the context is refused before templating."""
    engine, _ = state.check_ready()
    limit = state.cfg.max_prompt_chars_per_token * engine.max_seq_len
    text = body.model_dump_json(include={"prompt", "messages", "tools"})
    if len(text) > limit:
        raise APIError(
            400,
            f"the prompt is {len(text)} characters: more than {engine.max_seq_len} tokens of "
            f"context can hold (at most {limit} characters are read); shorten it",
            param="messages" if hasattr(body, "messages") else "prompt",
            code="context_length_exceeded",
        )
