"""The HTTP edge: pydantic request models (OpenAI / vLLM conventions) and the error body.

Only request bodies are pydantic models (they validate untrusted input and name the bad
parameter); responses are built as plain dicts by the app, in OpenAI's shapes.

Every string of a request (also inside tool schemas and arguments) must be valid Unicode: JSON
may carry a lone UTF-16 surrogate (``"\\ud800"``), which no tokenizer can encode, so it is a 400
naming the field. ``model`` may be omitted (or null/empty): as vLLM, the server then serves its
one model.

Extensions over OpenAI, all optional and ignored by other servers:
``top_k`` and ``ignore_eos`` (as vLLM), ``tag`` (the task group: selects a strategy scope), and
``spec_metrics`` (``true`` | ``"summary"`` | ``"detailed"``: per-request speculative statistics in
the response's top-level ``metrics`` object).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

MAX_LOGPROBS = 20
_SURROGATE = re.compile("[\ud800-\udfff]")


def _valid_text(v: str) -> str:
    m = _SURROGATE.search(v)
    if m is not None:
        raise ValueError(
            f"contains a lone UTF-16 surrogate (U+{ord(m.group()):04X} at index {m.start()}), "
            "which is not Unicode text; send the character itself or drop it"
        )
    return v


def _valid_json_text(v: Any) -> Any:
    """Every key and string inside a JSON value is valid Unicode (tool schemas, arguments).

    Iterative: a deeply nested value must not hit Python's recursion limit (a 500)."""
    stack: list[tuple[str, Any]] = [("", v)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                raise ValueError(f"{path or 'a string'} contains a lone UTF-16 surrogate")
            continue
        items: Any = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else ()
        )
        for key, item in items:
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _SURROGATE.search(key):
                raise ValueError(f"key {where!r} contains a lone UTF-16 surrogate")
            stack.append((where, item))
    return v


Text = Annotated[str, AfterValidator(_valid_text)]
JSONObject = Annotated[dict[str, Any], AfterValidator(_valid_json_text)]


class APIError(Exception):
    """An OpenAI-style error: ``{"error": {"message", "type", "param", "code"}}`` with a status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type
        self.param, self.code, self.headers = param, code, headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(
    message: str,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    return {
        "error": {
            "message": _encodable(message),
            "type": type,
            "param": None if param is None else _encodable(param),
            "code": code,
        }
    }


def _encodable(text: str) -> str:
    """``text`` with lone surrogates escaped: an error that quotes bad input must still encode."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Model(BaseModel):
    # Unknown fields are ignored (clients send many); known-but-unsupported ones are checked.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class StreamOptions(_Model):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM: usage (tokens so far) in every chunk


class FunctionDefinition(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: Text | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None


class ToolDefinition(_Model):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Model):
    name: Text


class NamedToolChoice(_Model):
    type: Literal["function"] = "function"
    function: NamedFunction


class ToolCallFunction(_Model):
    name: Text
    arguments: Text | JSONObject = "{}"


class ToolCallIn(_Model):
    id: Text | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ContentPart(_Model):
    type: Text
    text: Text | None = None


class ChatMessage(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[ContentPart] | None = None
    name: Text | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: Text | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        out = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise ValueError(f"content part type {part.type!r} is not supported (text only)")
            out.append(part.text)
        return "".join(out)


class _Sampling(_Model):
    model: Text | None = None  # None or "": the served model (as vLLM)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=100.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)  # -1 or 0: off (vLLM uses -1)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    stop: Text | list[Text] | None = None
    n: int = Field(default=1, ge=1, le=1)  # one choice per request
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = Field(default=0.0, ge=0.0, le=0.0)
    frequency_penalty: float = Field(default=0.0, ge=0.0, le=0.0)
    logit_bias: dict[str, float] | None = Field(default=None, max_length=0)
    ignore_eos: bool = False
    user: Text | None = None
    tag: Text | None = Field(default=None, max_length=128)
    spec_metrics: bool | Literal["summary", "detailed"] | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        items = [v] if isinstance(v, str) else (v or [])
        if len(items) > 16:
            raise ValueError("at most 16 stop strings")
        if any(not s for s in items):
            raise ValueError("stop strings must be non-empty")
        return v

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class CompletionRequest(_Sampling):
    prompt: Text | list[int] | list[Text] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    echo: bool = Field(default=False)
    best_of: int | None = Field(default=None, ge=1, le=1)
    suffix: str | None = Field(default=None, max_length=0)

    @field_validator("echo")
    @classmethod
    def _echo(cls, v: bool) -> bool:
        if v:
            raise ValueError("echo is not supported")
        return v


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    tools: list[ToolDefinition] | None = Field(default=None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None


class StrategyUpdate(_Model):
    """Admin: set the strategy of one scope. ``k`` = 0 turns speculation off, null removes an override."""

    scope: Text = Field(pattern=r"^(default|model:.{1,128}|tag:.{1,128})$")
    k: int | None = Field(ge=0, le=64)


ScopeName = Annotated[str, AfterValidator(_valid_text), Field(min_length=1, max_length=128)]
ScopeK = Annotated[int, Field(ge=0, le=64)]


class StrategyTableBody(BaseModel):
    """Admin: replace the whole strategy table at once, in ``--strategy-file``'s format
    (``default``, ``models``, ``tags``; a missing ``default`` keeps the current one). Unknown
    keys are refused: a misspelt ``tag`` would otherwise leave a scope unswitched."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    default: ScopeK | None = None
    models: dict[ScopeName, ScopeK] = Field(default_factory=dict, max_length=1024)
    tags: dict[ScopeName, ScopeK] = Field(default_factory=dict, max_length=1024)
