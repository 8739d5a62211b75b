"""``specpilot compat``: the matrix and JSON for two arms of a real in-process server (tiny
random models with SmolLM2's tokenizer: fast), and argument errors."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from specpilot.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    from conftest import tiny_model
    from specpilot.engine.generate import Engine
    from specpilot.engine.loader import default_target_path, load_tokenizer
    from specpilot.serve import ServerConfig, create_app
    from test_server import LiveServer

    tok = load_tokenizer(default_target_path())
    engine = Engine(
        tiny_model(21), tiny_model(22, n_layers=1), tokenizer=tok, max_slots=2, max_seq_len=256
    )
    s = LiveServer(
        create_app(ServerConfig(model_name="tiny", draft_name="d", default_k=2), engine=engine)
    )
    yield s.url
    s.stop()


def test_compat_cli_prints_the_matrix_and_json(url, capsys):
    rc = main(
        [
            "compat",
            url,
            url,
            "--arm",
            "a",
            "--arm",
            "b",
            "--features",
            "streaming,length,stop_in_round",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert out.splitlines()[0].split() == ["feature", "a", "b"]
    assert [line.split() for line in out.splitlines()[1:4]] == [
        ["streaming", "pass", "pass"],
        ["length", "pass", "pass"],
        ["stop_in_round", "pass", "pass"],
    ]
    assert main(["compat", url, "--arm", "a", "--features", "length", "--json"]) == 0
    [rec] = json.loads(capsys.readouterr().out)
    assert (rec["arm"], rec["feature"], rec["status"]) == ("a", "length", "pass")
    assert rec["evidence"] == "max_tokens 8: 8 tokens, finish length"


def test_compat_cli_errors(url, capsys):
    assert main(["compat", url, "--arm", "a", "--arm", "b"]) == 2
    assert "give one --arm per URL" in capsys.readouterr().err
    assert main(["compat", url, "--features", "teleport"]) == 2
    assert "unknown compat feature" in capsys.readouterr().err
