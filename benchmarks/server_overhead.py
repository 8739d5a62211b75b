"""HTTP overhead of ``specpilot serve`` versus the in-process engine, and streamed chunk cadence.

    .venv/bin/python benchmarks/server_overhead.py --dtype bfloat16 --threads 1 --repeats 3

1. Overhead (plain decoding, so only the serving path differs): the same greedy 128-token
   outputs, (a) batch 1: ``Engine.generate`` vs one client against the server (non-streamed
   and streamed); (b) 4 concurrent: ``Engine.generate_batch`` of 4 vs 4 concurrent streaming
   clients. Per-token time = wall time / output tokens (prefill included on both sides). The
   two sides alternate, ``--repeats`` times, and medians are reported, because the machine may
   be shared.
2. Cadence with speculation: streamed 128-token outputs with k draft tokens per round (set on
   the server through the admin switch), with the default truncated draft and, to show what
   bursts look like when drafts are accepted, with the target as its own draft. Tokens per
   chunk come from ``stream_options.continuous_usage_stats``; gaps from one monotonic clock.

The server runs as a real subprocess (``python -m specpilot.cli serve``) on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx
import torch

from specpilot.engine.runtime import DEFAULT_DRAFT, build_engine, chat_prompt_ids
from specpilot.engine.sampling import SamplingParams

PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Describe the water cycle in three paragraphs.",
    "Write a Python class Stack with push, pop and peek methods.",
    "请写一份关于公司年会安排的通知。",
]
TOKEN = "bench-token"
MODEL = "smollm2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, draft: str, args: argparse.Namespace) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "specpilot.cli", "serve", "--port", str(self.port)]
        cmd += ["--served-model-name", MODEL, "--admin-token", TOKEN, "--dtype", args.dtype]
        cmd += ["--max-slots", "4", "--max-seq-len", "1024", "-k", "0", "--draft", draft]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(self.log.read().decode(errors="replace"))
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not start")

    def set_k(self, k: int) -> float:
        t0 = time.perf_counter()
        r = httpx.put(
            self.url + "/admin/strategy",
            json={"scope": "default", "k": k},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        r.raise_for_status()
        return time.perf_counter() - t0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def body(prompt: str, n: int, stream: bool) -> dict[str, Any]:
    b: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": n,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        b["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return b


async def stream_one(c: httpx.AsyncClient, url: str, b: dict[str, Any]) -> dict[str, Any]:
    """-> {'wall', 'chunks': [(t, tokens_in_chunk)], 'tokens'} (content chunks only)."""
    t0 = time.perf_counter()
    chunks: list[tuple[float, int]] = []
    seen = 0
    async with c.stream("POST", url + "/v1/chat/completions", json=b) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            d = json.loads(line[6:])
            u = d.get("usage") or {}
            n = u.get("completion_tokens", seen)
            if d.get("choices") and d["choices"][0].get("delta", {}).get("content"):
                chunks.append((time.perf_counter(), n - seen))
            seen = n
    return {"wall": time.perf_counter() - t0, "chunks": chunks, "tokens": seen}


async def clients(url: str, bodies: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    async with httpx.AsyncClient(timeout=600) as c:
        t0 = time.perf_counter()
        res = await asyncio.gather(*(stream_one(c, url, b) for b in bodies))
        return time.perf_counter() - t0, list(res)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-k", type=int, default=4, help="draft tokens per round for the cadence part")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    n = args.tokens
    engine, _ = build_engine(
        None, None, dtype=args.dtype, max_slots=4, max_seq_len=1024, threads=args.threads
    )
    tok = engine.tokenizer
    ids = [chat_prompt_ids(tok, p) for p in PROMPTS]
    sp = SamplingParams(max_tokens=n, ignore_eos=True)
    engine.generate(ids[0], SamplingParams(max_tokens=8, ignore_eos=True))  # warm-up
    out: dict[str, Any] = {
        "dtype": args.dtype,
        "threads": args.threads,
        "tokens": n,
        "repeats": args.repeats,
    }
    server = Server(DEFAULT_DRAFT, args)
    try:
        asyncio.run(clients(server.url, [body(PROMPTS[0], 8, True)]))  # warm-up
        rows: dict[str, list[float]] = {k: [] for k in ("eng1", "srv1", "srv1s", "eng4", "srv4")}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            engine.generate(ids[0], sp)
            rows["eng1"].append((time.perf_counter() - t0) / n)
            t0 = time.perf_counter()
            r = httpx.post(
                server.url + "/v1/chat/completions", json=body(PROMPTS[0], n, False), timeout=600
            )
            assert r.json()["usage"]["completion_tokens"] == n
            rows["srv1"].append((time.perf_counter() - t0) / n)
            wall, res = asyncio.run(clients(server.url, [body(PROMPTS[0], n, True)]))
            assert res[0]["tokens"] == n
            rows["srv1s"].append(wall / n)
            t0 = time.perf_counter()
            engine.generate_batch(ids, [sp] * 4, [0] * 4)
            rows["eng4"].append((time.perf_counter() - t0) / (4 * n))
            wall, res = asyncio.run(clients(server.url, [body(p, n, True) for p in PROMPTS]))
            assert all(x["tokens"] == n for x in res)
            rows["srv4"].append(wall / (4 * n))
        med = {k: statistics.median(v) for k, v in rows.items()}
        out["overhead"] = {
            "batch1_engine_ms_per_token": 1000 * med["eng1"],
            "batch1_server_ms_per_token": 1000 * med["srv1"],
            "batch1_server_stream_ms_per_token": 1000 * med["srv1s"],
            "batch1_overhead_pct": 100 * (med["srv1"] / med["eng1"] - 1),
            "batch1_stream_overhead_pct": 100 * (med["srv1s"] / med["eng1"] - 1),
            "conc4_engine_ms_per_token": 1000 * med["eng4"],
            "conc4_server_ms_per_token": 1000 * med["srv4"],
            "conc4_overhead_pct": 100 * (med["srv4"] / med["eng4"] - 1),
            "raw_ms_per_token": {k: [round(1000 * x, 3) for x in v] for k, v in rows.items()},
        }
        print(json.dumps(out["overhead"], indent=1), flush=True)
        out["switch_s"] = server.set_k(args.k)
        out["cadence_default_draft"] = cadence(server, n)
        server.set_k(0)
    finally:
        server.stop()
    del engine
    layers = ",".join(str(i) for i in range(30))
    self_draft = Server(f"truncate:{layers}", args)  # the target as its own draft: all accepted
    try:
        self_draft.set_k(args.k)
        out["cadence_self_draft"] = cadence(self_draft, n)
    finally:
        self_draft.stop()
    print(json.dumps({k: v for k, v in out.items() if k != "overhead"}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def cadence(server: Server, n: int) -> dict[str, Any]:
    wall, res = asyncio.run(clients(server.url, [body(PROMPTS[1], n, True)]))
    ch = res[0]["chunks"]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(ch)]
    per_chunk = [c[1] for c in ch]
    m = httpx.get(server.url + "/metrics").text
    return {
        "tokens": res[0]["tokens"],
        "content_chunks": len(ch),
        "tokens_per_chunk_mean": sum(per_chunk) / len(per_chunk),
        "tokens_per_chunk_max": max(per_chunk),
        "tokens_per_chunk_hist": {str(k): per_chunk.count(k) for k in sorted(set(per_chunk))},
        "chunk_gap_ms_p50": 1000 * pct(gaps, 0.5),
        "chunk_gap_ms_p90": 1000 * pct(gaps, 0.9),
        "itl_ms_per_token": 1000 * sum(gaps) / max(1, sum(per_chunk[1:])),
        "wall_s": wall,
        "accepted_tokens_total": _metric(m, "vllm:spec_decode_num_accepted_tokens_total"),
        "draft_tokens_total": _metric(m, "vllm:spec_decode_num_draft_tokens_total"),
    }


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


if __name__ == "__main__":
    torch.set_num_threads(1)
    raise SystemExit(main())
