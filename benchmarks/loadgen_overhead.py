"""How fast can the load generator send on ONE core while staying on schedule, and how exact are
its timestamps? Side by side with GuideLLM against the same instant SSE server.

    .venv/bin/python benchmarks/loadgen_overhead.py                       # ours only
    .venv/bin/python benchmarks/loadgen_overhead.py --guidellm /tmp/guidellm-venv/bin/guidellm \
        --tokenizer /tmp/smollm2-tokenizer

The server (``specpilot.loadgen.testserver``) runs pinned to the last CPU; each generator runs
pinned to CPU 0. A rate is *sustained* when every request was sent and completed, the achieved
send rate is within 5% of the target and the p99 scheduling lag (send - scheduled) is under
5 ms. Timing error: the server stamps each chunk with ``time.perf_counter()`` (CLOCK_MONOTONIC,
shared across processes), so client-receive minus server-send is the generator's own delay in
timestamping a chunk. With ``--ttft/--itl`` the server follows a known timetable and measured
TTFT/ITL are compared with it (the same comparison is made for GuideLLM's reported numbers).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve()


def pin(cpu: int):
    return lambda: os.sched_setaffinity(0, {cpu})


def start_server(port: int, ttft: float, itl: float, cpu: int) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "specpilot.loadgen.testserver",
        "--port",
        str(port),
        "--ttft",
        str(ttft),
        "--itl",
        str(itl),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, preexec_fn=pin(cpu))
    for _ in range(100):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError("test server did not start")


def q(xs, p):
    from specpilot.loadgen import quantile

    v = quantile(xs, p)
    return None if v is None else round(v * 1e3, 3)


def child_ours(
    url: str, rate: float, duration: float, tokens: int, ttft: float, itl: float
) -> dict:
    """Runs inside the pinned child: one constant-rate run, figures as JSON."""
    from specpilot.loadgen import LoadConfig, run_schedule
    from specpilot.records import ScheduledRequest

    n = int(rate * duration)
    msgs = [{"role": "user", "content": "hello"}]
    sched = [ScheduledRequest(i, i / rate, "bench", "g", "p", msgs, tokens) for i in range(n)]
    errs: list[float] = []
    cfg = LoadConfig.build(
        url,
        progress=False,
        timeout_s=30,
        on_event=lambda rid, t, o: errs.append(t - o["t_server"]) if "t_server" in o else None,
    )
    t0 = time.perf_counter()
    res = run_schedule(sched, cfg)
    wall = time.perf_counter() - t0
    recs = res.records
    sent = [r.sent_t for r in recs if r.sent_t is not None]
    lags = [r.sent_t - r.scheduled_t for r in recs if r.sent_t is not None]
    ttfts = [r.first_content_t - r.sent_t for r in recs if r.first_content_t]
    by: dict[str, list[float]] = {}
    for c in res.chunks:
        by.setdefault(c.request_id, []).append(c.t)
    gaps = [b - a for ts in by.values() for a, b in itertools.pairwise(ts)]
    ok = res.summary.status_counts["ok"]
    return {
        "tool": "specpilot",
        "rate": rate,
        "requests": n,
        "ok": ok,
        "send_rate": round((len(sent) - 1) / (max(sent) - min(sent)), 1) if len(sent) > 1 else None,
        "lag_p50_ms": q(lags, 0.5),
        "lag_p99_ms": q(lags, 0.99),
        "lag_max_ms": q(lags, 1.0),
        "chunk_stamp_error_p50_ms": q(errs, 0.5),
        "chunk_stamp_error_p99_ms": q(errs, 0.99),
        "ttft_error_p50_ms": q([t - ttft for t in ttfts], 0.5),
        "itl_error_p50_ms": q([g - itl for g in gaps], 0.5) if gaps else None,
        "wall_s": round(wall, 2),
    }


def run_ours(url: str, rate: float, duration: float, tokens: int, ttft: float, itl: float) -> dict:
    argv = [
        sys.executable,
        str(HERE),
        "--child",
        url,
        str(rate),
        str(duration),
        str(tokens),
        str(ttft),
        str(itl),
    ]
    out = subprocess.run(
        argv, capture_output=True, text=True, preexec_fn=pin(0), timeout=duration * 4 + 60
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def sustained(r: dict) -> bool:
    return (
        r["ok"] == r["requests"]
        and r["send_rate"] is not None
        and r["send_rate"] >= 0.95 * r["rate"]
        and r["lag_p99_ms"] is not None
        and r["lag_p99_ms"] < 5.0
    )


def run_guidellm(
    exe: str,
    url: str,
    rate: float,
    duration: float,
    tokens: int,
    tokenizer: str,
    ttft: float,
    itl: float,
) -> dict:
    out = Path(tempfile.mkdtemp(prefix="guidellm-")) / "bench.json"
    argv = [
        exe, "run",
        "--backend", f"kind=openai_http,target={url},model=bench",
        "--profile", f"kind=constant,rate={rate}",
        "--constraint", f"kind=max_duration,seconds={duration}",
        "--data", f"kind=synthetic_text,prompt_tokens=8,output_tokens={tokens}",
        "--tokenizer", f"kind=hf_auto,model={tokenizer}",
        "--output", f"kind=json,path={out}",
        "--disable-console-interactive",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, capture_output=True, text=True, preexec_fn=pin(0), env=env, timeout=duration * 6 + 180
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        return {"tool": "guidellm", "rate": rate, "error": (proc.stderr or proc.stdout)[-1500:]}
    return {
        "tool": "guidellm",
        "rate": rate,
        "wall_s": round(wall, 1),
        **summarise_guidellm(json.loads(out.read_text()), ttft, itl),
    }


def summarise_guidellm(report: dict, ttft: float, itl: float) -> dict:
    """Pull request counts, start delays and TTFT/ITL out of GuideLLM's JSON report."""
    bench = report["benchmarks"][0]
    reqs = bench.get("requests", {})
    ok = reqs.get("successful", []) or []
    bad = (reqs.get("errored", []) or []) + (reqs.get("incomplete", []) or [])
    delays, starts, ttfts, itls = [], [], [], []
    for r in ok:
        info = r.get("info") or r.get("scheduler_info") or {}
        timings = info.get("timings") or r.get("timings") or {}
        target = timings.get("targeted_start")
        sent = timings.get("request_start")
        if target is not None and sent is not None:
            delays.append(sent - target)
            starts.append(sent)
        if r.get("time_to_first_token_ms") is not None:
            ttfts.append(r["time_to_first_token_ms"] / 1e3)
        if r.get("inter_token_latency_ms") is not None:
            itls.append(r["inter_token_latency_ms"] / 1e3)
    starts.sort()
    return {
        "ok": len(ok),
        "failed": len(bad),
        "send_rate": round((len(starts) - 1) / (starts[-1] - starts[0]), 1)
        if len(starts) > 1
        else None,
        "lag_p50_ms": q(delays, 0.5),
        "lag_p99_ms": q(delays, 0.99),
        "lag_max_ms": q(delays, 1.0),
        "ttft_error_p50_ms": q([t - ttft for t in ttfts], 0.5),
        "itl_error_p50_ms": q([t - itl for t in itls], 0.5),
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, rate, dur, tok, ttft, itl = sys.argv[2], *map(float, sys.argv[3:8])
        print(json.dumps(child_ours(url, rate, dur, int(tok), ttft, itl)))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rates", default="100,200,400,600,800,1000,1200,1500,2000")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--ttft", type=float, default=0.0)
    ap.add_argument("--itl", type=float, default=0.0)
    ap.add_argument(
        "--guidellm", default=None, help="path to the guidellm executable (its own venv)"
    )
    ap.add_argument("--guidellm-rates", default=None, help="rates for GuideLLM (default: --rates)")
    ap.add_argument("--tokenizer", default=None, help="local tokenizer dir for GuideLLM")
    ap.add_argument("--port", type=int, default=18777)
    ap.add_argument("--out", default=None, help="write all results as JSON here")
    a = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server = start_server(a.port, a.ttft, a.itl, cpus[-1])
    url = f"http://127.0.0.1:{a.port}"
    results = []
    try:
        for tool in ["specpilot"] + (["guidellm"] if a.guidellm else []):
            rates = a.guidellm_rates if tool == "guidellm" and a.guidellm_rates else a.rates
            best = None
            for rate in [float(x) for x in rates.split(",")]:
                if tool == "specpilot":
                    r = run_ours(url, rate, a.duration, a.tokens, a.ttft, a.itl)
                else:
                    r = run_guidellm(
                        a.guidellm, url, rate, a.duration, a.tokens, a.tokenizer, a.ttft, a.itl
                    )
                    r.setdefault("requests", int(rate * a.duration))
                    if "error" not in r:
                        r["ok_all"] = r["failed"] == 0
                        r["ok"] = (
                            r["requests"]
                            if r["failed"] == 0 and r["ok"] >= 0.95 * r["requests"]
                            else r["ok"]
                        )
                r["sustained"] = "error" not in r and sustained(r)
                results.append(r)
                print(json.dumps(r), flush=True)
                if r["sustained"]:
                    best = rate
                elif best is not None:
                    break
            print(f"== {tool}: highest sustained rate on one core: {best} req/s", flush=True)
    finally:
        server.terminate()
        server.wait(5)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
