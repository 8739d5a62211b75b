"""What scraping the server every second costs its throughput: the builtin server under a
constant closed-loop load, with and without the pilot's own series scraper, in one run.

    .venv/bin/python benchmarks/scrape_cost.py [--pairs 6] [--window 15] [--interval 1.0]

The server is ``specpilot serve`` as the pilot starts it (``BuiltinBackend``: SmolLM2-135M,
plain decoding, ``--threads 1``) in a process of its own; this process drives ``--streams``
closed-loop streamed greedy requests of ``--tokens`` tokens (each stream sends its next
request when the last ends) and, in the "scraped" windows, runs the pilot's scraper:
``store.series.SeriesSampler`` calling the backend's ``scrape(..., label="during")`` every
``--interval`` seconds (/metrics over one kept-alive connection, parsed, plus the process
tree's RSS), as ``PhaseRecorder`` does inside each phase. The load never stops; the time is cut
into windows of ``--window`` seconds, paired (off, on) then (on, off) alternately so that a
drift of the shared machine falls on both sides alike. Throughput = output tokens streamed in
the window / its length. The result is the mean of the pairs' relative differences
(scraped - not) / not with a 95% t interval over the pairs; the target is a cost under 2%.
The CPU is printed first (``lscpu``'s model name).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import time
from typing import Any

import httpx

from specpilot.analysis.base.stats import t_quantile
from specpilot.backends.builtin import BuiltinBackend
from specpilot.records import DURING, MetricSnapshot
from specpilot.store.series import SeriesSampler

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs"


class Tokens:
    """Output tokens as they arrive, with their arrival time (one monotonic clock)."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, int]] = []

    def between(self, t0: float, t1: float) -> int:
        return sum(n for t, n in self.arrivals if t0 <= t < t1)


async def stream_forever(
    url: str, model: str, tokens: int, got: Tokens, stop: asyncio.Event
) -> None:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    async with httpx.AsyncClient(timeout=300) as c:
        while not stop.is_set():
            done = 0
            async with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    usage = json.loads(line[6:]).get("usage") or {}
                    n = int(usage.get("completion_tokens") or 0)
                    if n > done:
                        got.arrivals.append((time.perf_counter(), n - done))
                        done = n


def scraper(be: BuiltinBackend, interval_s: float) -> tuple[SeriesSampler, list[float]]:
    took: list[float] = []

    def scrape(phase: str) -> MetricSnapshot:
        t = time.perf_counter()
        snap = be.scrape("bench", "builtin", phase, DURING)
        took.append(time.perf_counter() - t)
        return snap

    return SeriesSampler(scrape, lambda snaps: None, interval_s), took


async def measure(be: BuiltinBackend, args: argparse.Namespace) -> list[tuple[float, float]]:
    got, stop = Tokens(), asyncio.Event()
    loops = [
        asyncio.create_task(stream_forever(be.endpoint, "smollm2", args.tokens, got, stop))
        for _ in range(args.streams)
    ]
    await asyncio.sleep(args.warmup)
    pairs: list[tuple[float, float]] = []
    sampler, took = scraper(be, args.interval)
    for i in range(args.pairs):
        rates: dict[bool, float] = {}
        for scraped in (False, True) if i % 2 == 0 else (True, False):
            if scraped:
                sampler.open(f"w{i}")
            t0 = time.perf_counter()
            await asyncio.sleep(args.window)
            t1 = time.perf_counter()
            if scraped:
                sampler.close(f"w{i}", t1)
            rates[scraped] = got.between(t0, t1) / (t1 - t0)
        pairs.append((rates[False], rates[True]))
        print(
            f"pair {i + 1}: not scraped {rates[False]:.2f} tok/s, scraped {rates[True]:.2f} tok/s"
        )
    sampler.stop()
    stop.set()
    await asyncio.gather(*loops, return_exceptions=True)
    print(
        f"{sampler.taken} scrapes, {statistics.median(took) * 1e3:.1f} ms median each "
        f"(max {max(took) * 1e3:.1f} ms), every {args.interval:g} s"
    )
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--window", type=float, default=15.0, help="seconds per window")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--warmup", type=float, default=10.0)
    args = ap.parse_args()
    print(f"CPU: {cpu_model()}")
    extra = ["--threads", "1", "--served-model-name", "smollm2", "--max-slots", str(args.streams)]
    be = BuiltinBackend(no_draft=True, k=0, extra_args=extra)
    be.start(timeout_s=300)
    try:
        pairs = asyncio.run(measure(be, args))
    finally:
        be.stop()
    rel = [(on - off) / off for off, on in pairs]
    mean = statistics.fmean(rel)
    half = t_quantile(0.975, len(rel) - 1) * statistics.stdev(rel) / math.sqrt(len(rel))
    off = statistics.fmean(p[0] for p in pairs)
    on = statistics.fmean(p[1] for p in pairs)
    print(
        f"throughput {off:.2f} tok/s not scraped, {on:.2f} tok/s scraped every "
        f"{args.interval:g} s: {mean:+.2%} [{mean - half:+.2%}, {mean + half:+.2%}] "
        f"(95% t interval over {len(rel)} pairs of {args.window:g} s windows)"
    )


if __name__ == "__main__":
    main()
