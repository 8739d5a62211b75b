"""How long the serving simulator takes for 1M requests on one core (issue 23's goal: < 30 s).

Poisson arrivals at 80% of one replica's capacity, outputs of 16-256 tokens, speculative rounds
drawn from a k = 3 histogram, 8 slots, a linear step cost in the batch size, every client giving
up after ``--deadline`` seconds (the abort path: 0 turns it off); 1 replica, then 4 behind the
least-loaded router. Prints seconds for drawing the rounds and for the event loop.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/simulate_scale.py --requests 1000000
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from specpilot.simulate import rounds_needed, simulate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--deadline", type=float, default=30.0, help="client give-up (s); 0: none")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.requests
    out = rng.integers(16, 257, n)
    values, probs = np.arange(1, 5, dtype=float), np.array([0.3, 0.25, 0.2, 0.25])
    t0 = time.perf_counter()
    steps = rounds_needed(out - 1, values, probs, rng)
    t_draw = time.perf_counter() - t0

    def step(b: int) -> float:
        return 0.02 + 0.004 * b

    def prefill(p: int) -> float:
        return 0.0005 * p

    per_request = float(steps.mean()) * step(8) / 8 + prefill(100)
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    names = [ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")]
    cpu = names[0] if names else platform.machine()
    print(f"{n} requests, rounds drawn in {t_draw:.1f} s ({cpu})")
    for r in args.replicas:
        lam = 0.8 * r / per_request
        arrival = np.cumsum(rng.exponential(1 / lam, n))
        t0 = time.perf_counter()
        abort = np.full(n, args.deadline) if args.deadline > 0 else None
        res = simulate(arrival, np.full(n, 100), steps, step_s=step, prefill_s=prefill, slots=8,
                       replicas=r, router="least_loaded", abort_s=abort)  # fmt: skip
        dt = time.perf_counter() - t0
        print(
            f"  {r} replica(s) at {lam:.1f} req/s: {dt:.1f} s for the event loop; "
            f"p50 E2E {np.median(res.e2e[res.ok]):.2f} s, p99 {np.quantile(res.e2e[res.ok], 0.99):.2f} s, "
            f"{(~res.ok).sum()} gave up"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
