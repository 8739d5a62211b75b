"""Schema-driven fuzz of the server's whole HTTP surface: no 500 from client input, and the
keep-alive connection stays usable after every answer.

Bodies come from the app's own OpenAPI document (a small JSON-schema -> hypothesis converter
for what pydantic emits; ``hypothesis-jsonschema`` 0.23 breaks on current hypothesis), then one
field is
replaced by something hostile (lone UTF-16 surrogates, NULs, numbers past int64 and float
range, NaN, deep nesting, wrong types), or the body is replaced by raw bytes (truncated JSON,
invalid UTF-8, non-objects). Each request goes over one ``http.client`` connection, followed by
a request on the same socket that must succeed. Real uvicorn on loopback, tiny random model
with SmolLM2's tokenizer; derandomized and bounded (~20-40 s on 2 busy cores).
"""

from __future__ import annotations

import http.client
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.engine.scheduler import SchedulerConfig
from specpilot.serve import ServerConfig, create_app
from test_server import MODEL, TOKEN, LiveServer, make_engine

pytestmark = pytest.mark.usefixtures("one_thread")
ROUTES = {
    "/v1/completions": "CompletionRequest",
    "/v1/chat/completions": "ChatCompletionRequest",
    "/admin/strategy": "StrategyUpdate",
}
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    cfg = ServerConfig(
        model_name=MODEL,
        aliases=("tiny-plain",),
        draft_name="tiny-draft",
        default_k=2,
        scheduler=SchedulerConfig(max_queued=8),
        admin_token=TOKEN,
    )
    s = LiveServer(create_app(cfg, engine=make_engine(load_tokenizer(default_target_path()))))
    yield s
    s.stop()


def _schemas() -> dict[str, Any]:
    # The OpenAPI document does not depend on the engine: build it without one.
    doc = create_app(ServerConfig(model_name=MODEL), loader=lambda: None).openapi()
    return doc["components"]["schemas"]


def from_schema(s: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under ``s`` (the JSON-schema subset pydantic emits), small on purpose."""
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[1]
        return st.deferred(lambda: from_schema(SCHEMAS[name]))
    if "anyOf" in s:
        return st.one_of([from_schema(x) for x in s["anyOf"]])
    if "const" in s:
        return st.just(s["const"])
    if "enum" in s:
        return st.sampled_from(s["enum"])
    t = s.get("type")
    if t == "integer":
        lo = s.get("minimum", s.get("exclusiveMinimum", -math.inf) + 1)
        hi = s.get("maximum", s.get("exclusiveMaximum", math.inf) - 1)
        return st.integers(
            None if lo == -math.inf else math.ceil(lo), None if hi == math.inf else int(hi)
        )
    if t == "number":
        return st.floats(
            s.get("minimum", s.get("exclusiveMinimum")),
            s.get("maximum", s.get("exclusiveMaximum")),
            exclude_min="exclusiveMinimum" in s,
            exclude_max="exclusiveMaximum" in s,
            allow_nan=False,
            allow_infinity=False,
        )
    if t == "string":
        if "pattern" in s:
            return st.from_regex(s["pattern"], fullmatch=True)
        hi = min(s.get("maxLength", 24), 24)
        return st.text(min_size=min(s.get("minLength", 1), hi), max_size=hi)
    if t == "array":
        items = from_schema(s.get("items", {}))
        return st.lists(items, min_size=s.get("minItems", 0), max_size=min(s.get("maxItems", 3), 3))
    if t == "object":
        return _object(s)
    return {"null": st.none(), "boolean": st.booleans()}.get(t, _json)  # {} or true: any JSON


def _object(s: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props = s.get("properties")
    if props is None:
        extra = s.get("additionalProperties", True)
        values = _json if extra is True else from_schema(extra)
        return st.dictionaries(
            st.text(max_size=6), values, max_size=min(s.get("maxProperties", 3), 3)
        )
    fields = {k: from_schema(v) for k, v in props.items()}
    if "model" in fields:  # mostly a served name, so requests get past the model check
        fields["model"] = st.sampled_from([MODEL, "tiny-plain", None]) | fields["model"]
    if "echo" in fields:  # a constraint the schema cannot say: only false is supported
        fields["echo"] = st.just(False) | fields["echo"]
    required = set(s.get("required", ()))
    return st.fixed_dictionaries(
        {k: v for k, v in fields.items() if k in required},
        optional={k: v for k, v in fields.items() if k not in required},
    )


SCHEMAS = _schemas()
_surrogate = st.integers(0xD800, 0xDFFF).map(chr)
_hostile_text = st.lists(
    st.characters(exclude_categories=()) | _surrogate | st.just("\x00"), min_size=1, max_size=12
).map("".join) | st.sampled_from(["a\u0000b\ud800", "\udfff", "\ud83d", "\u202e", "x" * 5000])
_hostile_number = st.sampled_from(
    [2**63, -(2**63) - 1, 10**30, -(10**30), 1e308, -1e308, 2**53 + 1, -0.0, 0.5]
)
_RAW = "__raw__"  # replaced by raw JSON text after dumping (NaN, Infinity, deep nesting)
_raw_values = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999"]) | st.integers(
    2, 3000
).flatmap(lambda d: st.sampled_from(["[" * d + "]" * d, '{"a":' * d + "1" + "}" * d]))
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_raw_bodies = st.sampled_from(
    [b"", b"{", b'{"model": "tiny",\n "prompt": x}', b'{"model": "\xff\xfe"}', b"[]", b"3", b"null"]
)


def _paths(obj: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value where a value sits (dict keys and list indexes)."""
    out = [here] if here else []
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for k, v in items:
        out += _paths(v, (*here, k))
    return out


def _put(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return obj


def _fast(body: Any) -> Any:
    """Keep generation short: the fuzz is about input handling, not long outputs."""
    if isinstance(body, dict):
        for key in ("max_tokens", "max_completion_tokens"):
            v = body.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and 4 < v < 10**6:
                body[key] = 4
        body.setdefault("max_tokens", 3)
    return body


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, bytes]:
    path = draw(st.sampled_from(sorted(ROUTES)))
    method = "PUT" if path.startswith("/admin") else "POST"
    mode = draw(st.sampled_from(["valid", "valid", "field", "field", "field", "raw", "junk"]))
    if mode == "raw":
        return method, path, draw(_raw_bodies)
    if mode == "junk":
        return method, path, json.dumps(_fast(draw(_json))).encode()
    body = draw(from_schema(SCHEMAS[ROUTES[path]]))
    raw = None
    if mode == "field":
        where = draw(st.sampled_from(_paths(body) or [("model",)]))
        kind = draw(st.sampled_from(["text", "number", "raw", "json"]))
        if kind == "raw":
            raw = draw(_raw_values)
            value: Any = _RAW
        else:
            value = draw({"text": _hostile_text, "number": _hostile_number, "json": _json}[kind])
        body = _put(body, where, value)
    text = json.dumps(_fast(body) if method == "POST" else body, ensure_ascii=True)
    if raw is not None:
        text = text.replace(f'"{_RAW}"', raw, 1)
    return method, path, text.encode()


@settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(req=requests())
def test_no_client_input_gives_a_500_and_the_connection_survives(
    live: LiveServer, req: tuple[str, str, bytes]
) -> None:
    method, path, body = req
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=AUTH)
        sock = conn.sock
        r = conn.getresponse()
        payload = r.read()
        assert r.status in (200, 400, 404), (r.status, payload[:300], body[:300])
        if r.status != 200:
            err = json.loads(payload)["error"]
            assert isinstance(err["message"], str) and err["message"], err
        assert not r.will_close, "the server closed the connection"
        conn.request("GET", "/metrics" if method == "PUT" else "/health")
        follow = conn.getresponse()
        follow.read()
        assert follow.status == 200 and conn.sock is sock  # same socket, no reconnect
    finally:
        conn.close()
