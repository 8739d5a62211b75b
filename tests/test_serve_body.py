"""The request body guard in front of every route: size (413, with or without Content-Length)
and JSON nesting depth (400 naming the depth and the limit), on a real loopback server.

The depth scan itself (``serve.body.json_depth``) is a pure function, tested first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.serve import ServerConfig, create_app
from specpilot.serve.body import MAX_JSON_DEPTH, json_depth
from test_server import MODEL, TOKEN, LiveServer, make_engine


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ("3", 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('["[[[[", "{{{"]', 1),  # brackets inside strings do not count
        ('["\\"[[[", {"k\\\\": []}]', 3),  # escaped quote and escaped backslash
        ("[" * 5000 + "]" * 5000, 5000),
        ("[]" * 1000, 1),
    ],
)
def test_json_depth(text: str, depth: int) -> None:
    assert json_depth(text.encode()) == depth


def nested_schema(objects: int) -> dict[str, Any]:
    """A JSON schema with ``objects`` object levels (two JSON levels each)."""
    d: dict[str, Any] = {"type": "string"}
    for _ in range(objects):
        d = {"type": "object", "properties": {"a": d}}
    return d


def deep_list(levels: int) -> Any:
    v: Any = "x"
    for _ in range(levels):
        v = [v]
    return v


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    cfg = ServerConfig(model_name=MODEL, admin_token=TOKEN)
    engine = make_engine(load_tokenizer(default_target_path()), draft=False)
    s = LiveServer(create_app(cfg, engine=engine))
    yield s
    s.stop()


RAW_DEEP = "__3000_deep__"
CHAT = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}


def _tools(objects: int) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": nested_schema(objects)}}]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {**CHAT, "tools": _tools(450)}),  # ~900 levels: was a 500
        ("/v1/chat/completions", {**CHAT, "tools": _tools(100)}),  # ~200 levels: was a 500
        ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": deep_list(300)}]}),
        ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_schema", "json_schema": nested_schema(300)}}),
        ("/v1/chat/completions", {**CHAT, "some_extension": RAW_DEEP}),
        ("/v1/completions", {"model": MODEL, "prompt": deep_list(400)}),
        ("/admin/strategy", {"default_k": RAW_DEEP}),
    ],
)  # fmt: skip
def test_deep_nesting_anywhere_is_a_400_naming_depth_and_limit(
    live: LiveServer, path: str, body: dict[str, Any]
) -> None:
    # nesting deeper than json.dumps can write goes in as raw text
    data = json.dumps(body).replace(f'"{RAW_DEEP}"', "[" * 3000 + "]" * 3000).encode()
    depth = json_depth(data)
    method = "PUT" if path.startswith("/admin") else "POST"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    r = httpx.request(method, live.url + path, content=data, headers=headers, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["code"] == "json_too_deep"
    assert f"{depth} levels" in err["message"] and str(MAX_JSON_DEPTH) in err["message"]


def test_nesting_at_the_limit_is_never_a_500(live: LiveServer) -> None:
    for objects in range(58, 64):
        data = json.dumps({**CHAT, "tools": _tools(objects)}).encode()
        r = httpx.post(live.url + "/v1/chat/completions", content=data, timeout=60)
        depth = json_depth(data)
        assert r.status_code == (400 if depth > MAX_JSON_DEPTH else r.status_code), r.text
        assert r.status_code in (200, 400), (depth, r.text)
        if depth <= MAX_JSON_DEPTH:
            assert r.json().get("error", {}).get("code") != "json_too_deep"


def _chunked(total: int, chunk: int = 1 << 16) -> Iterator[bytes]:
    """A completions body of about ``total`` bytes, streamed (httpx sends it chunked)."""
    yield b'{"model": "tiny", "max_tokens": 2, "prompt": "hi'
    for _ in range(total // chunk):
        yield b"x" * chunk
    yield b'"}'


def test_a_huge_chunked_body_is_413_not_400(live: LiveServer) -> None:
    headers = {"Content-Type": "application/json"}
    try:
        r = httpx.post(
            live.url + "/v1/completions",
            content=_chunked(20 << 20),
            headers=headers,
            timeout=60,
        )
    except httpx.TransportError:  # the server may close before the client sent it all
        pytest.fail("the server cut the connection without a 413")
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "request_too_large"
    # a small chunked body still goes through
    r = httpx.post(live.url + "/v1/completions", content=_chunked(0), headers=headers, timeout=60)
    assert r.status_code == 200, r.text
