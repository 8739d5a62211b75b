"""Capture vLLM's own answers for ``tests/test_fleet_scrape.py`` (run once by hand, not a test):

    PYTHONPATH=src python tests/data/fleet_scrape/capture_vllm.py

Starts ``vllm serve`` (the venv ``specpilot engines install vllm`` made) twice on this CPU, plain
and with the shipped distilled draft (k=3), each with the same KV space, and saves per arm:
``/v1/models`` and ``/metrics`` idle, then ``/metrics`` every second while 8 greedy streamed
requests run against ``max_num_seqs`` 4 (so some wait). Lines as served, nothing edited.
"""

from __future__ import annotations

import concurrent.futures
import sys
import time
from pathlib import Path

import httpx

from specpilot.backends.vllm import VllmBackend

HF = Path.home() / ".cache" / "specpilot" / "hf"
TARGET = HF / "SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f"
DRAFT = HF / "smollm2-135m-instruct-d4-a5a8aa228874b0e4-hf"
OUT = Path(__file__).resolve().parent


def ask(url: str, i: int) -> None:
    body = {
        "model": "smol",
        "messages": [{"role": "user", "content": f"Count from {i} to {i + 60}, one per line."}],
        "max_tokens": 64,
        "temperature": 0.0,
        "stream": True,
    }
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as r:
        for _ in r.iter_lines():
            pass


def capture(name: str, draft: Path | None) -> None:
    be = VllmBackend(
        model=str(TARGET),
        draft=str(draft) if draft else None,
        k=3,
        served_model_name="smol",
        dtype="float32",
        enforce_eager=True,
        extra_args=["--max-model-len", "1024", "--max-num-seqs", "4"],
        kv_space_gib=1,
        threads_bind="0-1",
    )
    t0 = time.monotonic()
    be.start(timeout_s=400)
    print(name, "started in", round(time.monotonic() - t0), "s", file=sys.stderr)
    try:
        url = be.endpoint
        (OUT / f"{name}_models.json").write_text(httpx.get(url + "/v1/models").text)
        (OUT / f"{name}_metrics_idle.txt").write_text(httpx.get(url + "/metrics").text)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futs = [pool.submit(ask, url, i) for i in range(8)]
            for tick in range(1, 4):
                time.sleep(1.0)
                text = httpx.get(url + "/metrics").text
                (OUT / f"{name}_metrics_load_{tick}.txt").write_text(text)
            for f in futs:
                f.result()
        (OUT / f"{name}_metrics_after.txt").write_text(httpx.get(url + "/metrics").text)
    finally:
        be.stop()


if __name__ == "__main__":
    capture("vllm_plain", None)
    capture("vllm_draft", DRAFT)
