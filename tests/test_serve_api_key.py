"""``specpilot serve --api-key``: ``/v1`` answers only ``Authorization: Bearer <key>`` (vLLM's
``--api-key`` scope), in OpenAI's error shape; ``/health``, ``/metrics`` and ``/admin`` (its own
token) are as without a key. A real server on a loopback port over the tiny random engine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.serve import ServerConfig, create_app
from test_server import MODEL, TOKEN, LiveServer, make_engine

pytestmark = pytest.mark.timeout(60)
KEY = "sp-test-api-key-7f3a"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    engine = make_engine(load_tokenizer(default_target_path()), draft=False)
    config = ServerConfig(model_name=MODEL, admin_token=TOKEN, api_key=KEY)
    s = LiveServer(create_app(config, engine=engine))
    yield s
    s.stop()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize(
    "headers",
    [{}, _bearer("wrong"), {"Authorization": f"Basic {KEY}"}, {"Authorization": KEY}],
    ids=["none", "wrong-key", "not-bearer", "no-scheme"],
)
def test_v1_without_the_key_is_401_in_openais_shape(server: LiveServer, headers: Any) -> None:
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions")):
        r = httpx.request(method, server.url + path, json=CHAT, headers=headers)
        assert r.status_code == 401, (path, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_api_key" and "Bearer" in err["message"]
        assert KEY not in r.text and r.headers["www-authenticate"] == "Bearer"


def test_v1_with_the_key_answers(server: LiveServer) -> None:
    r = httpx.get(server.url + "/v1/models", headers=_bearer(KEY))
    assert r.status_code == 200 and r.json()["data"][0]["id"] == MODEL
    r = httpx.post(server.url + "/v1/chat/completions", json=CHAT, headers=_bearer(KEY))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None


def test_the_key_is_checked_before_the_body(server: LiveServer) -> None:
    """A caller without the key learns nothing about how its body would be judged."""
    r = httpx.post(server.url + "/v1/chat/completions", content=b"{not json")
    assert r.status_code == 401
    r = httpx.post(server.url + "/v1/chat/completions", content=b"{not json", headers=_bearer(KEY))
    assert r.status_code == 400


def test_health_metrics_and_admin_are_as_without_a_key(server: LiveServer) -> None:
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/metrics").status_code == 200
    assert httpx.options(server.url + "/v1/models").status_code != 401  # CORS preflight passes
    # /admin keeps its own token: the API key does not open it
    assert httpx.get(server.url + "/admin/strategy", headers=_bearer(KEY)).status_code == 401
    assert httpx.get(server.url + "/admin/strategy", headers=_bearer(TOKEN)).status_code == 200
    # a path that only starts like /v1 is not guarded (vLLM's scope is /v1 and below)
    assert httpx.get(server.url + "/v10").status_code == 404


def test_serve_takes_the_key_from_the_option_or_the_environment(monkeypatch) -> None:
    from specpilot.cli import build_parser
    from specpilot.commands.serve import api_key

    monkeypatch.delenv("SPECPILOT_API_KEY", raising=False)
    assert api_key(build_parser().parse_args(["serve"])) is None
    assert api_key(build_parser().parse_args(["serve", "--api-key", "k1"])) == "k1"
    monkeypatch.setenv("SPECPILOT_API_KEY", "k2")
    assert api_key(build_parser().parse_args(["serve"])) == "k2"
    assert api_key(build_parser().parse_args(["serve", "--api-key", "k1"])) == "k1"
