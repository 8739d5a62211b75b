"""The rollout folder (issue 51 item 3) from a report's document, no engine started: the
launch of each engine's adopted candidate through its own command builder (vLLM's
``--speculative-config``, SGLang's ``--speculative-*``, llama.cpp's ``--spec-*``), the routing
table from task group and load window to configuration, the rollback rules beside them, and
nothing for what was not adopted. The builtin scope file on a real server is
``test_rollout_server.py``."""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from pilot_cases import TRACE_CONFIG, full_case
from specpilot.cli import build_parser
from specpilot.report import build_report
from specpilot.report.rollout import rollout_files

SPEC = {"draft": "shipped:smollm2-135m-instruct-d4", "k": 3}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    """A report whose verdict adopts ``zh`` at every load and rejects ``code`` (key checks)."""
    data = full_case(drill_status="done")
    data.pilot.config = {
        **TRACE_CONFIG,
        "arms": [
            {"name": "base", "role": "baseline", "engine": "builtin", "options": {}},
            {"name": "spec", "role": "speculative", "engine": "builtin", "options": SPEC},
        ],
    }
    d = build_report(data, plots=False).document
    assert [(v["groups_adopted"], v["groups_in_windows"]) for v in d["verdicts"]] == [(["zh"], [])]
    return d


def on_engine(doc: dict[str, Any], engine: str, options: dict[str, Any], **arm: Any) -> dict:
    """The same verdicts with both compared arms on ``engine`` (the candidate's options)."""
    d = copy.deepcopy(doc)
    for a in d["arms"]:
        a["engine"] = engine
        a["manifest"] = {**a["manifest"], **arm.get("manifest", {})}
    d["pilot"]["config"]["arms"] = [
        {"name": "base", "role": "baseline", "engine": engine, "options": {"model": "/m/b"}},
        {"name": "spec", "role": "speculative", "engine": engine, "options": options}
        | arm.get("config", {}),
    ]
    return d


def argv(script: str) -> list[str]:
    """The command a launch script runs (after ``exec``), as words, where it listens as the
    shell expands it with HOST and PORT unset."""
    body = script.split("exec ", 1)[1].replace("\\\n", " ")
    assert '--host "${HOST:-127.0.0.1}"' in body and '--port "${PORT:-8000}"' in body
    return shlex.split(body.replace("${HOST:-127.0.0.1}", "HOST").replace("${PORT:-8000}", "8000"))


def value(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def routes_of(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {r["group"]: r for r in yaml.safe_load(files["routes.yaml"])["routes"]}


def test_builtin_rollout_switches_on_only_the_adopted_group(doc: dict[str, Any]) -> None:
    files = rollout_files(doc)
    assert sorted(files) == [
        "README.md",
        "litellm.config.yaml",
        "rollback-spec.rules.yml",
        "routes.yaml",
        "spec.launch.sh",
        "spec.strategy.json",
    ]
    table = json.loads(files["spec.strategy.json"])
    assert table == {"default": 0, "models": {"zh": 3}, "tags": {"zh": 3}}
    words = argv(files["spec.launch.sh"])
    assert words[:2] == ["specpilot", "serve"] and value(words, "-k") == "3"
    assert value(words, "--draft") == SPEC["draft"] and value(words, "--port") == "8000"
    assert value(words, "--strategy-file").endswith("/spec.strategy.json")
    assert [w for i, w in enumerate(words) if words[i - 1] == "--model-alias"] == ["code", "zh"]
    # every word is one `specpilot serve` takes (its own parser, nothing started)
    args = build_parser().parse_args(words[1:])
    assert (args.k, args.model_alias, args.draft) == (3, ["code", "zh"], SPEC["draft"])
    assert args.strategy_file.name == "spec.strategy.json"
    assert files["rollback-spec.rules.yml"] == doc["rollback_rules"]["spec"]
    r = routes_of(files)
    assert r["zh"]["deployment"] == "spec" and r["zh"]["speculation"] == "on (k=3)"
    assert r["code"]["speculation"].startswith("off") and r["code"]["verdict"] == "DO_NOT_ADOPT"
    readme = files["README.md"]
    assert "POST" in readme and "spec.strategy.json" in readme and "0.02 s" in readme  # drill
    assert "code (`spec`): DO_NOT_ADOPT" in readme


def test_vllm_candidate_gets_its_speculative_config_and_the_rest_stays_on_the_baseline(
    doc: dict[str, Any],
) -> None:
    options = {"model": "/m/target", "draft": "/m/draft", "k": 4, "served_model_name": "svc"}
    files = rollout_files(on_engine(doc, "vllm", options))
    want = {"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 4}
    assert json.loads(files["spec.speculative-config.json"]) == want
    words = argv(files["spec.launch.sh"])
    assert words[:3] == ["vllm", "serve", "/m/target"]
    assert json.loads(value(words, "--speculative-config")) == want
    assert value(words, "--served-model-name") == "svc" and value(words, "--host") == "HOST"
    assert "spec.strategy.json" not in files  # no runtime scopes on vLLM
    r = routes_of(files)
    assert r["zh"]["deployment"] == "spec" and r["code"]["deployment"] == "base"
    models = {m["model_name"]: m["litellm_params"] for m in yaml.safe_load(
        files["litellm.config.yaml"])["model_list"]}  # fmt: skip
    assert models["zh"] == {
        "model": "openai/svc",
        "api_base": "os.environ/SPECPILOT_API_BASE_SPEC",
        "api_key": "os.environ/SPECPILOT_API_KEY",
    }
    assert models["code"]["api_base"] == "os.environ/SPECPILOT_API_BASE_BASE"
    # an n-gram method given as vLLM's own JSON goes out as given
    ngram = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}
    files = rollout_files(on_engine(doc, "vllm", {"model": "/m/t", "speculative_config": ngram}))
    assert json.loads(files["spec.speculative-config.json"]) == ngram


def test_sglang_candidate_gets_its_speculative_flags(doc: dict[str, Any]) -> None:
    files = rollout_files(on_engine(doc, "sglang", {"model": "/m/t", "draft": "/m/d", "k": 2}))
    words = argv(files["spec.launch.sh"])
    assert words[:3] == ["python3", "-m", "sglang.launch_server"]
    assert value(words, "--model-path") == "/m/t"
    flags = {f: value(words, f) for f in words if f.startswith("--speculative-")}
    assert flags == {
        "--speculative-algorithm": "STANDALONE",
        "--speculative-draft-model-path": "/m/d",
        "--speculative-num-steps": "2",
        "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "3",
    }


def test_llamacpp_candidate_gets_llama_servers_flags_with_the_measured_draft_file(
    doc: dict[str, Any],
) -> None:
    """The draft the pilot exported to GGUF (its manifest's path) is the one deployed."""
    prepared = {"models": [{"role": "draft", "path": "/cache/d.gguf", "sha256": "ab" * 32}]}
    options = {"model": "/m/t.gguf", "draft": "shipped:smollm2-135m-instruct-d4", "draft_n_max": 5}
    files = rollout_files(on_engine(doc, "llamacpp", options, manifest=prepared))
    words = argv(files["spec.launch.sh"])
    assert words[:3] == ["llama-server", "-m", "/m/t.gguf"]
    assert value(words, "--spec-type") == "draft-simple" and value(words, "-md") == "/cache/d.gguf"
    assert (value(words, "--spec-draft-n-max"), value(words, "--spec-draft-n-min")) == ("5", "0")
    assert "ab" * 32 in files["README.md"] and "--draft-max" in files["README.md"]
    # n-gram: its own settings under llama-server's names; CommonParams extras have none
    options = {"model": "/m/t.gguf", "spec_type": "ngram-mod", "extra": {"n_batch": 256}}
    files = rollout_files(on_engine(doc, "llamacpp", options))
    words = argv(files["spec.launch.sh"])
    assert value(words, "--spec-ngram-mod-n-max") == "3" and "-md" not in words
    assert not [w for w in words if w.startswith("--x-")]
    assert "--x-n_batch" in files["README.md"]  # said, not silently lost


def windowed(doc: dict[str, Any]) -> dict[str, Any]:
    """The verdict with ``zh`` adopted only below 2 req/s (it paid at 1, not at 4)."""
    d = copy.deepcopy(doc)
    v = d["verdicts"][0]
    v["verdict"], v["groups_adopted"], v["groups_in_windows"] = "ADOPT_IN_WINDOWS", [], ["zh"]
    g = next(g for g in v["groups"] if g["task_group"] == "zh")
    g |= {"verdict": "ADOPT_IN_WINDOWS", "below_rps": 4.0, "pays_up_to_rps": 1.0}
    g["window"] = "pays at 1 req/s, not at 4 req/s"
    return d


def test_routing_table_carries_the_load_window(doc: dict[str, Any]) -> None:
    # a restart engine: outside the window the group stays on the current service
    files = rollout_files(on_engine(windowed(doc), "vllm", {"model": "/m/t", "draft": "/m/d"}))
    zh = routes_of(files)["zh"]
    assert (zh["verdict"], zh["deployment"]) == ("ADOPT_IN_WINDOWS", "base")
    assert zh["in_window"]["deployment"] == "spec" and zh["in_window"]["on_up_to_rps"] == 1.0
    assert zh["in_window"]["does_not_pay_at_rps"] == 4.0
    assert "zh pays only up to 1 req/s" in files["README.md"]
    models = yaml.safe_load(files["litellm.config.yaml"])["model_list"]
    assert {m["model_name"]: m["litellm_params"]["api_base"] for m in models}["zh"].endswith(
        "_BASE"
    )  # the safe side until someone switches it in the window
    # the builtin server: one process, the window's switch is two PUT bodies per group
    files = rollout_files(windowed(doc))
    assert json.loads(files["spec.strategy.json"]) == {"default": 0, "models": {}, "tags": {}}
    zh = routes_of(files)["zh"]
    assert zh["deployment"] == "spec" and zh["in_window"]["switch_on"] == [
        {"scope": "tag:zh", "k": 3},
        {"scope": "model:zh", "k": 3},
    ]
    assert zh["in_window"]["switch_off"][0] == {"scope": "tag:zh", "k": 0}


def test_nothing_adopted_writes_only_a_readme_that_says_why(
    doc: dict[str, Any], tmp_path: Path
) -> None:
    d = copy.deepcopy(doc)
    v = d["verdicts"][0]
    v |= {"verdict": "DO_NOT_ADOPT", "groups_adopted": [], "summary": "do not adopt now: x"}
    files = rollout_files(d)
    assert list(files) == ["README.md"]
    assert (
        "Nothing was adopted" in files["README.md"] and "do not adopt now: x" in files["README.md"]
    )
    # written over an earlier rollout of the same folder: the old scope's files are gone
    old = tmp_path / "rollout"
    old.mkdir()
    (old / "spec.strategy.json").write_text("{}")
    data = full_case()
    data.pilot.config = {**TRACE_CONFIG}
    rep = build_report(data, plots=False)
    rep.document["verdicts"] = d["verdicts"]
    paths = rep.write(tmp_path)
    assert old in paths and sorted(p.name for p in old.iterdir()) == ["README.md"]


def test_a_builtin_arm_by_url_gets_its_scope_file_and_no_launch(doc: dict[str, Any]) -> None:
    d = copy.deepcopy(doc)
    spec = next(a for a in d["pilot"]["config"]["arms"] if a["name"] == "spec")
    spec |= {"url": "http://10.0.0.7:8000", "options": None}
    files = rollout_files(d)
    assert "spec.launch.sh" not in files
    assert json.loads(files["spec.strategy.json"])["tags"] == {"zh": 3}  # k from the strategy
    assert "given by URL (http://10.0.0.7:8000)" in files["README.md"]
