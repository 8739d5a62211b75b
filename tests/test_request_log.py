"""Request-log replay (issue 50 item 2, the reader): a few hundred lines in each supported shape,
written here into tmp_path from a seeded generator, read back with routes mapped to groups, and
the arrival offsets and bodies checked against what was written.

The lines copy the real formats' field names:

- OpenAI Batch API input: ``{"custom_id", "method", "url", "body"}`` (``BatchRequestInput`` in
  github.com/openai/openai-openapi ``openapi.yaml``, commit 498c71d), plus the ``timestamp`` a
  user adds (the format has none).
- LiteLLM spend logs: ``LiteLLM_SpendLogs`` rows (github.com/BerriAI/litellm ``schema.prisma``;
  values as ``get_logging_payload`` writes them in
  ``litellm/proxy/spend_tracking/spend_tracking_utils.py``: ``proxy_server_request`` and
  ``metadata`` as JSON strings, ``startTime`` a UTC time).
- vLLM's request log: ``RequestLogger.log_inputs`` (``vllm/entrypoints/logger.py``, the older
  one-line INFO form and the newer DEBUG details + INFO received form) behind vLLM's
  ``%(levelname)s %(asctime)s [%(filename)s:%(lineno)d]`` prefix with ``%m-%d %H:%M:%S``
  (``vllm/logger.py``); ``SamplingParams.__repr__`` in ``vllm/sampling_params.py``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from specpilot.errors import ConfigError, InputFileError
from specpilot.workload.requestlog import (
    RequestLogReplay,
    read_request_log,
    request_log_trace,
)
from specpilot.workload.trace import find_windows

T0 = dt.datetime(2025, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def _times(n: int, seed: int, ms: bool = True) -> np.ndarray:
    """Seconds from T0: exponential gaps (mean 0.25 s) with a burst of 40 quick ones at n/2."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(0.25, n)
    gaps[n // 2 : n // 2 + 40] = 0.01
    t = np.cumsum(gaps)
    return np.round(t, 3) if ms else t


def _chat(i: int, model: str) -> dict:
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": f"Question {i}: what is {i} * {i + 1}? " + "x" * (i % 37)},
        ],
        "max_tokens": 16 + i % 7,
        "temperature": 0.0,
        "stream": i % 3 == 0,
        **({"stream_options": {"include_usage": True}} if i % 6 == 0 else {}),
    }


def _completion(i: int, model: str) -> dict:
    return {"model": model, "prompt": f"def f{i}(x):\n    return", "max_tokens": 32, "stop": ["\n"]}


def _replayed(body: dict) -> dict:
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def _sha(body: dict) -> str:
    blob = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# -- OpenAI Batch API input lines --------------------------------------------------------------

MODELS = {"llama-8b": "chat", "qwen-coder": "code"}


def _batch_log(tmp_path: Path, n: int = 300) -> tuple[Path, list[dict]]:
    """``n`` Batch API lines (chat and completions, two models), every 50th an embeddings line."""
    t = _times(n, seed=1)
    rows = []
    for i in range(n):
        model = "llama-8b" if i % 3 else "qwen-coder"
        if i % 50 == 49:
            url, body = "/v1/embeddings", {"model": "e5", "input": f"text {i}"}
        elif i % 4 == 0:
            url, body = "/v1/completions", _completion(i, model)
        else:
            url, body = "/v1/chat/completions", _chat(i, model)
        when = (T0 + dt.timedelta(seconds=float(t[i]))).isoformat(timespec="milliseconds")
        rows.append(
            {"custom_id": f"request-{i}", "method": "POST", "url": url, "body": body,
             "timestamp": when.replace("+00:00", "Z")}
        )  # fmt: skip
    _write(tmp_path / "batch.jsonl", [json.dumps(r, ensure_ascii=False) for r in rows])
    return tmp_path / "batch.jsonl", rows


def test_openai_batch_lines_replay_their_times_bodies_and_routes(tmp_path):
    path, rows = _batch_log(tmp_path)
    log = read_request_log(path, route_field="body.model", routes=MODELS)
    assert log.shape == "openai_batch" and log.source == "batch.jsonl"
    kept = [r for r in rows if r["url"] != "/v1/embeddings"]
    assert len(log.entries) == len(kept) == 294 and log.skipped == {"url /v1/embeddings": 6}
    t = np.array([dt.datetime.fromisoformat(r["timestamp"]).timestamp() for r in kept])
    assert np.allclose(log.times(), t - t[0], atol=1e-6)
    for e, r in zip(log.entries, kept, strict=True):
        assert e.request_id == r["custom_id"] and e.line == rows.index(r) + 1
        assert e.body == _replayed(r["body"]) and e.body_sha256 == _sha(_replayed(r["body"]))
        assert e.api == ("chat" if r["url"] == "/v1/chat/completions" else "completions")
        assert e.group == MODELS[r["body"]["model"]] and e.route == r["body"]["model"]
    assert log.duration_s == pytest.approx(t[-1] - t[0])
    assert log.start_time == dt.datetime.fromisoformat(kept[0]["timestamp"]).isoformat()
    assert log.time_resolution_s is None  # millisecond times: nothing to spread


def test_a_stream_flag_does_not_change_the_hash(tmp_path):
    base = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    path = _write(
        tmp_path / "s.jsonl",
        [
            json.dumps({"timestamp": 1.0, "body": base}),
            json.dumps({"timestamp": 2.0, "body": {**base, "stream": True}}),
            json.dumps({"timestamp": 3.0, "body": {**base, "max_tokens": 5}}),
        ],
    )
    a, b, c = read_request_log(path).entries
    assert a.body_sha256 == b.body_sha256 != c.body_sha256


# -- LiteLLM spend logs -----------------------------------------------------------------------


def _spend_log(tmp_path: Path, n: int = 300) -> tuple[Path, list[dict]]:
    """``n`` LiteLLM_SpendLogs rows, newest first (as /spend/logs lists them); every 40th is an
    embedding; two teams' key aliases in ``metadata``."""
    t = _times(n, seed=2, ms=False)
    rows = []
    for i in range(n):
        group = ["gpt-4o-mini", "claude-haiku", "local-llama"][i % 3]
        call = "aembedding" if i % 40 == 7 else "atext_completion" if i % 5 == 0 else "acompletion"
        body = _completion(i, group) if call == "atext_completion" else _chat(i, group)
        start = T0 + dt.timedelta(seconds=float(t[i]))
        rows.append(
            {
                "request_id": f"chatcmpl-{i:05d}",
                "call_type": call,
                "api_key": "88dc28d0f030c55ed4ab77ed8faf098196cb1c05df778539800c9f1243fe6b4b",
                "spend": 0.00012,
                "total_tokens": 40 + i,
                "prompt_tokens": 30,
                "completion_tokens": 10 + i % 9,
                "startTime": start.isoformat(sep=" "),
                "endTime": (start + dt.timedelta(seconds=1.5)).isoformat(sep=" "),
                "model": f"openai/{group}",
                "model_group": group,
                "custom_llm_provider": "openai",
                "api_base": "http://10.0.0.5:8000/v1",
                "user": "",
                "metadata": json.dumps({"user_api_key_alias": "team-a" if i % 2 else "team-b"}),
                "cache_hit": "False",
                "request_tags": "[]",
                "messages": "{}",
                "response": "{}",
                "proxy_server_request": json.dumps({} if call == "aembedding" else body),
                "status": "success",
            }
        )
    _write(tmp_path / "spend.jsonl", [json.dumps(r) for r in reversed(rows)])
    return tmp_path / "spend.jsonl", rows


def test_litellm_spend_rows_replay_sorted_with_model_groups(tmp_path):
    path, rows = _spend_log(tmp_path)
    routes = {"gpt-4o-mini": "chat", "claude-haiku": "chat", "local-llama": "code"}
    log = read_request_log(path, route_field="model_group", routes=routes)
    assert log.shape == "litellm_spend" and log.skipped == {"call_type aembedding": 8}
    kept = [r for r in rows if r["call_type"] != "aembedding"]
    t = np.array([dt.datetime.fromisoformat(r["startTime"]).timestamp() for r in kept])
    assert np.all(np.diff(log.times()) >= 0)
    assert np.allclose(log.times(), t - t[0], atol=1e-6)
    for e, r in zip(log.entries, kept, strict=True):
        assert e.request_id == r["request_id"] and e.group == routes[r["model_group"]]
        assert e.body == _replayed(json.loads(r["proxy_server_request"]))
        assert e.api == ("completions" if r["call_type"] == "atext_completion" else "chat")
        assert e.output_tokens == r["completion_tokens"] and not e.truncated
        assert e.line == len(rows) - rows.index(r)  # the file lists the rows newest first


def test_a_route_inside_a_json_string_column(tmp_path):
    path, rows = _spend_log(tmp_path, n=60)
    log = read_request_log(
        path, route_field="metadata.user_api_key_alias", routes={"team-a": "code", "team-b": "chat"}
    )
    by_id = {r["request_id"]: json.loads(r["metadata"])["user_api_key_alias"] for r in rows}
    assert {e.route for e in log.entries} == {"team-a", "team-b"}
    assert all(e.route == by_id[e.request_id] for e in log.entries)


def test_litellm_cut_bodies_are_flagged(tmp_path):
    cut = "abc... (litellm_truncated skipped 91234 chars) ...xyz"
    row = {"call_type": "acompletion", "startTime": "2025-03-01 12:00:00+00:00",
           "proxy_server_request": json.dumps({"messages": [{"role": "user", "content": cut}]})}  # fmt: skip
    log = read_request_log(_write(tmp_path / "cut.jsonl", [json.dumps(row)]))
    assert log.entries[0].truncated and log.describe()["truncated"] == 1


# -- vLLM's request log -----------------------------------------------------------------------


def _sampling(i: int) -> str:
    """SamplingParams.__repr__ (vllm/sampling_params.py), its field order."""
    seed = None if i % 2 else 1000 + i
    stop = ["\n\n"] if i % 5 == 0 else []
    temp = 0.0 if i % 3 else 0.7
    return (
        f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
        f"repetition_penalty=1.0, temperature={temp}, top_p=1.0, top_k=0, min_p=0.0, "
        f"seed={seed}, stop={stop}, stop_token_ids=[], bad_words=[], "
        f"include_stop_str_in_output=False, ignore_eos=False, max_tokens={64 + i}, min_tokens=0, "
        f"logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
        f"spaces_between_special_tokens=True, structured_outputs=None, extra_args=None)"
    )


def _vllm_prompt(i: int) -> str:
    quote = "it's" if i % 4 == 0 else 'say "hi"' if i % 4 == 1 else "both ' and \""
    return f"<|im_start|>user\n第{i}个问题: {quote}\tend<|im_end|>\n<|im_start|>assistant\n"


LORA = "LoRARequest(lora_name='sql-lora', lora_int_id=1, lora_path='/loras/sql', long_lora_max_len=None)"


def _vllm_log(tmp_path: Path, form: str, n: int = 200) -> tuple[Path, list[dict]]:
    """``n`` requests in vLLM's log, whole-second times with up to 4 a second, between startup,
    access-log, stats and 'Generated response' lines; every 9th request is on a LoRA adapter,
    every 25th line an embeddings request (PoolingParams)."""
    seconds = np.cumsum(np.random.default_rng(3).integers(0, 2, n) * np.arange(1, n + 1) % 3)
    lines = [
        "INFO 03-01 11:59:58 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000"
    ]
    reqs = []
    pid = "(APIServer pid=4711) " if form == "new" else ""
    for i in range(n):
        stamp = (T0 + dt.timedelta(seconds=int(seconds[i]))).strftime("%m-%d %H:%M:%S")
        rid = f"chatcmpl-{i:032x}" if i % 2 else f"cmpl-{i:032x}-0"
        prompt, ids = _vllm_prompt(i), list(range(100, 110 + i % 13))
        lora = LORA if i % 9 == 0 else "None"
        if form == "old":
            lines.append(
                f"INFO {stamp} [logger.py:39] Received request {rid}: prompt: {prompt!r}, "
                f"params: {_sampling(i)}, prompt_token_ids: {ids}, prompt_embeds shape: None, "
                f"lora_request: {lora}, prompt_adapter_request: None."
            )
        else:
            lines.append(
                f"{pid}DEBUG {stamp} [logger.py:36] Request {rid} details: prompt: {prompt!r}, "
                f"prompt_token_ids: {ids}, prompt_embeds shape: None."
            )
            lines.append(
                f"{pid}INFO {stamp} [logger.py:44] Received request {rid}: params: "
                f"{_sampling(i)}, lora_request: {lora}."
            )
        lines.append(f'{pid}INFO:     127.0.0.1:5{i:04d} - "POST /v1/completions HTTP/1.1" 200 OK')
        if i % 25 == 0:
            lines.append(
                f"INFO {stamp} [logger.py:39] Received request embd-{i}-0: prompt: 'x', params: "
                f"PoolingParams(dimensions=None, normalize=None), prompt_token_ids: [1], "
                f"prompt_embeds shape: None, lora_request: None, prompt_adapter_request: None."
            )
        if i % 10 == 0:
            lines.append(
                f"{pid}INFO {stamp} [loggers.py:123] Engine 000: Avg prompt throughput: 12.3 "
                f"tokens/s, Avg generation throughput: 45.6 tokens/s, Running: 3 reqs"
            )
            lines.append(
                f"INFO {stamp} [logger.py:71] Generated response {rid}: output: 'Sure', "
                f"output_token_ids: [1, 2], finish_reason: stop"
            )
        reqs.append({"id": rid, "second": int(seconds[i]), "prompt": prompt, "ids": ids, "i": i})
    return _write(tmp_path / f"vllm-{form}.log", lines), reqs


@pytest.mark.parametrize("form", ["old", "new"])
def test_vllm_log_replays_prompts_params_and_lora_routes(tmp_path, form):
    path, reqs = _vllm_log(tmp_path, form)
    log = read_request_log(
        path, route_field="lora_name", routes={"sql-lora": "structured", "default": "chat"}
    )
    assert log.shape == "vllm_log" and len(log.entries) == 200
    assert log.skipped == {"PoolingParams": 8} and log.time_resolution_s == 1.0
    assert log.start_time is None  # vLLM's default time has no year
    # whole seconds: the k requests logged in one second are spread at i/k s into it
    sec = np.array([r["second"] for r in reqs], dtype=float)
    _, first, count = np.unique(sec, return_index=True, return_counts=True)
    rank = np.arange(sec.size) - np.repeat(first, count)
    expected = sec + rank / np.repeat(count, count) - sec[0]
    assert np.allclose(log.times(), expected) and count.max() > 1
    for e, r in zip(log.entries, reqs, strict=True):
        i = r["i"]
        assert e.request_id == r["id"] and e.api == "completions"
        assert e.body["prompt"] == r["prompt"] and e.input_tokens_est == len(r["ids"])
        assert e.body["max_tokens"] == 64 + i and e.body["temperature"] == (0.0 if i % 3 else 0.7)
        assert e.body.get("seed") == (None if i % 2 else 1000 + i)
        assert e.body.get("stop") == (["\n\n"] if i % 5 == 0 else None)
        assert "top_k" not in e.body and "ignore_eos" not in e.body  # vLLM defaults left out
        assert e.group == ("structured" if i % 9 == 0 else "chat")


def test_vllm_new_form_without_debug_lines_names_the_fix(tmp_path):
    path, _ = _vllm_log(tmp_path, "new", n=5)
    text = "\n".join(x for x in path.read_text().splitlines() if " details: " not in x)
    with pytest.raises(InputFileError) as err:
        read_request_log(_write(tmp_path / "info-only.log", [text]))
    assert ":2: request cmpl-" in str(err.value) and "VLLM_LOGGING_LEVEL=DEBUG" in err.value.fix


def test_vllm_log_across_new_year_and_with_milliseconds(tmp_path):
    line = (
        "INFO {} [logger.py:39] Received request cmpl-{}-0: prompt: 'p', "
        "params: SamplingParams(max_tokens=4), prompt_token_ids: [1]"
    )
    whole = ["12-31 23:59:59", "01-01 00:00:00", "01-01 00:00:02"]
    log = read_request_log(
        _write(tmp_path / "ny.log", [line.format(s, i) for i, s in enumerate(whole)])
    )
    assert log.times().tolist() == [0.0, 1.0, 3.0] and log.time_resolution_s == 1.0
    ms = ["2024-12-31 23:59:59,500", "2025-01-01 00:00:00,250"]
    log = read_request_log(
        _write(tmp_path / "ms.log", [line.format(s, i) for i, s in enumerate(ms)])
    )
    assert log.times().tolist() == [0.0, 0.75] and log.time_resolution_s is None
    assert log.start_time == "2024-12-31T23:59:59.500000+00:00"


def test_a_vllm_line_quoting_another_is_not_a_request(tmp_path):
    inner = "Received request z: prompt: 'x', params: SamplingParams(max_tokens=1)"
    lines = [
        f"INFO 03-01 12:00:00 [logger.py:39] Received request cmpl-a-0: prompt: "
        f"{'see: Request q details: prompt: ' + repr(inner)!r}, params: SamplingParams("
        f"max_tokens=5), prompt_token_ids: [1, 2, 3]",
        f"INFO 03-01 12:00:01 [logger.py:71] Generated response cmpl-a-0: output: {inner!r}, "
        "output_token_ids: [4], finish_reason: stop",
    ]
    log = read_request_log(_write(tmp_path / "q.log", lines))
    assert [e.request_id for e in log.entries] == ["cmpl-a-0"]
    assert log.entries[0].body == {"prompt": "see: Request q details: prompt: " + repr(inner),
                                   "max_tokens": 5}  # fmt: skip


def test_vllm_log_without_requests_asks_for_request_logging(tmp_path):
    path = _write(tmp_path / "quiet.log", ["INFO 03-01 12:00:00 [api_server.py:1] Started"])
    with pytest.raises(InputFileError, match="no chat or completions request") as err:
        read_request_log(path)
    assert "--enable-log-requests" in err.value.fix


# -- plain JSONL: window, scale, cap ---------------------------------------------------------------


def _plain_log(tmp_path: Path, n: int = 400) -> tuple[Path, np.ndarray]:
    t = _times(n, seed=4)
    lines = [
        json.dumps({"timestamp": 1_740_830_400 + float(t[i]), "group": ["chat", "code"][i % 2],
                    "body": {"messages": [{"role": "user", "content": f"q{i}"}]}})
        for i in range(n)
    ]  # fmt: skip
    return _write(tmp_path / "plain.jsonl", lines), t - t[0]


def test_window_cuts_rebases_and_scales(tmp_path):
    path, rel = _plain_log(tmp_path)
    log = read_request_log(path, group_field="group", window=(10.0, 30.0), time_scale=2.0)
    inside = rel[(rel >= 10.0) & (rel < 30.0)]
    assert log.shape == "jsonl" and log.requests_in_window == inside.size == len(log.entries)
    assert np.allclose(log.times(), (inside - 10.0) * 2.0, atol=1e-5)
    assert log.duration_s == 40.0 and log.keep_fraction == 1.0
    assert {e.group for e in log.entries} == {"chat", "code"}
    assert [e.body["messages"][0]["content"] for e in log.entries] == [
        f"q{i}" for i in np.flatnonzero((rel >= 10.0) & (rel < 30.0))
    ]


def test_rate_cap_thins_evenly_without_moving_a_request(tmp_path):
    path, _ = _plain_log(tmp_path)
    full = read_request_log(path, time_scale=0.5)
    rate = len(full.entries) / full.duration_s
    cap = rate / 3.3
    capped = read_request_log(path, time_scale=0.5, rate_cap=cap)
    n = len(capped.entries)
    assert n == int(len(full.entries) / 3.3) and n / capped.duration_s <= cap
    assert capped.keep_fraction == pytest.approx(1 / 3.3)
    assert set(capped.times().tolist()) <= set(full.times().tolist())  # nothing moved
    # evenly spread: every run of 10 requests in log order keeps 3 or 4
    kept = np.isin(full.times(), capped.times())
    assert {int(kept[i : i + 10].sum()) for i in range(0, 390, 10)} <= {3, 4}
    assert read_request_log(path, time_scale=0.5, rate_cap=cap) == capped  # deterministic
    assert read_request_log(path, time_scale=0.5, rate_cap=rate * 2).entries == full.entries


def test_trace_windows_of_a_log_cut_the_same_requests(tmp_path):
    path, rel = _plain_log(tmp_path)
    trace = request_log_trace(path)
    assert np.allclose(trace.t, rel, atol=1e-5) and trace.n == 400
    burst = find_windows(trace, window_s=20, burst_s=1.0, context_s=10)["burst"]
    assert burst.start_s > 200 * 0.25 * 0.5  # the injected burst, not the quiet start
    log = read_request_log(path, window=(burst.start_s, burst.end_s))
    assert len(log.entries) == burst.requests >= 40 * 0.5


def test_replay_as_an_arrival_process_shows_no_prompt(tmp_path):
    path, _ = _plain_log(tmp_path, n=50)
    log = read_request_log(path, group_field="group")
    proc = RequestLogReplay(log)
    assert np.array_equal(proc.times(log.duration_s), log.times())
    assert proc.times(5.0).max() < 5.0 < log.duration_s
    desc = json.dumps(log.describe()) + json.dumps(proc.describe())
    assert "q1" not in desc and proc.describe()["kind"] == "request_log"
    assert log.describe()["by_group"] == {"chat": 25, "code": 25}


# -- routes and errors -----------------------------------------------------------------------------


def test_unmapped_routes_are_listed_with_the_fix(tmp_path):
    path, _ = _batch_log(tmp_path, n=60)
    with pytest.raises(ConfigError) as err:
        read_request_log(path, route_field="body.model", routes={"llama-8b": "chat"})
    assert "qwen-coder (" in str(err.value) and "line 1)" in str(err.value)
    assert "routes:" in err.value.fix and "default" in err.value.fix
    log = read_request_log(path, route_field="body.model", routes={"default": "other"})
    assert {e.group for e in log.entries} == {"other"}


def test_a_missing_route_field_counts_as_unmapped(tmp_path):
    path = _write(
        tmp_path / "r.jsonl",
        [json.dumps({"timestamp": i, "body": {"prompt": "p"}, **({"r": "a"} if i else {})})
         for i in range(3)],
    )  # fmt: skip
    with pytest.raises(ConfigError, match="<missing> \\(1, line 1\\)"):
        read_request_log(path, route_field="r", routes={"a": "chat"})


def test_many_unmapped_routes_are_listed_ten_at_most(tmp_path):
    lines = [json.dumps({"timestamp": i, "body": {"prompt": "p"}, "r": f"v{i}"}) for i in range(25)]
    with pytest.raises(
        ConfigError, match="25 value\\(s\\) of r not in routes: v0 \\(1, line 1\\)"
    ) as e:
        read_request_log(_write(tmp_path / "many.jsonl", lines), route_field="r", routes={"a": "b"})
    assert str(e.value).endswith("v9 (1, line 10) and 15 more")


BATCH = {"custom_id": "r", "method": "POST", "url": "/v1/chat/completions", "timestamp": 5,
         "body": {"messages": [{"role": "user", "content": "hi"}]}}  # fmt: skip


@pytest.mark.parametrize(
    ("line", "where", "fix"),
    [
        ({k: v for k, v in BATCH.items() if k != "timestamp"}, "no time: none of timestamp, created",
         "Batch API input format has no time"),
        ({**BATCH, "timestamp": "yesterday"}, "timestamp: cannot read 'yesterday'", "ISO 8601"),
        ({**BATCH, "body": {"prompt": "p"}}, "body.messages: a chat body", "messages: [{role"),
        ({**BATCH, "method": "GET"}, "method: 'GET'", "POST"),
        ({k: v for k, v in BATCH.items() if k != "url"}, "url: missing", "/v1/chat/completions"),
        ("{not json", "not valid JSON", "one object a line"),
    ],
)  # fmt: skip
def test_a_bad_batch_line_names_file_line_field_and_fix(tmp_path, line, where, fix):
    lines = [json.dumps({**BATCH, "timestamp": i}) for i in range(6)]
    lines.insert(4, line if isinstance(line, str) else json.dumps(line))
    path = _write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(InputFileError) as err:
        read_request_log(path, shape="openai_batch")
    assert str(err.value).startswith(f"{path}:5: {where}") and fix in err.value.fix


def test_time_field_names_another_time(tmp_path):
    line = {**{k: v for k, v in BATCH.items() if k != "timestamp"}, "meta": {"sent": 7.5}}
    log = read_request_log(_write(tmp_path / "t.jsonl", [json.dumps(line)]), time_field="meta.sent")
    assert log.entries[0].offset_s == 0.0 and log.start_time == "1970-01-01T00:00:07.500000+00:00"


def test_litellm_rows_without_bodies_say_how_to_store_them(tmp_path):
    row = {
        "call_type": "acompletion",
        "startTime": "2025-03-01T12:00:00Z",
        "proxy_server_request": "{}",
    }
    with pytest.raises(InputFileError, match=":1: proxy_server_request: empty") as err:
        read_request_log(_write(tmp_path / "s.jsonl", [json.dumps(row)]))
    assert "store_prompts_in_spend_logs: true" in err.value.fix


def test_a_line_without_its_group_field(tmp_path):
    path, _ = _plain_log(tmp_path, n=5)
    lines = path.read_text().splitlines()
    lines[2] = json.dumps({k: v for k, v in json.loads(lines[2]).items() if k != "group"})
    with pytest.raises(InputFileError, match=":3: no group") as err:
        read_request_log(_write(path, lines), group_field="group")
    assert "default" in err.value.fix


@pytest.mark.parametrize(
    ("text", "message", "fix"),
    [
        ('[{"timestamp": 1}]', "a JSON array", "jq -c '.[]'"),
        ('{"ts": 1, "prompt": "p"}', ":1: cannot tell the log's shape from its keys (ts, prompt)",
         "shape: openai_batch"),
        ("", "empty request log", "one request a line"),
    ],
)  # fmt: skip
def test_a_log_of_no_known_shape(tmp_path, text, message, fix):
    with pytest.raises(InputFileError, match=message.replace("(", "\\(").replace(")", "\\)")) as e:
        read_request_log(_write(tmp_path / "x.jsonl", [text]))
    assert fix in e.value.fix


def test_a_binary_or_missing_file(tmp_path):
    (tmp_path / "z.gz").write_bytes(b"\x1f\x8b\x08\x00\xff\xfe")
    with pytest.raises(InputFileError, match=":1: not UTF-8"):
        read_request_log(tmp_path / "z.gz", shape="jsonl")
    with pytest.raises(InputFileError, match="request log not found"):
        read_request_log(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"time_scale": 0}, "time_scale 0 must be > 0"),
        ({"rate_cap": -1.0}, "rate_cap -1 must be > 0"),
        ({"window": (5.0, 1.0)}, "need 0 <= start < end"),
        ({"route_field": "model"}, "route_field and routes go together"),
        ({"routes": {"a": "chat"}}, "route_field and routes go together"),
        ({"group_field": "g", "route_field": "m", "routes": {}}, "both given"),
        ({"route_field": "m", "routes": {"a": ""}}, "must be a group name"),
        ({"shape": "csv"}, "shape 'csv' is unknown"),
    ],
)
def test_bad_options_are_config_errors(tmp_path, options, message):
    path, _ = _plain_log(tmp_path, n=3)
    with pytest.raises(ConfigError, match=message):
        read_request_log(path, **options)
