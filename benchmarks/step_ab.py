"""Two A/B measurements of the target step, each interleaved in one process (this machine's
neighbours move absolute figures by 10-40% between runs; an A/B in one process does not).

1. bf16 weights prepacked for oneDNN (``engine.formats.PackedLinear``, what ``bf16`` runs
   where the CPU has native bf16) against plain ``nn.Linear`` bf16 weights: batch 1 and 4,
   1 and 4 new tokens, and a 128-token prefill.
2. A one-token, one-row decode step without an attention mask (the engine's eager path) against
   the same step with the mask built (``attn_len`` given), in ``--dtype`` (default q4-bf16).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/step_ab.py --threads 1
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable

import torch

import specpilot.engine.formats as formats
from specpilot.engine.calibrate import StepTimer
from specpilot.engine.loader import default_target_path, load_model
from specpilot.engine.model import Transformer

POINTS = [(1, 1), (1, 4), (4, 1), (4, 4)]


def interleaved(runs: dict[str, Callable[[], float]], reps: int) -> dict[str, float]:
    """Median seconds of each callable, called in turn ``reps`` times."""
    for fn in runs.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(reps):
        for name, fn in runs.items():
            times[name].append(fn())
    return {k: statistics.median(v) for k, v in times.items()}


def bf16_models(ref: Transformer) -> dict[str, Transformer]:
    """bf16 as ``apply_format`` builds it here (packed), and as it was before packing: the same
    weights cast to bf16 in their ``nn.Linear`` modules."""
    packed = formats.apply_format(copy.deepcopy(ref), formats.parse_format("bf16"))
    return {"packed": packed, "nn.Linear": copy.deepcopy(ref).to(torch.bfloat16)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="q4-bf16", help="format of the mask A/B")
    ap.add_argument("--reps", type=int, default=21)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ref = load_model(default_target_path(), dtype=torch.float32, tokenizer=False).model
    print(f"{torch.get_num_threads()} threads, 200 cached tokens, medians of {args.reps}")

    if not formats.bf16_packing_available():
        print("bf16 packing: not available on this CPU (no native bf16 in oneDNN)")
    else:
        timers = {name: StepTimer(m, 4, 8, 200) for name, m in bf16_models(ref).items()}
        runs: dict[str, Callable[[], float]] = {}
        for name, t in timers.items():
            for b, n in POINTS:
                runs[f"{name} b{b}n{n}"] = lambda t=t, b=b, n=n: t.once(b, n)  # type: ignore[misc]
            runs[f"{name} prefill128"] = lambda t=t: t.once(1, 128, start=0)  # type: ignore[misc]
        res = interleaved(runs, args.reps)
        for name in timers:
            row = {
                k.split(" ", 1)[1]: round(v * 1e3, 1) for k, v in res.items() if k.startswith(name)
            }
            print(f"bf16 {name:>9} ms: {row}")
        del timers

    model = formats.apply_format(copy.deepcopy(ref), formats.parse_format(args.dtype))
    model.setup_cache(1024, 1)
    ids, pos, slots = torch.tensor([[500]]), torch.tensor([[200]]), torch.zeros(1, dtype=torch.long)

    def step(attn_len: int | None) -> Callable[[], float]:
        def run() -> float:
            t0 = time.perf_counter()
            model(ids, pos, slots, None, attn_len)
            return time.perf_counter() - t0

        return run

    res = interleaved({"no mask": step(None), "mask": step(201)}, args.reps * 3)
    print(
        f"{args.dtype} one token, one row: "
        + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in res.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
