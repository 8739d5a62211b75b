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

On a machine shared with other jobs a window's throughput moves by 10-20% with their load,
more than the effect sought, so two figures that other tenants disturb less come with it:
the server's CPU seconds per output token in each window (its process tree, ``psutil``), paired
the same way; and the accounting bound: the server's CPU per scrape, measured first on the
idle server over ``--probe`` scrapes, times the scrapes per second, over the CPU seconds per
second the server spends under the load (a CPU-bound server loses at most that share).
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
import psutil

from specpilot.analysis.base.stats import t_quantile
from specpilot.backends.builtin import BuiltinBackend
from specpilot.records import DURING, MetricSnapshot
from specpilot.store.series import SeriesSampler

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs"


def tree_cpu(pid: int) -> float:
    """User + system seconds of ``pid`` and its children."""
    p = psutil.Process(pid)
    total = 0.0
    for q in (p, *p.children(recursive=True)):
        c = q.cpu_times()
        total += c.user + c.system
    return total


def cost_per_scrape(be: BuiltinBackend, n: int) -> tuple[float, float]:
    """(server CPU s, this process's CPU s) per scrape, over ``n`` scrapes of the idle server."""
    assert be.pid is not None
    for _ in range(5):
        be.scrape("bench", "builtin", "probe", DURING)
    s0, c0 = tree_cpu(be.pid), time.thread_time()
    for _ in range(n):
        be.scrape("bench", "builtin", "probe", DURING)
    return (tree_cpu(be.pid) - s0) / n, (time.thread_time() - c0) / n


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


Window = tuple[float, float]  # (output tokens per second, server CPU seconds per token)


async def measure(be: BuiltinBackend, args: argparse.Namespace) -> list[tuple[Window, Window]]:
    assert be.pid is not None
    got, stop = Tokens(), asyncio.Event()
    loops = [
        asyncio.create_task(stream_forever(be.endpoint, "smollm2", args.tokens, got, stop))
        for _ in range(args.streams)
    ]
    await asyncio.sleep(args.warmup)
    pairs: list[tuple[Window, Window]] = []
    sampler, took = scraper(be, args.interval)
    for i in range(args.pairs):
        w: dict[bool, Window] = {}
        for scraped in (False, True) if i % 2 == 0 else (True, False):
            if scraped:
                sampler.open(f"w{i}")
            t0, cpu0 = time.perf_counter(), tree_cpu(be.pid)
            await asyncio.sleep(args.window)
            t1, cpu1 = time.perf_counter(), tree_cpu(be.pid)
            if scraped:
                sampler.close(f"w{i}", t1)
            n = got.between(t0, t1)
            w[scraped] = (n / (t1 - t0), (cpu1 - cpu0) / max(n, 1))
        pairs.append((w[False], w[True]))
        off, on = w[False], w[True]
        print(
            f"pair {i + 1}: not scraped {off[0]:.2f} tok/s, {off[1] * 1e3:.1f} ms CPU/token; "
            f"scraped {on[0]:.2f} tok/s, {on[1] * 1e3:.1f} ms CPU/token"
        )
    sampler.stop()
    stop.set()
    await asyncio.gather(*loops, return_exceptions=True)
    print(
        f"{sampler.taken} scrapes, {statistics.median(took) * 1e3:.1f} ms median each "
        f"(max {max(took) * 1e3:.1f} ms), every {args.interval:g} s"
    )
    return pairs


def relative(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Mean of (on - off) / off over the pairs and its 95% t interval."""
    rel = [(on - off) / off for off, on in pairs]
    mean = statistics.fmean(rel)
    half = t_quantile(0.975, len(rel) - 1) * statistics.stdev(rel) / math.sqrt(len(rel))
    return mean, mean - half, mean + half


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--window", type=float, default=15.0, help="seconds per window")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--probe", type=int, default=200, help="scrapes of the idle server, timed")
    args = ap.parse_args()
    print(f"CPU: {cpu_model()}; load average {psutil.getloadavg()[0]:.2f} at the start")
    extra = ["--threads", "1", "--served-model-name", "smollm2", "--max-slots", str(args.streams)]
    be = BuiltinBackend(no_draft=True, k=0, extra_args=extra)
    be.start(timeout_s=300)
    try:
        server_s, client_s = cost_per_scrape(be, args.probe)
        print(
            f"one scrape costs the server {server_s * 1e3:.2f} ms CPU and this process "
            f"{client_s * 1e3:.2f} ms CPU (idle server, {args.probe} scrapes)"
        )
        pairs = asyncio.run(measure(be, args))
    finally:
        be.stop()
    tput = relative([(off[0], on[0]) for off, on in pairs])
    per_token = relative([(off[1], on[1]) for off, on in pairs])
    off_rate = statistics.fmean(off[0] for off, _ in pairs)
    busy = statistics.fmean(off[0] * off[1] for off, _ in pairs)  # server CPU s per s
    n = f"{len(pairs)} pairs of {args.window:g} s windows, 95% t interval"
    print(
        f"throughput {off_rate:.2f} tok/s not scraped; scraped every {args.interval:g} s: "
        f"{tput[0]:+.2%} [{tput[1]:+.2%}, {tput[2]:+.2%}] ({n})"
    )
    print(
        f"server CPU per output token, scraped vs not: {per_token[0]:+.2%} "
        f"[{per_token[1]:+.2%}, {per_token[2]:+.2%}] ({n})"
    )
    print(
        f"accounting: {server_s * 1e3:.2f} ms of server CPU per scrape every {args.interval:g} s "
        f"= {server_s / args.interval / busy:.3%} of the {busy:.2f} CPU-s/s the server spends "
        "under this load"
    )


if __name__ == "__main__":
    main()
