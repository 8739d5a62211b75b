"""The request body guard's cost per MB on adversarial bodies, from 1 KiB to the body limit,
and what the parser would cost without its value limit.

    .venv/bin/python benchmarks/body_guard.py [--repeats 5]

1. ``serve.body.check_body`` (encoding, then the scan where the counts do not rule it out) on
   bodies made to defeat a byte scan: an unterminated string of escaped quotes (the probe's: the
   regex guard before it was quadratic there, 2.1 s at 16 KB), a run of backslashes, quotes
   alternating with letters, brackets 4 Mi deep outside strings and the same inside one string,
   escape-bracket mixtures, the escapes in UTF-16 (decoded first). The figure is the best of
   ``--repeats`` in ms per MiB: flat from 1 KiB to 4 MiB means linear; small bodies pay numpy's
   fixed cost (tens of microseconds), which is why bodies up to ``INLINE_BYTES`` are checked on
   the event loop and larger ones in a thread.
2. ``json.loads`` (what FastAPI runs, on the event loop, holding the interpreter) on bodies of
   as many values as fit in 4 MiB, against the same at ``MAX_JSON_VALUES``: the reason for the
   value limit.

The machine is printed first (``/proc/cpuinfo`` model name and the SIMD flags).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from specpilot.cpuinfo import this_cpu
from specpilot.serve.body import INLINE_BYTES, MAX_JSON_DEPTH, MAX_JSON_VALUES, check_body

SIZES = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20]


def _fill(unit: bytes, size: int, head: bytes = b"") -> bytes:
    return (head + unit * (size // len(unit) + 1))[:size]


# 200 brackets first, so the counts cannot rule the scan out: every body here is scanned
_SCANNED = b"[" * 200
ADVERSARIAL: dict[str, Callable[[int], bytes]] = {
    "unterminated escapes": lambda n: _fill(b'\\"', n, _SCANNED + b'"'),
    "backslash run": lambda n: _fill(b"\\", n, _SCANNED),
    "alternating quotes": lambda n: _fill(b'"a', n, _SCANNED),
    "deep brackets": lambda n: _fill(b"[", n),
    "brackets in a string": lambda n: _fill(b"[{", n, _SCANNED + b'"'),
    "escape-bracket mix": lambda n: _fill(b'["\\\\\\"[{,', n),
    "utf-16 escapes": lambda n: _fill('\\"'.encode("utf-16-le"), n, "[".encode("utf-16-le") * 200),
}


def best_ms(f: Callable[[], object], repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return 1000 * min(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cpu = this_cpu()
    simd = [f for f in cpu.flags if f.startswith(("avx", "amx"))]
    print(f"CPU: {cpu.model}; flags {' '.join(simd)}")
    print(f"inline up to {INLINE_BYTES >> 10} KiB; limits depth {MAX_JSON_DEPTH}, values "
          f"{MAX_JSON_VALUES}")  # fmt: skip
    print(f"\n1. check_body, ms per MiB (best of {args.repeats})")
    print(f"{'body':24s}" + "".join(f"{s >> 10:>10d}K" for s in SIZES) + "   ms at 4 MiB")
    for name, make in ADVERSARIAL.items():
        row, last = [], 0.0
        for size in SIZES:
            body = make(size)
            last = best_ms(
                lambda b=body: check_body(b, MAX_JSON_DEPTH, MAX_JSON_VALUES), args.repeats
            )
            row.append(last / (size / (1 << 20)))
        print(f"{name:24s}" + "".join(f"{v:11.1f}" for v in row) + f"   {last:8.1f}")
    print("\n2. json.loads on the event loop, ms")
    for name, unit in [("empty arrays", b"[],"), ("integers", b"1,"), ("objects", b'{"a":1},')]:
        full = b"[" + _fill(unit, (4 << 20) - 8).rsplit(b",", 1)[0] + b"]"
        capped = b"[" + unit * (MAX_JSON_VALUES // (2 if unit.startswith(b"{") else 1) - 2)
        capped = capped.rstrip(b",") + b"]"
        loads_full = best_ms(lambda b=full: json.loads(b), args.repeats)
        loads_capped = best_ms(lambda b=capped: json.loads(b), args.repeats)
        verdict = check_body(full, MAX_JSON_DEPTH, MAX_JSON_VALUES).code
        print(
            f"  {name:13s} 4 MiB: {loads_full:7.1f} ms (guard: {verdict});  at the limit "
            f"({len(capped) >> 10} KiB): {loads_capped:5.1f} ms"
        )


if __name__ == "__main__":
    main()
