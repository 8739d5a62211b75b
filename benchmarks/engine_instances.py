"""Do identical engine processes run at the same speed? N builtin engines with the same
flags, started one after the other, then the same greedy requests sent to each in turn (the
order rotating every round, so drift over time hits every engine alike): each engine's median
seconds per output token, its first and second half, and its ratio to the first engine; then a
two-way split (engine x round, on the log of each round's median) of the spread into the
process's lasting offset, the machine's drift between rounds and the rest.

A lasting spread between identical engines is an offset every arm carries for its whole life:
the episode design (``pilot.design``) serves each arm by several processes and its estimator
(``analysis.episodes``) carries it as a random effect.

    .venv/bin/python benchmarks/engine_instances.py --engines 8 --rounds 6 --dtype bf16
    .venv/bin/python benchmarks/engine_instances.py --engines 8 --rounds 6 --dtype bf16 --thp

``--thp`` starts every engine with ``THP_MEM_ALLOC_ENABLE=1`` (torch's CPU allocator asks for
transparent huge pages on large allocations; this kernel's THP mode is ``madvise``). Run it on
an otherwise idle machine: the figures are wall-clock.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import httpx
import numpy as np

from specpilot.backends.builtin import BuiltinBackend

PROMPTS = [
    "Write a short paragraph about the history of bicycles.",
    "Explain what a hash map is.",
    "写一段关于苹果的介绍。",
]


def split(y: np.ndarray) -> dict[str, float]:
    """Two-way ANOVA without interaction (rows: engines, columns: rounds) of log values: the
    engine (process) and round (drift) standard deviations by moments, and the residual's."""
    e, r = y.shape
    grand = y.mean()
    ms_e = r * ((y.mean(axis=1) - grand) ** 2).sum() / (e - 1)
    ms_r = e * ((y.mean(axis=0) - grand) ** 2).sum() / (r - 1)
    res = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + grand
    ms_res = (res**2).sum() / ((e - 1) * (r - 1))
    return {
        "process_sd": math.sqrt(max(0.0, (ms_e - ms_res) / r)),
        "drift_sd": math.sqrt(max(0.0, (ms_r - ms_res) / e)),
        "residual_sd": math.sqrt(ms_res),
        "F_process": ms_e / ms_res,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--dtype", default="bf16", help="every engine's weight format")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--thp", action="store_true", help="THP_MEM_ALLOC_ENABLE=1 in every engine")
    a = ap.parse_args()
    if a.thp:
        os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
    flags = ["--threads", str(a.threads), "--max-slots", "4", "--dtype", a.dtype]
    engines = [
        BuiltinBackend(no_draft=True, extra_args=flags, name=f"E{i}") for i in range(a.engines)
    ]
    per_round = np.zeros((a.engines, a.rounds))
    try:
        for e in engines:  # one at a time: each start on an otherwise idle machine
            e.start(600)
        model = httpx.get(engines[0].endpoint + "/v1/models").json()["data"][0]["id"]
        per_token: dict[str, list[float]] = {e.name: [] for e in engines}
        with httpx.Client(timeout=300) as client:
            for r in range(a.rounds):
                for i in [(r + j) % a.engines for j in range(a.engines)]:
                    e, mine = engines[i], []
                    for p in PROMPTS:
                        body = {
                            "model": model,
                            "messages": [{"role": "user", "content": p}],
                            "max_tokens": a.max_tokens,
                            "temperature": 0,
                        }
                        t0 = time.perf_counter()
                        out = client.post(e.endpoint + "/v1/chat/completions", json=body).json()
                        n = max(1, int(out["usage"]["completion_tokens"]))
                        mine.append((time.perf_counter() - t0) / n)
                    per_token[e.name] += mine
                    per_round[i, r] = math.log(statistics.median(mine))
    finally:
        for e in engines:
            e.stop()
    ref = statistics.median(per_token["E0"])
    for name, v in per_token.items():
        h = len(v) // 2
        print(
            f"{name}: {statistics.median(v) * 1e3:.1f} ms/token (first half "
            f"{statistics.median(v[:h]) * 1e3:.1f}, second {statistics.median(v[h:]) * 1e3:.1f}), "
            f"{statistics.median(v) / ref:.3f}x E0"
        )
    s = split(per_round)
    print(
        f"log spread: process sd {s['process_sd']:.3f}, drift between rounds sd "
        f"{s['drift_sd']:.3f}, residual sd {s['residual_sd']:.3f} (F for the process "
        f"{s['F_process']:.2f} on {a.engines - 1} and {(a.engines - 1) * (a.rounds - 1)} df); "
        f"THP {'on' if a.thp else 'off'}, dtype {a.dtype}"
    )


if __name__ == "__main__":
    main()
