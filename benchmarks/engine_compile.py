"""Does ``torch.compile`` (inductor, offline) pay for the engine's target step on this CPU?

Loads the default target in one weight format, times its cached forward of 1 and 4 new tokens
(batch 1, 200 cached) eagerly, then compiled (``dynamic=True``: one graph for every attention
length), and prints step times and what each compile cost. Inductor needs a C++ compiler; the
compiled kernels are cached on disk (``/tmp/torchinductor_$USER``), so a second run compiles
faster than the first: run it twice to see both.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/engine_compile.py --dtype q4-bf16 --threads 1

The engine does not compile (docs in the README, "Engine speed"): a compile costs tens of seconds
per step shape on 2 cores, paid at every engine start, and a pilot starts an engine per arm.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time

import torch

from specpilot.engine.formats import apply_format, parse_format
from specpilot.engine.loader import default_target_path, load_model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="q4-bf16", help="a weight format (engine.formats)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(default_target_path(), dtype=torch.float32, tokenizer=False).model
    apply_format(model, parse_format(args.dtype))
    model.setup_cache(1024, 1)
    # the forward without its inference_mode wrapper: compiled graphs cannot take inference
    # tensors, so both variants run under no_grad
    forward = functools.partial(type(model).forward.__wrapped__, model)  # type: ignore[attr-defined]

    def step_ms(fn: object, t: int, s: int = 256) -> float:
        ids = torch.arange(500, 500 + t)[None]
        pos = torch.arange(200, 200 + t)[None]
        slots = torch.zeros(1, dtype=torch.long)
        times = []
        with torch.no_grad():
            fn(ids, pos, slots, None, s)  # type: ignore[operator]
            for _ in range(args.reps):
                t0 = time.perf_counter()
                fn(ids, pos, slots, None, s)  # type: ignore[operator]
                times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    eager = {t: step_ms(forward, t) for t in (1, 4)}
    compiled = torch.compile(forward, dynamic=True)
    rows = []
    for t in (1, 4):
        t0 = time.perf_counter()
        try:
            ms = step_ms(compiled, t)
        except Exception as e:  # no compiler, an unsupported op: say so, do not hide it
            print(f"torch.compile failed at {t} tokens: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        rows.append((t, eager[t], ms, time.perf_counter() - t0 - args.reps * ms / 1e3))
    print(f"{args.dtype}, {torch.get_num_threads()} threads, batch 1, 200 cached tokens")
    print(f"{'tokens':>6} {'eager ms':>9} {'compiled ms':>12} {'ratio':>6} {'compile s':>10}")
    for t, e, c, comp in rows:
        print(f"{t:>6} {e:>9.2f} {c:>12.2f} {c / e:>6.2f} {comp:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
