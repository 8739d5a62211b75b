"""A process's fingerprint: its decode time per output token on a fixed greedy prompt, measured
right after it starts and before it serves any episode.

Two processes of one config differ for their whole life (memory placement: on the AMD EPYC
kind one builtin process's decode step took 22.6 ms and another's 18.9 ms from the first
request to the last). If the fingerprint catches that offset, the analysis can use it as a
covariate of the process effect (``analysis.episodes``), centred within each arm so it never
carries the difference between the arms; whether it predicts anything is measured there, and
it is dropped where it does not. The same requests warm the process up: one throwaway request,
then ``repeats`` timed ones (the median is kept).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from typing import Any

import httpx

PROMPT = "Count from one to forty in words, separated by commas."


def fingerprint(
    url: str,
    model: str,
    *,
    tokens: int = 32,
    repeats: int = 3,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``{"decode_s_per_token": median, "samples": [...], "tokens": n}`` over ``repeats``
    streamed greedy requests (after one untimed warm-up request); ``headers``: the endpoint's
    credentials."""
    samples: list[float] = []
    for i in range(repeats + 1):
        # a connection each: llama.cpp's server closes a kept-alive one after a streamed answer
        # at times, and the next request on it fails unanswered (seen in 3 of 5 n-gram starts)
        with httpx.Client(base_url=url, timeout=120.0, headers=dict(headers or {})) as client:
            per_token = _one(client, model, tokens)
        if i > 0 and per_token is not None:
            samples.append(per_token)
    return {
        "decode_s_per_token": statistics.median(samples) if samples else None,
        "samples": samples,
        "tokens": tokens,
        "prompt": PROMPT,
    }


def _one(client: httpx.Client, model: str, tokens: int) -> float | None:
    """Seconds per output token after the first, of one streamed request (None: too short)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "temperature": 0.0,
        "stream": True,
    }
    first = last = None
    events = 0
    with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            now = time.perf_counter()
            first = now if first is None else first
            last = now
            events += 1
    if first is None or last is None or events < 3:
        return None
    return (last - first) / (events - 1)
