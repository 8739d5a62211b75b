"""The rollout's builtin scope file on a real server (issue 51 item 3's target): a pilot with
one adopted group writes ``rollout/``; its ``<arm>.strategy.json`` POSTed to
``/admin/strategy`` of a running ``specpilot serve`` (uvicorn on loopback, tiny random models)
switches speculation on for exactly that group, by its tag and by its name as a model alias,
and leaves every other request plain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pilot_cases import TRACE_CONFIG, full_case
from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.engine.scheduler import SchedulerConfig
from specpilot.report import build_report
from specpilot.serve import ServerConfig, create_app
from test_server import MODEL, TOKEN, LiveServer, make_engine

pytestmark = pytest.mark.usefixtures("one_thread")
ARMS = [
    {"name": "base", "role": "baseline", "engine": "builtin", "options": {}},
    {
        "name": "spec",
        "role": "speculative",
        "engine": "builtin",
        "options": {"draft": "shipped:smollm2-135m-instruct-d4", "k": 3},
    },
]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def rollout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rollout folder of a pilot whose verdict adopts ``zh`` only (``code`` fails its
    key checks), written as ``specpilot report`` and the pilot write it."""
    data = full_case(drill_status="done")
    data.pilot.config = {**TRACE_CONFIG, "arms": ARMS}
    rep = build_report(data, plots=False)
    assert [(v["groups_adopted"], v["groups_in_windows"]) for v in rep.document["verdicts"]] == [
        (["zh"], [])
    ]
    out = tmp_path_factory.mktemp("report")
    rep.write(out)
    return out / "rollout"


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    """A server where every request speculates (k = 2) before the rollout, answering each
    task group's name as a model alias (as the rollout's launch starts it)."""
    cfg = ServerConfig(
        model_name=MODEL,
        aliases=("zh", "code"),
        draft_name="tiny-draft",
        default_k=2,
        scheduler=SchedulerConfig(max_queued=8),
        admin_token=TOKEN,
    )
    s = LiveServer(create_app(cfg, engine=make_engine(load_tokenizer(default_target_path()))))
    yield s
    s.stop()


def ask(url: str, model: str = MODEL, **extra: Any) -> tuple[str, dict[str, Any]]:
    """One greedy completion: (its X-Specpilot-Strategy header, its speculative record)."""
    headers = extra.pop("headers", {})
    body = {"model": model, "prompt": "The rollout", "max_tokens": 8, "temperature": 0}
    body |= {"ignore_eos": True, "spec_metrics": "summary", **extra}
    r = httpx.post(url + "/v1/completions", json=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return r.headers["X-Specpilot-Strategy"], r.json()["metrics"]["speculative_decoding"]


def test_the_builtin_scope_file_switches_exactly_the_adopted_group(
    rollout: Path, server: LiveServer
) -> None:
    table = json.loads((rollout / "spec.strategy.json").read_text())
    everyone = {"default": 2, "models": {}, "tags": {}}
    assert httpx.post(server.url + "/admin/strategy", json=everyone, headers=AUTH).is_success
    before, _ = ask(server.url, tag="code")
    assert before.startswith("k=2; scope=default")  # every group speculated before
    r = httpx.post(server.url + "/admin/strategy", json=table, headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["in_force_after_s"] >= 0
    state = httpx.get(server.url + "/admin/strategy", headers=AUTH, timeout=10).json()
    assert (state["default"], state["tags"], state["models"]) == (0, {"zh": 3}, {"zh": 3})
    # the adopted group speculates at the arm's k, by its tag, its header and its model alias
    for how in ({"tag": "zh"}, {"headers": {"X-Specpilot-Tag": "zh"}}, {"model": "zh"}):
        header, sd = ask(server.url, **how)
        assert header.startswith("k=3; scope=") and ("tag:zh" in header or "model:zh" in header)
        assert sd["num_spec_tokens"] == 3 and sd["num_draft_tokens"] > 0
    # every other request decodes plain: the rejected group, an unknown one, the plain model
    for how in ({"tag": "code"}, {"model": "code"}, {"tag": "other"}, {}):
        header, sd = ask(server.url, **how)
        assert header.startswith("k=0; scope=default"), (how, header)
        assert sd["num_draft_tokens"] == 0 and sd["num_spec_steps"] == 0


def test_the_rollouts_own_rollback_body_switches_every_scope_off(
    rollout: Path, server: LiveServer
) -> None:
    """The roll back the README gives (an empty table at k = 0) is one POST too."""
    table = json.loads((rollout / "spec.strategy.json").read_text())
    assert httpx.post(server.url + "/admin/strategy", json=table, headers=AUTH).status_code == 200
    off = {"default": 0, "models": {}, "tags": {}}
    readme = (rollout / "README.md").read_text()
    assert json.dumps(off) in readme
    assert httpx.post(server.url + "/admin/strategy", json=off, headers=AUTH).status_code == 200
    header, sd = ask(server.url, tag="zh")
    assert header.startswith("k=0; scope=default") and sd["num_draft_tokens"] == 0
