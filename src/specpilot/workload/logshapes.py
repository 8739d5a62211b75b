"""The line shapes of a request log: each reads lines into requests with a time, a body and the
fields a route may name (:mod:`.requestlog` selects, scales and groups them).

Supported shapes, and where each one's fields were copied from:

- ``openai_batch``: OpenAI Batch API input lines ``{"custom_id", "method", "url", "body"}``
  (``BatchRequestInput`` in github.com/openai/openai-openapi ``openapi.yaml``, commit 498c71d;
  https://platform.openai.com/docs/api-reference/batch/request-input). The format has no time:
  each line needs one the user adds (``timestamp`` or ``created``, unix seconds or ISO 8601, or
  the field named by ``time_field``). ``url`` ``/v1/chat/completions`` is chat,
  ``/v1/completions`` completions; other URLs (``/v1/embeddings``) are skipped and counted.
- ``litellm_spend``: rows of LiteLLM's ``LiteLLM_SpendLogs`` table, one JSON object a line
  (``model LiteLLM_SpendLogs`` in github.com/BerriAI/litellm ``schema.prisma``, commit a953319;
  the values as ``get_logging_payload`` writes them in
  ``litellm/proxy/spend_tracking/spend_tracking_utils.py``, commit 00907c6). The time is
  ``startTime`` (UTC); rows of failed requests (``status: failure``) arrived too and are kept; the body is ``proxy_server_request`` (the client's request body, stored only
  with ``general_settings: store_prompts_in_spend_logs: true``; strings past LiteLLM's limit are
  cut and marked ``litellm_truncated``, flagged here); ``call_type`` ``acompletion`` /
  ``completion`` is chat, ``atext_completion`` / ``text_completion`` completions, the rest
  (embeddings, images ...) is skipped; ``completion_tokens`` is the logged output length.
  Export: ``psql -At -c 'select row_to_json(s) from "LiteLLM_SpendLogs" s' > spend.jsonl``
  (the ``/spend/logs`` API returns a JSON array: ``jq -c '.[]'`` makes it lines).
- ``vllm_log``: the text log of ``vllm serve --enable-log-requests`` (``RequestLogger`` in
  github.com/vllm-project/vllm ``vllm/entrypoints/logger.py``, the one-line form at commit
  01ff126, the two-line form at 63c2b7a; ``SamplingParams.__repr__`` in
  ``vllm/sampling_params.py``; the line prefix is ``_FORMAT`` / ``_DATE_FORMAT`` =
  ``%m-%d %H:%M:%S`` in ``vllm/logger.py``). Older vLLM logs ``Received request ID: prompt:
  REPR, params: SamplingParams(...), prompt_token_ids: [...]`` on one INFO line; newer vLLM logs
  ``Received request ID: params: ...`` at INFO and the prompt in ``Request ID details: prompt:
  REPR, prompt_token_ids: [...]`` at DEBUG only (``VLLM_LOGGING_LEVEL=DEBUG``). Both are read.
  The logged prompt is the text after the chat template, so every request replays as
  completions; the body keeps the SamplingParams that have a request field. The default time has
  no year and whole seconds (see :mod:`.requestlog` for the spreading). Routes: ``request_id``,
  ``lora_name`` (of ``lora_request: LoRARequest(lora_name=...)``). ``--max-log-len`` cuts
  prompts, which then replay cut: leave it unset.
- ``jsonl``: ``{"timestamp": ..., "body": {...}}`` plus any route or group fields: the plain
  form (``url`` as in a batch line is optional; without it the body's ``messages`` or ``prompt``
  tells the API).

    >>> line = Line(1, 0, '{"custom_id": "r1", "method": "POST", "url": "/v1/completions", '
    ...                   '"body": {"prompt": "Hi", "stream": true}, "timestamp": 3.5}')
    >>> [(r.t, r.api, r.body) for r in OpenAIBatch("log.jsonl").read([line])]
    [(3.5, 'completions', {'prompt': 'Hi'})]
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from specpilot.errors import InputFileError

__all__ = [
    "SHAPES",
    "TRANSPORT_FIELDS",
    "Line",
    "LiteLLMSpend",
    "OpenAIBatch",
    "Parsed",
    "PlainJsonl",
    "Skipped",
    "body_sha256",
    "detect_shape",
    "input_tokens_est",
    "lookup",
    "parse_time",
]

SHAPES = ("openai_batch", "litellm_spend", "vllm_log", "jsonl")
# How the response travels, not what is asked: the load generator decides (it always streams),
# and a request logged streamed hashes as the same request logged whole.
TRANSPORT_FIELDS = ("stream", "stream_options")
TIME_FIELDS = ("timestamp", "created")
CHARS_PER_TOKEN = 4.0  # as workload.assign pads; exact counts are measured at replay
MISSING: Any = object()


@dataclass(frozen=True)
class Line:
    number: int  # 1-based
    offset: int  # byte offset of its first byte
    text: str  # without the line break


@dataclass(frozen=True)
class Parsed:
    """One request as logged: ``t`` in the log's seconds, ``fields`` what routes may name."""

    lines: tuple[Line, ...]  # the line(s) it was read from
    t: float
    whole_second: bool  # the time had no fraction
    api: str  # "chat" | "completions"
    body: dict[str, Any]
    fields: dict[str, Any]
    request_id: str | None = None
    input_tokens: int | None = None  # exact, when the log has the prompt's token ids
    output_tokens: int | None = None  # the logged output length, when the log has one
    truncated: bool = False  # the log cut the body (LiteLLM's litellm_truncated marker)


@dataclass(frozen=True)
class Skipped:
    line: Line
    reason: str  # e.g. "url /v1/embeddings", "call_type aembedding", "PoolingParams"


def body_sha256(body: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a body (sorted keys, no spaces, UTF-8)."""
    blob = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _text_len(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):  # content parts, or a completions prompt of several strings
        return sum(
            len(p) if isinstance(p, str) else len(str(p.get("text") or ""))
            for p in content
            if isinstance(p, str | dict)
        )
    return 0


def input_tokens_est(api: str, body: dict[str, Any], exact: int | None = None) -> int:
    """The prompt's tokens: ``exact`` when the log had them, else characters / 4."""
    if exact is not None:
        return exact
    prompt = body.get("prompt")
    if api == "completions" and isinstance(prompt, list) and all(type(x) is int for x in prompt):
        return len(prompt)
    if api == "chat":
        chars = sum(_text_len(m.get("content")) for m in body["messages"])
    else:
        chars = _text_len(prompt)
    return math.ceil(chars / CHARS_PER_TOKEN)


def lookup(obj: dict[str, Any], path: str) -> Any:
    """``obj``'s value at a dotted path (``metadata.model_group``), or MISSING. A JSON string on
    the way is decoded (LiteLLM's ``metadata`` column is one)."""
    cur: Any = obj
    for part in path.split("."):
        if isinstance(cur, str) and cur.lstrip().startswith("{"):
            try:
                cur = json.loads(cur)
            except ValueError:
                return MISSING
        if not isinstance(cur, dict) or part not in cur:
            return MISSING
        cur = cur[part]
    return cur


def _bad(source: str, line: Line, what: str, fix: str | None = None) -> InputFileError:
    return InputFileError(f"{source}:{line.number}: {what}", fix=fix)


def parse_time(value: Any, source: str, line: Line, name: str) -> tuple[float, bool]:
    """(unix seconds, whole second?) of a number or an ISO 8601 string (naive: UTC)."""
    fix = "give unix seconds (a number) or ISO 8601, e.g. 2025-03-01T12:00:00.250Z"
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value), float(value).is_integer()
    if isinstance(value, str):
        try:
            v = float(value)
            return v, v.is_integer()
        except ValueError:
            pass
        try:
            d = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise _bad(source, line, f"{name}: cannot read {value!r} as a time", fix) from None
        d = d if d.tzinfo else d.replace(tzinfo=dt.UTC)
        return d.timestamp(), d.microsecond == 0
    raise _bad(source, line, f"{name}: {value!r} is not a time", fix)


def _json_object(source: str, line: Line) -> dict[str, Any] | None:
    text = line.text.strip()
    if not text:
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(
            source, line, f"not valid JSON ({exc.msg}, column {exc.colno})", "one object a line"
        ) from None
    if not isinstance(obj, dict):
        raise _bad(source, line, f"a JSON {type(obj).__name__}, not an object", "one object a line")
    return obj


def _body(value: Any, api: str, source: str, line: Line, name: str) -> dict[str, Any]:
    """The request body to replay: checked for its API's prompt, transport fields dropped."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise _bad(source, line, f"{name}: not a JSON object") from None
    if not isinstance(value, dict):
        raise _bad(source, line, f"{name}: missing or not an object", "log the request body")
    if api == "chat":
        msgs = value.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise _bad(
                source, line, f"{name}.messages: a chat body needs a list of messages", _API_FIX
            )
    elif not isinstance(value.get("prompt"), str | list):
        raise _bad(source, line, f"{name}.prompt: a completions body needs a prompt", _API_FIX)
    return {k: v for k, v in value.items() if k not in TRANSPORT_FIELDS}


_API_FIX = "chat bodies have messages: [{role, content}], completions bodies a prompt"
_URLS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}


class _JsonShape:
    """A shape of one JSON object a line."""

    name = ""

    def __init__(self, source: str, time_field: str | None = None) -> None:
        self.source, self.time_field = source, time_field

    def read(self, lines: Iterable[Line]) -> Iterator[Parsed | Skipped]:
        for line in lines:
            obj = _json_object(self.source, line)
            if obj is not None:
                yield self.request(obj, line)

    def request(self, obj: dict[str, Any], line: Line) -> Parsed | Skipped:
        raise NotImplementedError

    def time(self, obj: dict[str, Any], line: Line, fix: str) -> tuple[float, bool]:
        names = (self.time_field,) if self.time_field else TIME_FIELDS
        for name in names:
            v = lookup(obj, name)
            if v is not MISSING and v is not None:
                return parse_time(v, self.source, line, name)
        raise _bad(self.source, line, f"no time: none of {', '.join(names)} is there", fix)


class OpenAIBatch(_JsonShape):
    name = "openai_batch"
    TIME_FIX = (
        'the Batch API input format has no time of its own: add "timestamp": <unix seconds or '
        "ISO 8601> (when the request was made) to each line, or name its field in time_field"
    )

    def request(self, obj: dict[str, Any], line: Line) -> Parsed | Skipped:
        url = obj.get("url")
        if not isinstance(url, str):
            raise _bad(
                self.source,
                line,
                "url: missing (a Batch API line has custom_id, method, url and body)",
                'add "url": "/v1/chat/completions" or "/v1/completions"',
            )
        api = _URLS.get(url.rstrip("/"))
        if api is None:
            return Skipped(line, f"url {url}")
        if obj.get("method", "POST") != "POST":
            raise _bad(
                self.source, line, f"method: {obj['method']!r}; batch lines are POST", "POST"
            )
        body = _body(obj.get("body"), api, self.source, line, "body")
        t, whole = self.time(obj, line, self.TIME_FIX)
        rid = obj.get("custom_id")
        return Parsed((line,), t, whole, api, body, obj, str(rid) if rid is not None else None)


class PlainJsonl(_JsonShape):
    name = "jsonl"
    TIME_FIX = 'give each line "timestamp": <unix seconds or ISO 8601>, or name it in time_field'

    def request(self, obj: dict[str, Any], line: Line) -> Parsed | Skipped:
        body, url = obj.get("body"), obj.get("url")
        if not isinstance(body, dict):
            raise _bad(
                self.source,
                line,
                "body: missing or not an object",
                'each line is {"timestamp": ..., "body": {an OpenAI chat or completions request}}',
            )
        api = _URLS.get(url.rstrip("/")) if isinstance(url, str) else None
        if isinstance(url, str) and api is None:
            return Skipped(line, f"url {url}")
        api = api or ("chat" if "messages" in body else "completions" if "prompt" in body else None)
        if api is None:
            raise _bad(self.source, line, "body: neither messages nor prompt", _API_FIX)
        t, whole = self.time(obj, line, self.TIME_FIX)
        rid = obj.get("request_id", obj.get("custom_id"))
        body = _body(body, api, self.source, line, "body")
        return Parsed((line,), t, whole, api, body, obj, str(rid) if rid is not None else None)


class LiteLLMSpend(_JsonShape):
    name = "litellm_spend"
    CALLS: ClassVar[dict[str, str]] = {
        "acompletion": "chat",
        "completion": "chat",
        "atext_completion": "completions",
        "text_completion": "completions",
    }
    NO_BODY_FIX = (
        "LiteLLM stores request bodies only with general_settings: store_prompts_in_spend_logs: "
        "true (or STORE_PROMPTS_IN_SPEND_LOGS=True): turn it on and export the rows logged after"
    )

    def request(self, obj: dict[str, Any], line: Line) -> Parsed | Skipped:
        call = obj.get("call_type")
        api = self.CALLS.get(call) if isinstance(call, str) else None
        if api is None:
            return Skipped(line, f"call_type {call}")
        if obj.get("startTime") is None:
            raise _bad(
                self.source, line, "startTime: missing", "export whole LiteLLM_SpendLogs rows"
            )
        t, whole = parse_time(obj["startTime"], self.source, line, "startTime")
        raw = obj.get("proxy_server_request")
        if raw in (None, "", "{}", {}):
            raise _bad(
                self.source, line, "proxy_server_request: empty (no body logged)", self.NO_BODY_FIX
            )
        body = _body(raw, api, self.source, line, "proxy_server_request")
        out = obj.get("completion_tokens")
        return Parsed(
            (line,),
            t,
            whole,
            api,
            body,
            obj,
            request_id=obj.get("request_id"),
            output_tokens=out if type(out) is int and out >= 0 else None,
            truncated="litellm_truncated skipped" in json.dumps(body, ensure_ascii=False),
        )


def detect_shape(source: str, lines: Iterable[Line]) -> str:
    """The shape of a log, from its first non-blank line."""
    fix = (
        "give shape: openai_batch (custom_id, url, body), litellm_spend (LiteLLM_SpendLogs rows), "
        "vllm_log (vllm serve's log) or jsonl (timestamp, body)"
    )
    for line in lines:
        text = line.text.strip()
        if not text:
            continue
        if text.startswith("["):
            raise InputFileError(
                f"{source}: a JSON array, not one request a line",
                fix=f"jq -c '.[]' {source} > requests.jsonl, and read that",
            )
        if not text.startswith("{"):
            return "vllm_log"
        obj = _json_object(source, line) or {}
        if "custom_id" in obj and "url" in obj:
            return "openai_batch"
        if "call_type" in obj and "startTime" in obj:
            return "litellm_spend"
        if "body" in obj:
            return "jsonl"
        keys = ", ".join(list(obj)[:8])
        raise _bad(source, line, f"cannot tell the log's shape from its keys ({keys})", fix)
    raise InputFileError(f"{source}: empty request log", fix="give a log with one request a line")
