"""How the pilot file scales: write a synthetic pilot, then read what analysis needs.

At ``--scale 1``: 3 arms x 3 phases, 1M requests, 10M rounds (10 per request), 50M chunks (50
per request), 1M prefills. Writes go through ``Store.add_columns`` (numpy arrays, the store's
writer thread, one transaction per batch); the analysis inputs are read with
``read_pilot(columns=True)`` (requests and per-request round aggregates as numpy columns, as
``analysis.analyze`` takes them at scale; chunks and rounds as their SQL aggregates; the rest
typed); ``--records`` also times the all-records read. Goals (issue 9): >= 1M rounds/s
written, the analysis inputs of the whole pilot read in < 20 s; the file size is reported.

    .venv/bin/python benchmarks/store_scale.py --scale 1 --json store_scale.json
    .venv/bin/python benchmarks/store_scale.py --scale 0.05          # a quick check

Times exclude generating the synthetic arrays; ``*_cpu_s`` / ``*_per_cpu_s`` count the
process's CPU time (all threads), which a busy machine inflates less than wall time. Each request's output text is ``--text-chars``
characters (the quality pass recomputes checks from it) and its ``spec`` a summary of the
size the builtin server sends.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specpilot.records import ArmRecord, PilotRecord, StrategySpec
from specpilot.store import Store, read_pilot

ARMS = (("baseline", 0), ("speculative", 3), ("alternative", 0))
PHASES = ("off_peak", "peak", "burst")
GROUPS = np.array(["code", "structured", "longform", "zh_business"], dtype=object)
ROUNDS_PER_REQUEST = 10
CHUNKS_PER_REQUEST = 50
SPEC = json.dumps({
    "engine": "builtin", "source": "metrics.speculative_decoding", "rounds": 10,
    "proposed": 30, "accepted": -1, "committed": 24, "acceptance_rate": 0.4667,
    "mean_acceptance_length": 2.4, "acceptance_histogram": [3, 2, 3, 2],
    "raw": {"speculative_decoding": {"num_spec_steps": 10, "num_draft_tokens": 30}},
})  # fmt: skip
ONE, TWO = SPEC.split("-1")  # every request's summary is its own string, as in a real run


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        return next(
            line.split(":", 1)[1].strip() for line in out.splitlines() if "Model name" in line
        )
    except (OSError, StopIteration, subprocess.SubprocessError):
        return platform.processor()


def request_columns(arm: str, phase: str, lo: int, n: int, text: str) -> dict[str, object]:
    i = np.arange(lo, lo + n)
    rid = np.array([f"{phase}-{k:07d}" for k in i], dtype=object)
    sched = i * 0.01
    return {
        "run_id": f"run-{arm}", "arm": arm, "phase": phase, "task_group": GROUPS[i % 4],
        "request_id": rid, "scheduled_t": sched, "status": "ok", "sent_t": sched + 0.001,
        "first_content_t": sched + 0.2, "done_t": sched + 1.5, "http_status": 200,
        "prompt_tokens": np.full(n, 120), "output_tokens": np.full(n, 51),
        "chunks": np.full(n, CHUNKS_PER_REQUEST), "finish_reason": "length",
        "deadline_s": 20.0, "ttft_slo_s": 2.0, "client_stages": "{}", "warmup": False,
        "cold_start": False, "prompt_id": rid, "served_k": 3,
        "spec": np.array([f"{ONE}{k % 31}{TWO}" for k in i], dtype=object),
        "server_request_id": rid, "output_text": text,
    }  # fmt: skip


def round_columns(arm: str, phase: str, rid: np.ndarray, k: int, rng: np.random.Generator) -> dict:
    n = len(rid) * ROUNDS_PER_REQUEST
    accepted = rng.integers(0, k + 1, n) if k else np.zeros(n, dtype=np.int64)
    return {
        "run_id": f"run-{arm}", "arm": arm, "phase": phase,
        "request_id": np.repeat(rid, ROUNDS_PER_REQUEST),
        "round_index": np.tile(np.arange(ROUNDS_PER_REQUEST), len(rid)),
        "proposed": np.full(n, k), "accepted": accepted, "committed": accepted + 1,
        "draft_s": np.full(n, 0.002 * k), "verify_s": 0.018 + 0.001 * rng.random(n),
        "overhead_s": np.full(n, 0.001), "batch_size": rng.integers(1, 5, n),
        "t_start": rng.random(n) * 1e4,
    }  # fmt: skip


def chunk_columns(arm: str, rid: np.ndarray, rng: np.random.Generator) -> dict:
    n = len(rid) * CHUNKS_PER_REQUEST
    index = np.tile(np.arange(CHUNKS_PER_REQUEST), len(rid))
    gaps = 0.015 + 0.01 * rng.random(n)
    gaps[index == 0] = 0.0
    t = np.cumsum(gaps)
    return {
        "run_id": f"run-{arm}", "arm": arm, "request_id": np.repeat(rid, CHUNKS_PER_REQUEST),
        "t": t, "index": index, "tokens_in_chunk": rng.integers(1, 4, n),
    }  # fmt: skip


def prefill_columns(arm: str, phase: str, rid: np.ndarray) -> dict:
    n = len(rid)
    return {
        "run_id": f"run-{arm}", "arm": arm, "phase": phase, "request_id": rid,
        "prompt_tokens": np.full(n, 120), "target_s": np.full(n, 0.05),
        "draft_s": np.full(n, 0.01), "batch_size": np.ones(n, dtype=np.int64), "t_start": 0.0,
    }  # fmt: skip


def write(path: Path, scale: float, batch: int, text_chars: int) -> dict[str, float]:
    per_cell = round(1_000_000 * scale / (len(ARMS) * len(PHASES)))
    rng = np.random.default_rng(0)
    text = ("The quick brown fox jumps over the lazy dog. " * 100)[:text_chars]
    spent = {"requests": 0.0, "rounds": 0.0, "chunks": 0.0, "prefills": 0.0}
    cpu = dict.fromkeys(spent, 0.0)
    rows = dict.fromkeys(spent, 0)
    with Store(path) as st:
        st.add_pilot(PilotRecord("p", "scale", {"scale": scale}, "", "bench", time.time()))
        for n, (arm, k) in enumerate(ARMS):
            kind = "draft" if k else "none"
            st.add_arm(ArmRecord("p", f"run-{arm}", arm, arm, "builtin",
                                 strategy=StrategySpec(kind, k), run_order=n))  # fmt: skip
            for phase in PHASES:
                for lo in range(0, per_cell, batch):
                    m = min(batch, per_cell - lo)
                    req = request_columns(arm, phase, lo, m, text)
                    rid = req["request_id"]
                    assert isinstance(rid, np.ndarray)
                    tables = {
                        "requests": req,
                        "rounds": round_columns(arm, phase, rid, k, rng),
                        "chunks": chunk_columns(arm, rid, rng),
                        "prefills": prefill_columns(arm, phase, rid),
                    }
                    for table, cols in tables.items():
                        t0, c0 = time.perf_counter(), time.process_time()
                        rows[table] += st.add_columns(table, cols)
                        spent[table] += time.perf_counter() - t0
                        cpu[table] += time.process_time() - c0
        t0 = time.perf_counter()
    close_s = time.perf_counter() - t0  # the final checkpoint
    out: dict[str, float] = {f"{t}_rows": float(rows[t]) for t in rows}
    out.update({f"{t}_per_s": rows[t] / spent[t] for t in rows if spent[t]})
    out.update({f"{t}_per_cpu_s": rows[t] / cpu[t] for t in rows if cpu[t]})
    out["write_s"] = sum(spent.values())
    out["write_cpu_s"] = sum(cpu.values())
    out["checkpoint_s"] = close_s
    return out


def read(path: Path, records: bool) -> dict[str, float]:
    """The analysis inputs: ``read_pilot(columns=True)`` (requests and round aggregates as
    numpy columns, everything else typed); with ``records`` also the all-records read."""
    out: dict[str, float] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    data = read_pilot(path, columns=True)
    out["read_pilot_columns_s"] = time.perf_counter() - t0
    out["read_pilot_columns_cpu_s"] = time.process_time() - c0
    assert data.request_columns is not None and data.request_rounds_columns is not None
    out["requests_read"] = float(len(data.request_columns["request_id"]))
    out["request_rounds_read"] = float(len(data.request_rounds_columns["rounds"]))
    out["chunk_gaps_values"] = float(sum(len(g.gap_s) for g in data.chunk_gaps))
    out["verify_cost_points"] = float(len(data.verify_costs))
    if records:
        t0, c0 = time.perf_counter(), time.process_time()
        full = read_pilot(path)
        out["read_pilot_records_s"] = time.perf_counter() - t0
        out["read_pilot_records_cpu_s"] = time.process_time() - c0
        assert len(full.requests) == out["requests_read"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="1 = 1M requests, 10M rounds")
    ap.add_argument("--batch", type=int, default=50_000, help="requests per bulk insert")
    ap.add_argument("--text-chars", type=int, default=200, help="output text per request")
    ap.add_argument("--out", default=None, help="pilot file (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write the figures here too")
    ap.add_argument(
        "--records", action="store_true", help="also time read_pilot() as records (slower)"
    )
    a = ap.parse_args(argv)
    tmp = None
    if a.out is None:
        tmp = tempfile.mkdtemp(prefix="store-scale-")
        path = Path(tmp) / "pilot.duckdb"
    else:
        path = Path(a.out)
        if path.exists():
            path.unlink()
    figures: dict[str, object] = {
        "cpu": cpu_model(), "cores": os.cpu_count(), "scale": a.scale, "python": sys.version[:6],
    }  # fmt: skip
    figures.update(write(path, a.scale, a.batch, a.text_chars))
    figures["file_bytes"] = path.stat().st_size
    figures.update(read(path, a.records))
    text = json.dumps(figures, indent=1, default=float)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    if tmp is not None:
        for f in Path(tmp).iterdir():
            f.unlink()
        os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
