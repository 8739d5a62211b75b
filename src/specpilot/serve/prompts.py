"""Prompt building: a completion's prompt or a chat conversation (with tools) -> token ids.

Chat messages go through the tokenizer's chat template; ``developer`` is sent as ``system``.
Tools are passed to templates that use them, otherwise (SmolLM2) rendered into the system
message; earlier assistant tool calls likewise. Anything the tokenizer or the template refuses
is a 400 naming ``prompt`` / ``messages``, never a 500.

    >>> ids = chat_prompt(tokenizer, body, tools_on=False)                   # doctest: +SKIP
    >>> ids = completion_prompt(tokenizer, vocab_size=49152, body=body)      # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from specpilot.serve.protocol import APIError, ChatCompletionRequest, CompletionRequest
from specpilot.serve.toolcalls import (
    assistant_tool_text,
    template_supports_tools,
    tools_system_prompt,
)


def _encode(tok: Any, text: str, param: str, **kw: Any) -> list[int]:
    try:
        return [int(i) for i in tok.encode(text, **kw)]
    except (TypeError, ValueError, UnicodeError) as exc:  # text the tokenizer cannot take
        raise APIError(
            400, f"{param}: the tokenizer cannot encode it ({exc})", param=param
        ) from None


def completion_prompt(tok: Any, vocab_size: int, body: CompletionRequest) -> list[int]:
    """One prompt (text or token ids) -> ids; batches of prompts are refused."""
    p: Any = body.prompt
    if isinstance(p, list) and p and not isinstance(p[0], int):
        if len(p) != 1:
            raise APIError(
                400, "one prompt per request (batch prompts are not supported)", param="prompt"
            )
        p = p[0]
    if isinstance(p, str):
        ids = _encode(tok, p, "prompt")
    else:
        ids = [int(i) for i in p]
        if any(not 0 <= i < vocab_size for i in ids):
            raise APIError(400, f"prompt token ids must be in [0, {vocab_size})", param="prompt")
    if not ids:
        raise APIError(400, "prompt must not be empty", param="prompt")
    return ids


def chat_prompt(tok: Any, body: ChatCompletionRequest, tools_on: bool) -> list[int]:
    """The conversation rendered by the chat template, with the generation prompt, -> ids."""
    native = template_supports_tools(tok)
    msgs = _messages(body, native)
    tools = _tools(body, msgs, native) if tools_on and body.tools else None
    try:
        text = tok.apply_chat_template(
            msgs, tools=tools, add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:  # jinja errors: a template rejecting this conversation
        raise APIError(
            400, f"messages: the chat template rejected them: {exc}", param="messages"
        ) from None
    return _encode(tok, text, "messages", add_special_tokens=False)


def _messages(body: ChatCompletionRequest, native: bool) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for i, m in enumerate(body.messages):
        role = "system" if m.role == "developer" else m.role
        try:
            text = m.text()
            if m.role == "assistant" and m.tool_calls and not native:
                text = assistant_tool_text(text, [c.model_dump() for c in m.tool_calls])
        except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
            raise APIError(400, f"messages.{i}: {exc}", param="messages") from None
        d: dict[str, Any] = {"role": role, "content": text}
        if native and m.tool_calls:
            d["tool_calls"] = [c.model_dump() for c in m.tool_calls]
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        msgs.append(d)
    return msgs


def _tools(
    body: ChatCompletionRequest, msgs: list[dict[str, Any]], native: bool
) -> list[dict[str, Any]] | None:
    """Tools for a template that takes them; otherwise folded into the system message."""
    assert body.tools
    tools = [t.model_dump(exclude_none=True) for t in body.tools]
    choice = body.tool_choice
    if choice is not None and not isinstance(choice, str):
        name = choice.function.name
        tools = [t for t in tools if t["function"]["name"] == name]
        if not tools:
            raise APIError(
                400, f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
            )
    if native:
        return tools
    choice_arg = (
        choice.model_dump() if choice is not None and not isinstance(choice, str) else choice
    )
    sys_text = tools_system_prompt(tools, choice_arg)
    if msgs and msgs[0]["role"] == "system":
        msgs[0] = {**msgs[0], "content": f"{msgs[0]['content']}\n\n{sys_text}"}
    else:
        msgs.insert(0, {"role": "system", "content": sys_text})
    return None
