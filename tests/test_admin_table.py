"""``POST /admin/strategy``: the whole strategy table at once, in ``--strategy-file``'s format
(what a rollout's scope file is), on a real server over loopback; a bad table changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.engine.scheduler import SchedulerConfig
from specpilot.serve import ServerConfig, create_app
from test_server import MODEL, TOKEN, LiveServer, make_engine

pytestmark = pytest.mark.usefixtures("one_thread")
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    cfg = ServerConfig(
        model_name=MODEL,
        aliases=("zh",),
        draft_name="tiny-draft",
        default_k=2,
        scheduler=SchedulerConfig(max_queued=8),
        admin_token=TOKEN,
    )
    s = LiveServer(create_app(cfg, engine=make_engine(load_tokenizer(default_target_path()))))
    yield s
    s.stop()


def strategy_of(url: str, **body: object) -> str:
    req = {"model": MODEL, "prompt": "x", "max_tokens": 2, "temperature": 0, **body}
    r = httpx.post(url + "/v1/completions", json=req, timeout=60)
    assert r.status_code == 200, r.text
    return r.headers["X-Specpilot-Strategy"]


def test_a_table_replaces_every_scope_at_once(server: LiveServer) -> None:
    assert httpx.put(
        server.url + "/admin/strategy", json={"scope": "tag:old", "k": 1}, headers=AUTH
    ).is_success
    table = {"default": 0, "models": {"zh": 3}, "tags": {"code": 2}}
    r = httpx.post(server.url + "/admin/strategy", json=table, headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["default"], got["models"], got["tags"]) == (0, {"zh": 3}, {"code": 2})
    assert strategy_of(server.url, tag="old").startswith("k=0; scope=default")  # replaced
    assert strategy_of(server.url, tag="code").startswith("k=2; scope=tag:code")
    assert strategy_of(server.url, model="zh").startswith("k=3; scope=model:zh")
    # no default given: the current one is kept
    r = httpx.post(server.url + "/admin/strategy", json={"tags": {}}, headers=AUTH, timeout=10)
    assert (r.json()["default"], r.json()["models"], r.json()["tags"]) == (0, {}, {})


def test_a_bad_table_changes_nothing(server: LiveServer) -> None:
    good = {"default": 1, "models": {}, "tags": {"zh": 2}}
    assert httpx.post(server.url + "/admin/strategy", json=good, headers=AUTH).status_code == 200
    version = httpx.get(server.url + "/admin/strategy", headers=AUTH).json()["version"]
    for bad, named in (
        ({"default": 0, "tag": {"zh": 3}}, "tag"),  # misspelt key: refused, not ignored
        ({"tags": {"zh": 99}}, "tags"),  # beyond the API's bound
        ({"tags": {"zh": 1, "code": 17}}, "tag:code"),  # beyond the server's max_k
        ({"tags": {"zh": -1}}, "tags"),
    ):
        r = httpx.post(server.url + "/admin/strategy", json=bad, headers=AUTH, timeout=10)
        assert r.status_code == 400 and named in r.json()["error"]["message"], (bad, r.text)
    after = httpx.get(server.url + "/admin/strategy", headers=AUTH).json()
    assert (after["version"], after["default"], after["tags"]) == (version, 1, {"zh": 2})
    assert httpx.post(server.url + "/admin/strategy", json=good).status_code == 401  # no token
