"""Backend parsers on the exact formats the engines emit (sources cited per test), manifests.

vLLM and SGLang cannot run here (no GPU): their formats are replayed from their sources; the
live tests are marked ``gpu``.
"""

from __future__ import annotations

import json
import shutil

import pytest

from specpilot.backends import response_extras_for
from specpilot.backends import sglang as sg
from specpilot.backends import vllm as vl
from specpilot.backends.base import model_file
from specpilot.backends.llamacpp import LlamaCppConfig
from specpilot.backends.llamacpp import normalise_metrics as llama_metrics
from specpilot.backends.openai import OpenAIBackend
from specpilot.backends.prom import parse

# vllm/v1/spec_decode/metrics.py (SpecDecodingProm) with labelnames ["model_name", "engine"]
# (vllm/v1/metrics/loggers.py), as prometheus_client renders counters (_total and _created).
VLLM_EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1200.0
vllm:generation_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7e+09
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 400.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1200.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 700.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="0"} 320.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="1"} 230.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="2"} 150.0
"""


def test_vllm_counters_normalised():
    m = vl.normalise_metrics(VLLM_EXPOSITION)
    assert m["spec_rounds"] == 400 and m["spec_proposed_tokens"] == 1200
    assert m["spec_accepted_tokens"] == 700
    # vLLM's mean acceptance length 1 + accepted/drafts (bonus included) is ours
    assert m["spec_committed_tokens"] / m["spec_rounds"] == 1 + 700 / 400
    assert [m[f"spec_accepted_pos_{i}"] for i in (1, 2, 3)] == [320, 230, 150]
    assert sum(m[f"spec_accepted_pos_{i}"] for i in (1, 2, 3)) == m["spec_accepted_tokens"]
    assert m["requests_running"] == 3 and m["generation_tokens"] == 1200  # _created ignored


def test_vllm_two_engines_are_summed():
    two = VLLM_EXPOSITION + VLLM_EXPOSITION.replace('engine="0"', 'engine="1"')
    assert vl.normalise_metrics(two)["spec_rounds"] == 800


def test_vllm_per_request_metrics():
    # docs/features/speculative_decoding/acceptance_metrics.md: the summary example, verbatim
    final_chunk = {
        "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 53, "total_tokens": 63},
        "metrics": {
            "speculative_decoding": {
                "mean_acceptance_length": 1.2325581395348837,
                "draft_acceptance_rate": 0.07751937984496124,
                "acceptance_histogram": [39, 1, 0, 3],
                "acceptance_histogram_by_draft_length": {"3": [39, 1, 0, 3]},
                "num_spec_steps": 43,
                "num_accepted_draft_tokens": 10,
                "num_draft_tokens": 129,
                "num_spec_tokens": 3,
            }
        },
    }
    spec = vl.response_extras(final_chunk)["spec"]
    assert spec["rounds"] == 43 and spec["accepted"] == 10 and spec["committed"] == 53
    assert spec["mean_accept_length"] == pytest.approx(1.2325581395348837)
    assert spec["acceptance_rate"] == pytest.approx(0.07751937984496124)
    assert vl.response_extras({"choices": []}) == {}


def test_vllm_launch_command():
    be = vl.VllmBackend("Qwen/Qwen3-8B", draft="Qwen/Qwen3-0.6B", k=5, port=8000, executable="vllm")
    argv = be.command()
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    cfg = json.loads(argv[argv.index("--speculative-config") + 1])
    assert cfg == {"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 5, "method": "draft_model"}
    plain = vl.VllmBackend("Qwen/Qwen3-8B", port=8000, executable="vllm").command()
    assert "--speculative-config" not in plain
    m = be.describe()
    assert m.speculative["num_speculative_tokens"] == 5 and m.models[0].sha256 is None  # a hub id


# python/sglang/srt/managers/tokenizer_manager.py (_calculate_spec_decoding_metrics): the keys a
# native /generate response's meta_info carries with speculative decoding on.
SGLANG_META = {
    "id": "abc",
    "finish_reason": {"type": "length", "length": 64},
    "prompt_tokens": 12,
    "completion_tokens": 64,
    "cached_tokens": 0,
    "spec_accept_rate": 0.5,
    "spec_accept_length": 2.5,  # 64 / 25.6 -> completion / verify steps, bonus included
    "spec_accept_token_num": 39,
    "spec_draft_token_num": 78,
    "spec_verify_ct": 25,
}


def test_sglang_meta_info_normalised():
    spec = sg.response_extras({"text": "...", "meta_info": SGLANG_META})["spec"]
    assert spec["rounds"] == 25 and spec["accepted"] == 39 and spec["proposed"] == 78
    assert spec["committed"] == 64  # = completion_tokens: accepted + one bonus per step
    # newer releases: spec_num_correct_drafts / spec_num_proposed_drafts
    newer = {
        k: v
        for k, v in SGLANG_META.items()
        if k not in ("spec_accept_token_num", "spec_draft_token_num")
    }
    newer.update(spec_num_correct_drafts=39, spec_num_proposed_drafts=78)
    assert sg.response_extras({"meta_info": newer})["spec"]["accepted"] == 39
    # only the step count: accepted derived from accept_length's definition
    bare = {"completion_tokens": 64, "spec_verify_ct": 25}
    assert sg.response_extras({"meta_info": bare})["spec"]["accepted"] == 39


def test_sglang_server_info_and_gauges():
    # /get_server_info as read by SGLang's own bench_serving (internal_states[0])
    info = {
        "internal_states": [{"last_gen_throughput": 812.5, "avg_spec_accept_length": 2.75}],
        "version": "0.5.9",
    }
    assert sg.normalise_server_info(info) == {
        "spec_mean_accept_length_since_start": 2.75,
        "generation_throughput_tok_s": 812.5,
    }
    text = 'sglang:spec_accept_length{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 2.75\n'
    text += 'sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 4.0\n'
    assert sg.normalise_metrics(text) == {
        "spec_mean_accept_length_gauge": 2.75,
        "requests_running": 4.0,
    }


def test_sglang_launch_command():
    argv = sg.SglangBackend(
        "meta-llama/Llama-3.1-8B", draft="meta-llama/Llama-3.2-1B", k=4, port=30000
    ).command()
    i = argv.index("--speculative-algorithm")
    assert argv[i + 1] == "STANDALONE"
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "meta-llama/Llama-3.2-1B"
    assert argv[argv.index("--speculative-num-steps") + 1] == "4"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "5"


# What this machine's llama.cpp build (xllamacpp 2026.10) serves: see test_llamacpp.py for live.
LLAMA_EXPOSITION = """\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 16
llamacpp:spec_decode_num_draft_tokens_total 9
llamacpp:spec_decode_num_accepted_tokens_total 9
llamacpp:spec_decode_num_drafts_total 2
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 2
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1
"""


def test_llamacpp_counters_include_the_bonus_token_on_import():
    m = llama_metrics(LLAMA_EXPOSITION)
    assert m["spec_rounds"] == 2 and m["spec_accepted_tokens"] == 9
    assert m["spec_committed_tokens"] == 11  # llama.cpp's 9 accepted + one bonus per step
    assert m["spec_accepted_pos_1"] == 2 and m["generation_tokens"] == 16
    spec = response_extras_for("llamacpp")(
        {"timings": {"draft_n": 9, "draft_n_accepted": 9, "prompt_ms": 350.0}}
    )
    assert (
        spec["prefill_s"] == 0.35 and spec["spec"]["rounds"] is None
    )  # no step count per response


def test_llamacpp_config_validation_and_flags(tmp_path):
    with pytest.raises(ValueError, match="draft-simple needs a draft"):
        LlamaCppConfig(model="t.gguf", spec_type="draft-simple").effective_spec_type()
    with pytest.raises(ValueError, match="spec_type"):
        LlamaCppConfig(model="t.gguf", spec_type="eagle").effective_spec_type()
    f = LlamaCppConfig(model="t.gguf", draft="d.gguf", draft_n_max=8).flags()
    assert f[f.index("--spec-type") + 1] == "draft-simple" and f[f.index("-md") + 1] == "d.gguf"
    assert f[f.index("--spec-draft-n-max") + 1] == "8"


def test_prom_parser_edge_cases():
    s = parse(
        'a{l="x \\"q\\" y",m="1"} NaN\nb +Inf 1700000000\n# comment\nbroken line here\nc 2e3\n'
    )
    assert s[0].labels == {"l": 'x "q" y', "m": "1"} and s[0].value != s[0].value
    assert s[1].value == float("inf") and s[2].value == 2000.0 and len(s) == 3


def test_model_file_hashes_and_openai_manifest(tmp_path):
    f = tmp_path / "m.bin"
    f.write_bytes(b"abc")
    mf = model_file("target", f)
    assert (
        mf.sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        and mf.bytes == 3
    )
    d = tmp_path / "dir"
    d.mkdir()
    shutil.copy(f, d / "w.bin")
    assert model_file("draft", d).sha256 != mf.sha256
    man = OpenAIBackend("https://api.example.com/v1").describe()
    assert "unknown" in man.notes[0] and man.endpoint == "https://api.example.com"
    hw = man.hardware["client"]
    assert hw["cpu_logical_cores"] >= 1 and hw["ram_bytes"] > 0


@pytest.mark.gpu
def test_vllm_live_draft_model():
    """Needs vLLM and a GPU: a real draft-model run, counters consistent with responses."""
    pytest.importorskip("vllm")
    import httpx

    be = vl.VllmBackend(
        "Qwen/Qwen3-0.6B", draft="Qwen/Qwen3-0.6B", k=3, per_request_metrics="summary"
    )
    be.start()
    try:
        before = be.scrape(label="before").metrics
        body = {
            "model": "Qwen/Qwen3-0.6B",
            "prompt": "Count to ten:",
            "max_tokens": 32,
            "temperature": 0,
        }
        r = httpx.post(be.endpoint + "/v1/completions", json=body, timeout=120).json()
        after = be.scrape(label="after").metrics
        spec = vl.response_extras(r).get("spec")
        assert after["spec_rounds"] > before.get("spec_rounds", 0)
        if spec:
            assert (
                after["spec_accepted_tokens"] - before.get("spec_accepted_tokens", 0)
                == spec["accepted"]
            )
    finally:
        be.stop()
