"""Every engine specpilot starts is one adapter (``backends.adapters``): the pilot asks it for
the backend, the strategy, the frozen and capacity settings, the plain form, the model files and
the files to prepare. These check each adapter's answers against its engine's own command line
and the rules the pilot relies on. No engine starts here."""

from __future__ import annotations

import pytest

from specpilot.backends.adapters import ADAPTERS, adapter_of
from specpilot.pilot.config.arms import ARM_MODELS
from specpilot.pilot.config.options import OPTIONS
from specpilot.pilot.plan.engines import engine_options

SPECULATIVE = {
    "builtin": {"draft": "truncate:0,1", "k": 3, "threads": 1},
    "llamacpp": {"spec_type": "ngram-mod", "draft_n_max": 4, "threads": 2},
    "vllm": {"model": "/m", "draft": "/d", "k": 4, "max_num_seqs": 8},
    "sglang": {"model": "/m", "draft": "/d", "k": 2},
}


def test_the_pilot_vocabulary_is_the_adapters():
    assert set(ADAPTERS) == set(OPTIONS) == set(ARM_MODELS)
    assert all(OPTIONS[e] is a.options for e, a in ADAPTERS.items())
    assert adapter_of("openai") is None


@pytest.mark.parametrize("engine", sorted(SPECULATIVE))
def test_speculation_on_and_its_plain_form_off(engine):
    a = ADAPTERS[engine]
    o = engine_options(engine, SPECULATIVE[engine])
    on = a.strategy(o)
    assert on.kind != "none" and on.k == (SPECULATIVE[engine].get("k") or 4)
    plain = o.model_copy(update=a.plain())
    assert a.strategy(plain).kind == "none", a.plain()
    target, frozen, capacity = a.frozen(o, 2)
    assert frozen["target"] == target and set(frozen) >= {"dtype", "threads", "context_limit"}
    assert capacity and all(k not in frozen for k in capacity)


def test_the_backends_carry_the_options_as_their_engines_flags(tmp_path):
    b = ADAPTERS["builtin"].backend(
        engine_options("builtin", SPECULATIVE["builtin"]), dtype="float32", files={}, port=None
    )
    cmd = b.command()
    assert cmd[cmd.index("-k") + 1] == "3" and cmd[cmd.index("--dtype") + 1] == "float32"
    plain = engine_options("builtin", {"threads": 1}).model_copy(update={})
    assert (
        "--no-draft"
        in ADAPTERS["builtin"].backend(plain, dtype=None, files={}, port=None).command()
    )
    v = (
        ADAPTERS["vllm"]
        .backend(
            engine_options("vllm", SPECULATIVE["vllm"]),
            dtype=None,
            files={"model": "/prepared/model", "draft": "/prepared/draft"},
            port=8000,
        )
        .command()
    )
    assert (
        "/prepared/model" in v
        and '"model": "/prepared/draft"' in v[v.index("--speculative-config") + 1]
    )
    assert v[v.index("--max-num-seqs") + 1] == "8"
    # a prepared draft is not loaded once the plain form switched the draft off (drill restart)
    vp = engine_options("vllm", SPECULATIVE["vllm"]).model_copy(update=ADAPTERS["vllm"].plain())
    off = ADAPTERS["vllm"].backend(vp, dtype=None, files={"draft": "/prepared/draft"}, port=None)
    assert "--speculative-config" not in off.command()
    draft = tmp_path / "d.gguf"
    ll = ADAPTERS["llamacpp"].backend(
        engine_options("llamacpp", {"draft": "shipped:smollm2-135m-instruct-d4"}),
        dtype=None,
        files={"draft": str(draft)},
        port=None,
    )
    assert str(ll.cfg.draft) == str(draft)


def test_what_each_engine_needs_prepared():
    assert ADAPTERS["builtin"].assets(engine_options("builtin", SPECULATIVE["builtin"])) == {}
    ll = ADAPTERS["llamacpp"].assets(engine_options("llamacpp", {"draft": "x.gguf"}))
    assert ll["draft"].kind == "gguf_draft" and ll["draft"].source == "x.gguf"
    v = ADAPTERS["vllm"].assets(
        engine_options("vllm", {"draft": "shipped:smollm2-135m-instruct-d4"})
    )
    assert {k: a.kind for k, a in v.items()} == {"model": "hf_target", "draft": "hf_draft"}
    assert ADAPTERS["vllm"].assets(engine_options("vllm", SPECULATIVE["vllm"])) == {}


def test_only_the_builtin_engine_switches_in_place_and_reports_its_format():
    assert [e for e, a in ADAPTERS.items() if a.in_place] == ["builtin"]
    manifest = {"calibration": {"formats": {"target": "bf16"}}}
    assert ADAPTERS["builtin"].chosen_format(manifest) == "bf16"
    assert ADAPTERS["vllm"].chosen_format(manifest) is None
    assert ADAPTERS["builtin"].chosen_format({}) is None
