"""Where a decode step's time goes: torch.profiler (ATen ops) and cProfile (Python) on the engine.

Default target + shipped draft, batch 1, greedy, one prompt, ``--max-tokens`` new tokens in the
given weight format and k; prints the top ATen ops by self time (with call counts, so per-layer
repeats show) and the top Python functions by own time.

    .venv/bin/python benchmarks/engine_profile.py --dtype bf16 -k 0 --threads 2
    .venv/bin/python benchmarks/engine_profile.py --dtype q4-bf16 -k 3 --rows 15
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from specpilot.engine.runtime import DEFAULT_DRAFT, build_engine, chat_prompt_ids
from specpilot.engine.sampling import SamplingParams

PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("-k", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rows", type=int, default=20)
    args = ap.parse_args()
    draft = DEFAULT_DRAFT if args.k > 0 else None
    engine, spec = build_engine(
        None, draft, dtype=args.dtype, threads=args.threads, max_seq_len=1024, k=args.k
    )
    ids = chat_prompt_ids(engine.tokenizer, PROMPT)
    sp = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    engine.generate(ids, sp, args.k)  # warm-up
    t = time.perf_counter()
    r = engine.generate(ids, sp, args.k)
    wall = time.perf_counter() - t
    print(
        f"{spec.dtype}, k={args.k}, {torch.get_num_threads()} threads: {len(r.rounds)} rounds, "
        f"{r.output_tokens} tokens in {wall:.2f} s ({wall / r.output_tokens * 1e3:.1f} ms/token)"
    )
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.generate(ids, sp, args.k)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    pr = cProfile.Profile()
    pr.enable()
    engine.generate(ids, sp, args.k)
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(args.rows)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
