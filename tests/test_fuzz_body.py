"""Fuzz of the body guard through the real server: 10,000 generated bodies over every encoding
the JSON parser reads and nesting around and far past the limit, and none gets a 5xx.

Each body is a chat, completions or admin request with a nested value put in one of its fields
(message content, a tool's parameters, response_format, an unknown extension, the prompt), 90
to 1,000 levels deep, arrays and objects mixed, sometimes inside a string; its strings hold what
a byte scan can misread (quotes, backslashes, brackets, U+2200 whose UTF-16 bytes hold a quote,
CJK, lone surrogates); it is encoded in one of eight encodings, and sometimes truncated, one
byte changed or junk appended. The probe's 500 (a UTF-16 schema 900 deep measured 4 deep) is
one of them. Seeded (``random.Random``), so a failure names the body that reproduces it; one
keep-alive connection to a real uvicorn on loopback, tiny random engine, one token per answer
(~30-60 s on 2 busy cores).
"""

from __future__ import annotations

import http.client
import json
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.serve import ServerConfig, create_app
from test_server import MODEL, TOKEN, LiveServer, make_engine

pytestmark = pytest.mark.usefixtures("one_thread")
BODIES = 10_000
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be"]
ENCODINGS += ["utf-32", "utf-32-le", "utf-32-be"]
_SLOT = "__nested__"
KEYS = ["a", "type", "properties", "items", "\u2200"]  # a schema's keys, now and then U+2200
TRICKY = ['"', "\\", "[", "]", "{", "}", "\u2200", "\u4e2d\u6587", "\ud800", "a", " ", ","]


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    cfg = ServerConfig(model_name=MODEL, admin_token=TOKEN)
    engine = make_engine(load_tokenizer(default_target_path()), draft=False)
    s = LiveServer(create_app(cfg, engine=engine))
    yield s
    s.stop()


def _text(rng: random.Random) -> str:
    if rng.random() < 0.3:  # U+2200 alone: its UTF-16 bytes are 00 22, a quote to a byte scan
        return "\u2200"
    return "".join(rng.choice(TRICKY) for _ in range(rng.randint(0, 8)))


def _nested(rng: random.Random, levels: int) -> str:
    """JSON text ``levels`` deep, arrays and objects mixed (deeper than json.dumps can write)."""
    opens, closes = [], []
    for _ in range(levels):
        if rng.random() < 0.5:
            opens.append("[")
            closes.append("]")
        else:
            opens.append("{" + json.dumps(rng.choice(KEYS)) + ": ")
            closes.append("}")
    return "".join(opens) + json.dumps(_text(rng)) + "".join(reversed(closes))


def _request(rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    kind = rng.choice(["chat", "chat", "completions", "admin"])
    if kind == "admin":
        return "PUT", "/admin/strategy", {"scope": "default", "k": rng.choice([0, None, "x"])}
    if kind == "completions":
        prompt: Any = _text(rng) or "hi" if rng.random() < 0.7 else [1, 2, 3]
        return "POST", "/v1/completions", {"model": MODEL, "max_tokens": 1, "prompt": prompt}
    body = {"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": _text(rng)}]}
    return "POST", "/v1/chat/completions", body


def _place(rng: random.Random, body: dict[str, Any], value: Any) -> None:
    where = rng.choice(["content", "tools", "response_format", "extension", "prompt", "k"])
    if where == "content" and "messages" in body:
        body["messages"][0]["content"] = value
    elif where == "tools" and "messages" in body:
        params = {"type": "object", "properties": value}  # a schema is an object
        fn = {"name": "f", "description": _text(rng), "parameters": params}
        body["tools"] = [{"type": "function", "function": fn}]
    elif where == "response_format" and "messages" in body:
        body["response_format"] = {"type": "json_schema", "json_schema": value}
    elif where == "prompt" and "prompt" in body:
        body["prompt"] = value
    else:
        body[rng.choice(["x_extension", "k", "metadata"])] = value


def fuzz_body(seed: int) -> tuple[str, str, bytes]:
    rng = random.Random(seed)
    method, path, body = _request(rng)
    nested = None
    if rng.random() < 0.75:
        nested = _nested(rng, rng.choice([rng.randint(90, 140), rng.randint(140, 1000)]))
        if rng.random() < 0.1:  # the same brackets inside a string: they do not count
            nested = json.dumps(nested)
        _place(rng, body, _SLOT)
        body["user"] = _text(rng)  # a string after the nesting too: a misread quote pairs up
    text = json.dumps(body, ensure_ascii=rng.random() < 0.3)
    if nested is not None:
        text = text.replace(json.dumps(_SLOT), nested, 1)
    data = text.encode(rng.choice(ENCODINGS), "surrogatepass")
    damage = rng.random()
    if damage < 0.05 and data:
        data = data[: rng.randrange(len(data))]
    elif damage < 0.10 and data:
        i = rng.randrange(len(data))
        data = data[:i] + bytes([rng.randrange(256)]) + data[i + 1 :]
    elif damage < 0.13:
        data += rng.choice([b"\x00", b'"', b"]", b"\xff\xfe", "\u2200".encode("utf-16-le")])
    return method, path, data


def test_ten_thousand_bodies_get_no_5xx(live: LiveServer) -> None:
    seen: Counter[tuple[int, str | None]] = Counter()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=60)
    try:
        for seed in range(BODIES):
            method, path, data = fuzz_body(seed)
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            payload = r.read()
            assert r.status < 500, (seed, r.status, payload[:300], data[:200])
            code = json.loads(payload)["error"]["code"] if r.status != 200 else None
            seen[(r.status, code)] += 1
            if r.will_close:  # a refusal before the whole body was read closes the connection
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=60)
    finally:
        conn.close()
    assert sum(seen.values()) == BODIES
    # the fuzz reached every outcome it is for: answers, each refusal of the guard, the parser's
    for want in [(200, None), (400, "json_too_deep"), (400, "invalid_json")]:
        assert seen[want] > 100, seen
    assert seen[(400, "invalid_encoding")] > 0, seen
