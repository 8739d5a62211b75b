"""Do identical engine processes run at the same speed? N builtin engines with the same
flags, started one after the other, then the same greedy requests sent to each in turn (the
order rotating every round, so drift over time hits every engine alike): each engine's median
seconds per output token, its first and second half, and its ratio to the first engine.

A persistent spread between identical engines is a difference every compared pair of arms
carries for its whole life: the A/A control measures it (``analysis.drift``) and
``repetitions: N`` draws it again with fresh engines.

    .venv/bin/python benchmarks/engine_instances.py --engines 4 --rounds 8 --dtype q4-bf16

Run it on an otherwise idle machine: the figures are wall-clock.
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx

from specpilot.backends.builtin import BuiltinBackend

PROMPTS = [
    "Write a short paragraph about the history of bicycles.",
    "Explain what a hash map is.",
    "写一段关于苹果的介绍。",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--dtype", default="q4-bf16", help="every engine's weight format")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=48)
    a = ap.parse_args()
    flags = ["--threads", str(a.threads), "--max-slots", "4", "--dtype", a.dtype]
    engines = [
        BuiltinBackend(no_draft=True, extra_args=flags, name=f"E{i}") for i in range(a.engines)
    ]
    try:
        for e in engines:  # one at a time: each start on an otherwise idle machine
            e.start(600)
        model = httpx.get(engines[0].endpoint + "/v1/models").json()["data"][0]["id"]
        per_token: dict[str, list[float]] = {e.name: [] for e in engines}
        with httpx.Client(timeout=300) as client:
            for r in range(a.rounds):
                for e in engines[r % a.engines :] + engines[: r % a.engines]:
                    for p in PROMPTS:
                        body = {"model": model, "messages": [{"role": "user", "content": p}],
                                "max_tokens": a.max_tokens, "temperature": 0}  # fmt: skip
                        t0 = time.perf_counter()
                        out = client.post(e.endpoint + "/v1/chat/completions", json=body).json()
                        n = max(1, int(out["usage"]["completion_tokens"]))
                        per_token[e.name].append((time.perf_counter() - t0) / n)
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


if __name__ == "__main__":
    main()
