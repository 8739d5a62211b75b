"""Small OpenAI-wire helpers for the compatibility suite: a chat call, a streamed chat call
(every SSE event kept), and the running-requests gauge from ``/metrics``.

Knows the wire format, not any engine; the gauge names are the ones engines publish
(vLLM and the builtin server ``vllm:num_requests_running``, llama.cpp
``llamacpp:requests_processing``, SGLang ``sglang:num_running_reqs``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from specpilot.backends import prom

RUNNING_GAUGES = (
    "vllm:num_requests_running",
    "llamacpp:requests_processing",
    "sglang:num_running_reqs",
)


Outcome = tuple[str, str, dict[str, Any]]  # a check's status, evidence, detail


def text_of(resp: dict[str, Any]) -> str:
    """The first choice's message text of a chat completion."""
    return str(((resp.get("choices") or [{}])[0].get("message") or {}).get("content") or "")


def choice_of(resp: dict[str, Any]) -> dict[str, Any]:
    return dict((resp.get("choices") or [{}])[0])


class Unsupported(Exception):
    """The server refused a parameter the feature needs (4xx naming it): not a failure."""


@dataclass
class Streamed:
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False  # saw data: [DONE]
    error: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(
            str((c.get("delta") or {}).get("content") or "")
            for e in self.events
            for c in e.get("choices") or []
        )

    @property
    def finish_reasons(self) -> list[str]:
        return [
            str(c["finish_reason"])
            for e in self.events
            for c in e.get("choices") or []
            if c.get("finish_reason")
        ]

    @property
    def usage_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("usage")]

    def tool_calls(self) -> list[dict[str, str]]:
        """Streamed tool-call deltas assembled by index (name once, arguments concatenated)."""
        calls: dict[int, dict[str, str]] = {}
        for e in self.events:
            for c in e.get("choices") or []:
                for tc in (c.get("delta") or {}).get("tool_calls") or []:
                    slot = calls.setdefault(int(tc.get("index", 0)), {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    slot["name"] += str(fn.get("name") or "")
                    slot["arguments"] += str(fn.get("arguments") or "")
        return [calls[i] for i in sorted(calls)]


class Client:
    """One endpoint and model; ``timeout_s`` bounds every call; ``headers`` go with each
    (the endpoint's credentials)."""

    def __init__(
        self,
        url: str,
        model: str | None = None,
        timeout_s: float = 60.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(timeout=timeout_s, headers=dict(headers or {}))
        self.model = model or self.first_model()
        self._greedy: dict[str, dict[str, Any]] = {}  # identical greedy bodies: asked once

    def close(self) -> None:
        self.http.close()

    def first_model(self) -> str:
        r = self.http.get(self.url + "/v1/models")
        r.raise_for_status()
        data = r.json().get("data") or []
        if not data:
            raise ValueError(f"{self.url}/v1/models lists no model: pass --model")
        return str(data[0]["id"])

    def _body(self, messages: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": messages,
            **{k: v for k, v in kw.items() if v is not None},
        }

    def chat(
        self, messages: list[dict[str, Any]], *, fresh: bool = False, **kw: Any
    ) -> dict[str, Any]:
        """One call; an identical greedy body is answered from the first call unless ``fresh``
        (a check whose point is to ask again, e.g. in a batch)."""
        body = self._body(messages, **kw)
        cacheable = kw.get("temperature") == 0 and not fresh
        key = json.dumps(body, sort_keys=True) if cacheable else None
        if key is not None and key in self._greedy:
            return self._greedy[key]
        r = self.http.post(self.url + "/v1/chat/completions", json=body)
        _raise_for(r, kw)
        out = dict(r.json())
        if key is not None:
            self._greedy[key] = out
        return out

    def stream(
        self,
        messages: list[dict[str, Any]],
        stop_after: Callable[[Streamed], bool] | None = None,
        **kw: Any,
    ) -> Streamed:
        """A streamed call; ``stop_after(s)`` true closes the connection early (a cancel)."""
        out = Streamed()
        body = self._body(messages, stream=True, **kw)
        with self.http.stream("POST", self.url + "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                _raise_for(r, kw)
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    out.done = True
                    break
                obj = json.loads(data)
                if "error" in obj:
                    out.error = obj["error"]
                    break
                out.events.append(obj)
                if stop_after is not None and stop_after(out):
                    break  # leaving the block closes the connection
        return out

    def running(self) -> float | None:
        """The server's running-requests gauge (None: no /metrics or no known gauge)."""
        try:
            r = self.http.get(self.url + "/metrics", timeout=5)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        samples = prom.parse(r.text)
        for name in RUNNING_GAUGES:
            vals = [s.value for s in samples if s.name == name]
            if vals:
                return float(sum(vals))
        return None


def _raise_for(r: httpx.Response, params: dict[str, Any]) -> None:
    if r.status_code == 200:
        return
    try:
        err = r.json().get("error") or {}
        msg = str(err.get("message") if isinstance(err, dict) else err)
    except ValueError:
        msg = r.text[:200]
    if r.status_code in (400, 404, 422, 501) and any(k in msg for k in params):
        raise Unsupported(f"HTTP {r.status_code}: {msg[:200]}")
    raise RuntimeError(f"HTTP {r.status_code}: {msg[:200]}")
