"""The HTTP edge: pydantic request models (OpenAI / vLLM conventions) and the error body.

Only request bodies are pydantic models (they validate untrusted input and name the bad
parameter); responses are built as plain dicts by the app, in OpenAI's shapes.

Extensions over OpenAI, all optional and ignored by other servers:
``top_k`` and ``ignore_eos`` (as vLLM), ``tag`` (the task group: selects a strategy scope), and
``spec_metrics`` (``true`` | ``"summary"`` | ``"detailed"``: per-request speculative statistics in
the response's top-level ``metrics`` object).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_LOGPROBS = 20


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
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class _Model(BaseModel):
    # Unknown fields are ignored (clients send many); known-but-unsupported ones are checked.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class StreamOptions(_Model):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM: usage (tokens so far) in every chunk


class FunctionDefinition(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(_Model):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Model):
    name: str


class NamedToolChoice(_Model):
    type: Literal["function"] = "function"
    function: NamedFunction


class ToolCallFunction(_Model):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(_Model):
    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ContentPart(_Model):
    type: str
    text: str | None = None


class ChatMessage(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

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
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=100.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)  # -1 or 0: off (vLLM uses -1)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=1)  # one choice per request
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = Field(default=0.0, ge=0.0, le=0.0)
    frequency_penalty: float = Field(default=0.0, ge=0.0, le=0.0)
    logit_bias: dict[str, float] | None = Field(default=None, max_length=0)
    ignore_eos: bool = False
    user: str | None = None
    tag: str | None = Field(default=None, max_length=128)
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
    prompt: str | list[int] | list[str] | list[list[int]]
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

    scope: str = Field(pattern=r"^(default|model:.{1,128}|tag:.{1,128})$")
    k: int | None = Field(ge=0, le=64)
