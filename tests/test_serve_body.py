"""The request body guard in front of every route: size (413, with or without Content-Length),
encoding (UTF-8, or the UTF-16/32 the parser would read), JSON nesting depth and value count
(400 naming the figure and the limit), on a real loopback server.

The scan itself (``serve.body.json_shape``) is a pure function, tested first: against
``json.loads`` on valid JSON, against a byte-by-byte reference on any bytes (chunk edges
included), and through every encoding the parser accepts. Its cost per MB is measured in
``benchmarks/body_guard.py``; that the event loop stays free while it runs is
``test_serve_body_loop.py``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.serve import ServerConfig, create_app
from specpilot.serve.body import (
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    BodyEncodingError,
    Shape,
    as_utf8,
    json_depth,
    json_shape,
)
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


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("", 0),
        ("3", 1),
        ("[]", 2),  # an empty container counts one more than it holds
        ("[1, 2, 3]", 4),
        ('{"a": 1, "b": [2, "x,y"]}', 5),  # commas in strings do not count
        ('"[1, 2]"', 1),
    ],
)
def test_json_values(text: str, values: int) -> None:
    assert json_shape(text.encode()).values == values


def reference_shape(body: bytes) -> Shape:
    """The scan's rule byte by byte: a quote after an odd run of backslashes is not one."""
    depth = deepest = 0
    values = 1 if body else 0
    in_string, run = False, 0
    for b in body:
        if b == ord('"') and run % 2 == 0:
            in_string = not in_string
        elif not in_string and b in b"[{":
            depth, values = depth + 1, values + 1
            deepest = max(deepest, depth)
        elif not in_string and b in b"]}":
            depth -= 1
        elif not in_string and b == ord(","):
            values += 1
        run = run + 1 if b == ord("\\") else 0
    return Shape(deepest, values)


def parsed_shape(value: Any) -> tuple[int, int, int]:
    """(depth, values, empty containers) of a parsed JSON value."""
    if isinstance(value, list | dict):
        items = list(value.values()) if isinstance(value, dict) else value
        inner = [parsed_shape(v) for v in items]
        depth = 1 + max((d for d, _, _ in inner), default=0)
        return depth, 1 + sum(n for _, n, _ in inner), (not items) + sum(e for _, _, e in inner)
    return 0, 1, 0


# strings full of what the scan must read right: quotes, backslashes, brackets, commas, a
# character whose UTF-16 bytes hold a quote (U+2200), multi-byte UTF-8, lone surrogates
_tricky_text = st.text(
    st.sampled_from('"\\[]{},: a\u2200\u4e2d\U0001f600\x00') | st.characters(), max_size=12
) | st.integers(0xD800, 0xDFFF).map(chr)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _tricky_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_tricky_text, inner, max_size=4),
    max_leaves=40,
)
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be"]
ENCODINGS += ["utf-32", "utf-32-le", "utf-32-be"]


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(value=json_values, ascii=st.booleans(), chunk=st.sampled_from([1, 2, 3, 7, 64, 1 << 18]))
def test_shape_matches_the_parser_on_valid_json(value: Any, ascii: bool, chunk: int) -> None:
    body = json.dumps(value, ensure_ascii=ascii).encode("utf-8", "surrogatepass")
    depth, values, empty = parsed_shape(json.loads(body))
    assert json_shape(body, chunk=chunk) == Shape(depth, values + empty)


_jsonish = st.binary(max_size=300) | st.lists(
    st.sampled_from(
        [b'"', b"\\", b"[", b"]", b"{", b"}", b",", b"a", b"\\\\", b'\\"', b"\xe2\x88\x80"]
    ),
    max_size=300,
).map(b"".join)


@settings(max_examples=600, derandomize=True, database=None, deadline=None)
@given(body=_jsonish, chunk=st.sampled_from([1, 2, 3, 5, 16, 1 << 18]))
def test_shape_matches_the_reference_on_any_bytes(body: bytes, chunk: int) -> None:
    """Unterminated strings, escape runs across chunk edges, brackets in and out of strings."""
    want = reference_shape(body)
    assert json_shape(body, chunk=chunk) == Shape(max(0, want.depth), want.values)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(value=json_values, encoding=st.sampled_from(ENCODINGS))
def test_the_guard_reads_every_encoding_as_the_parser_does(value: Any, encoding: str) -> None:
    body = json.dumps(value, ensure_ascii=False).encode(encoding, "surrogatepass")
    utf8 = as_utf8(body)
    assert json.loads(utf8) == json.loads(body)  # the parser's own reading of the raw bytes
    assert json_depth(utf8) == parsed_shape(json.loads(body))[0]


def test_a_body_that_breaks_its_encoding_is_named() -> None:
    body = '{"prompt": "hi"}'.encode("utf-16-le") + b"\x20"  # half a code unit at the end
    with pytest.raises(BodyEncodingError, match=r"UTF-16-LE.*send the JSON as UTF-8"):
        as_utf8(body)
    with pytest.raises(ValueError):
        json.loads(body)  # the parser refuses it too: the guard only says it first


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


def _post(live: LiveServer, path: str, data: bytes, **headers: str) -> httpx.Response:
    headers = {"Content-Type": "application/json", **headers}
    return httpx.post(live.url + path, content=data, headers=headers, timeout=60)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_encoding_the_parser_reads_is_guarded_alike(live: LiveServer, encoding: str) -> None:
    """The probe's 500: U+2200 is the UTF-16 bytes 00 22, which a byte scan took for a quote,
    so a 900-level schema measured 4 levels and reached pydantic's serializer."""
    deep = {
        **CHAT,
        "messages": [{"role": "user", "content": "hi\u2200"}],
        "tools": [{"type": "function", "function": {"name": "f", "description": "\u2200"}}],
    }
    deep["tools"][0]["function"]["parameters"] = nested_schema(450)
    r = _post(live, "/v1/chat/completions", json.dumps(deep, ensure_ascii=False).encode(encoding))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "json_too_deep"
    ok = {**CHAT, "messages": [{"role": "user", "content": "hi\u2200 \u4e2d"}]}
    r = _post(live, "/v1/chat/completions", json.dumps(ok, ensure_ascii=False).encode(encoding))
    assert r.status_code == 200, r.text


def test_a_broken_encoding_is_a_400_naming_it(live: LiveServer) -> None:
    body = json.dumps(CHAT).encode("utf-32-be")[:-2]
    r = _post(live, "/v1/chat/completions", body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_encoding" and "UTF-32-BE" in err["message"], err


@pytest.mark.parametrize(
    "values",
    [
        "[" + ",".join(["1"] * (MAX_JSON_VALUES + 1)) + "]",  # a token-id prompt past any context
        "[" + ",".join(["[]"] * (MAX_JSON_VALUES // 2)) + "]",  # json.loads took 0.2-0.9 s on 4 MiB
    ],
)
def test_too_many_values_are_refused_before_parsing(live: LiveServer, values: str) -> None:
    body = json.dumps({"model": MODEL, "max_tokens": 1, "prompt": "__v__"}).replace(
        '"__v__"', values
    )
    r = _post(live, "/v1/completions", body.encode())
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "json_too_many_values" and str(MAX_JSON_VALUES) in err["message"], err
    # within the limit the same shape is parsed and judged as usual
    fits = json.dumps({"model": MODEL, "max_tokens": 1, "prompt": [1] * 100})
    assert _post(live, "/v1/completions", fits.encode()).status_code == 200


def _raw_put(live: LiveServer, path: str, head: dict[str, str], body: bytes) -> tuple[int, bytes]:
    """A request written on the socket as given (a Content-Length it does not keep), and the
    status and body of the answer."""
    lines = [f"PUT {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in head.items())]
    with socket.create_connection(("127.0.0.1", live.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < _length(reply):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    return status, reply.split(b"\r\n\r\n", 1)[1]


def _length(reply: bytes) -> int:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            return int(v)
    return 0


@pytest.mark.parametrize(
    ("body", "length"),
    [
        (b"{bad", None),  # was 400 invalid_json before the 401
        (b"[" * 3000 + b"]" * 3000, None),  # would be json_too_deep
        ("\u2200".encode("utf-16-le") + b"\x20", None),  # would be invalid_encoding
        (b"{}", 64 << 20),  # would be 413 by its Content-Length (the rest never sent)
    ],
)
def test_admin_without_a_token_is_refused_before_its_body(
    live: LiveServer, body: bytes, length: int | None
) -> None:
    for token in (None, "Bearer wrong"):
        head = {"Content-Type": "application/json", "Content-Length": str(length or len(body))}
        if token is not None:
            head["Authorization"] = token
        status, payload = _raw_put(live, "/admin/strategy", head, body)
        assert status == 401, payload
        assert json.loads(payload)["error"]["type"] == "authentication_error"
    if length is None:  # with the token the same body is judged on its merits
        auth = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        r = httpx.put(live.url + "/admin/strategy", content=body, headers=auth, timeout=10)
        assert r.status_code == 400, r.text
