"""The real ``specpilot serve`` process with the real default target (SmolLM2-135M).

Two servers start in parallel on free loopback ports: fp32 with the truncated draft (k = 2;
in fp32 speculative greedy output equals the target's plain greedy output exactly, R1) and
``--no-draft`` in bf16 (the draft must not be loaded at all).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import torch

from specpilot.engine.generate import Engine
from specpilot.engine.runtime import chat_prompt_ids
from specpilot.engine.sampling import SamplingParams

pytestmark = pytest.mark.slow
MODEL = "smollm2"
TOKEN = "e2e-token"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
# One worked example in the history, as a client would send after a first tool round trip.
FEW_SHOT = [
    {"role": "user", "content": "What is the weather in London?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "London"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 12}'},
    {"role": "assistant", "content": "It is 12 degrees in London."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(*args: str) -> tuple[subprocess.Popen[bytes], str, Any]:
    port = _port()
    cmd = [
        sys.executable,
        "-m",
        "specpilot.cli",
        "serve",
        "--port",
        str(port),
        "--served-model-name",
        MODEL,
    ]
    cmd += ["--admin-token", TOKEN, "--threads", "1", "--max-seq-len", "1024", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the fixture; a pipe could fill and block)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    return proc, f"http://127.0.0.1:{port}", log


def _wait(proc: subprocess.Popen[bytes], url: str, log: Any, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"server exited: {log.read().decode(errors='replace')[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become healthy")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    spec, spec_url, spec_log = _start(
        "--dtype", "float32", "--draft", "truncate:0,1,28,29", "-k", "2", "--max-slots", "2"
    )
    plain, plain_url, plain_log = _start("--dtype", "bfloat16", "--no-draft", "--max-slots", "1")
    try:
        _wait(spec, spec_url, spec_log)
        _wait(plain, plain_url, plain_log)
        yield {"spec": spec_url, "plain": plain_url}
    finally:
        for p in (spec, plain):
            p.terminate()
        for p in (spec, plain):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        spec_log.close()
        plain_log.close()


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as s:
        yield s


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)


def test_greedy_through_server_equals_engine_plain_greedy(
    servers: dict[str, str], default_target: Any, stack: contextlib.ExitStack
) -> None:
    tok = default_target.tokenizer
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the servers run one thread each; a busy 2-core machine hates 2x2
    ref = Engine(default_target.model, None, tokenizer=tok, max_slots=1, max_seq_len=1024)
    ids = chat_prompt_ids(tok, "Write a Python function that returns the n-th Fibonacci number.")
    try:
        want = ref.generate(ids, SamplingParams(max_tokens=20), k=0)
    finally:
        torch.set_num_threads(before)  # under pytest-xdist a worker keeps its one thread
    c = stack.enter_context(_client(servers["spec"]))
    msgs = [
        {
            "role": "user",
            "content": "Write a Python function that returns the n-th Fibonacci number.",
        }
    ]
    r = c.chat.completions.create(
        model=MODEL,
        messages=msgs,
        max_tokens=20,
        temperature=0,
        extra_body={"spec_metrics": "summary"},
    )
    assert r.choices[0].message.content == want.text
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == want.output_tokens
    sd = r.model_extra["metrics"]["speculative_decoding"]
    assert sd["num_spec_tokens"] == 2 and sd["num_spec_steps"] > 0  # it really ran speculatively
    stream = c.chat.completions.create(
        model=MODEL, messages=msgs, max_tokens=20, temperature=0, stream=True
    )
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == want.text


def test_tool_call_end_to_end_stream_and_not(
    servers: dict[str, str], stack: contextlib.ExitStack
) -> None:
    c = stack.enter_context(_client(servers["spec"]))
    kw: dict[str, Any] = dict(
        model=MODEL,
        messages=FEW_SHOT,
        tools=TOOLS,
        tool_choice="required",
        temperature=0,
        max_tokens=40,
    )
    r = c.chat.completions.create(**kw)
    ch = r.choices[0]
    # The 135M model, shown one example, answers with a call in the format we parse.
    assert ch.finish_reason == "tool_calls", ch.message.content
    assert ch.message.content is None
    [call] = ch.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
        "city": "Paris"
    }
    # The tools really went into the prompt (through our system message: SmolLM2's template has no tools).
    bare = c.chat.completions.create(**{**kw, "tools": None, "tool_choice": None, "max_tokens": 1})
    assert r.usage.prompt_tokens > bare.usage.prompt_tokens + 50
    chunks = list(c.chat.completions.create(**kw, stream=True))
    deltas = [tc for x in chunks if x.choices for tc in (x.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.function.name, d.function.arguments) for d in deltas] == [
        (0, "get_weather", call.function.arguments)
    ]
    assert [
        x.choices[0].finish_reason for x in chunks if x.choices and x.choices[0].finish_reason
    ] == ["tool_calls"]


def test_no_draft_server_loads_no_draft(servers: dict[str, str]) -> None:
    url = servers["plain"]
    metrics = httpx.get(url + "/metrics").text
    assert f'specpilot_memory_bytes{{model_name="{MODEL}",part="draft_weights"}} 0.0' in metrics
    assert (
        f'specpilot_memory_bytes{{model_name="{MODEL}",part="draft_kv_allocated"}} 0.0' in metrics
    )
    r = httpx.put(
        url + "/admin/strategy",
        json={"scope": "default", "k": 2},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 400
    with _client(url) as c:
        out = c.completions.create(model=MODEL, prompt="Hello", max_tokens=4, temperature=0)
    assert out.usage.completion_tokens >= 1
    spec_metrics = httpx.get(servers["spec"] + "/metrics").text
    assert 'part="draft_weights"} 0.0' not in spec_metrics
