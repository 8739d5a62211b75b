"""Issue 49's replica target, by hand: an operator's fleet of 3 plain and 3 speculative builtin
replicas (``specpilot serve`` in processes of their own, one thread each), piloted ``--pilots``
times by ``urls:``; per pilot, whether the planted +15% was found at every level and how many
A/A cells were directional.

    .venv/bin/python benchmarks/replicas_pilot.py --pilots 3 --out /tmp/replicas

Prints one line per pilot and the totals; the figures go in the issue note with ``lscpu``'s
model name and flags. On the AMD AVX-512 kind (2026-12-06): 16 episodes of 80 s levels found
the planted +15% at every level in 3 of 3 pilots, A/A directional 0 of 18 cells (5.5 min a
pilot); 12 episodes of 60 s found it at 5 of 6 levels (2 of 3 pilots), A/A 0 of 18. Several minutes per pilot on 2 cores (six model loads first).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

PILOT = """\
name: replicas-bench
workload:
  seed: {seed}
  groups: {{structured: {{output: {{mean: 8}}}}, code: {{output: {{mean: 8}}}}}}
  phases:
    - {{name: off_peak, duration_s: {dur}, arrival: {{kind: poisson, rate: 0.6}}}}
    - {{name: peak, duration_s: {dur}, arrival: {{kind: poisson, rate: 1.2}}}}
arms:
  - {{name: base, role: baseline, engine: builtin, urls: {base}}}
  - {{name: spec, role: speculative, engine: builtin, urls: {spec}}}
episodes: {{per_level: {episodes}, planted: 0.15, seed: {seed}}}
quality: {{greedy_prompts: 1, sampled_prompts: 1, samples: 2}}
compat: {{features: [length]}}
drill: {{enabled: false}}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fleet(n: int) -> tuple[list[subprocess.Popen[bytes]], dict[str, list[str]]]:
    procs, urls = [], {"base": [], "spec": []}
    for arm in ("base", "spec"):
        for _ in range(n):
            proc, url = serve(draft=arm == "spec")
            procs.append(proc)
            urls[arm].append(url)
    wait_healthy(urls["base"] + urls["spec"])
    return procs, urls


def serve(draft: bool, prefix: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], str]:
    """One builtin server (``specpilot serve``, one thread, the embedded target, with its draft
    or without) on a free loopback port, as an operator starts one; ``prefix`` goes before the
    command (``taskset -c 0``). Returns the process and its URL (not yet healthy)."""
    port = _port()
    cmd = [
        *prefix,
        sys.executable,
        "-m",
        "specpilot.cli",
        "serve",
        "--port",
        str(port),
        "--threads",
        "1",
        "--calibration",
        "skip",
        "--served-model-name",
        "smol",
        *([] if draft else ["--no-draft"]),
    ]
    env = {**os.environ, "SPECPILOT_ADMIN_TOKEN": f"op-{port}"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def wait_healthy(urls: list[str], within_s: float = 300.0) -> None:
    """Until every server answers ``/health`` (model loads first); exit naming one that never
    does."""
    deadline = time.time() + within_s
    for u in urls:
        while True:
            try:
                if httpx.get(u + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.time() > deadline:
                raise SystemExit(f"{u} never became healthy")
            time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--duration", type=float, default=80.0, help="seconds per level")
    ap.add_argument("--out", type=Path, default=Path("/tmp/replicas"))
    args = ap.parse_args()
    procs, urls = _fleet(args.replicas)
    found = directional = cells = 0
    try:
        for i in range(args.pilots):
            d = args.out / f"p{i}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "p.yaml").write_text(
                PILOT.format(
                    seed=11 + i,
                    dur=args.duration,
                    episodes=args.episodes,
                    base=json.dumps(urls["base"]),
                    spec=json.dumps(urls["spec"]),
                )
            )
            t0 = time.time()
            rc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "specpilot.cli",
                    "pilot",
                    str(d / "p.yaml"),
                    "--out",
                    str(d / "out"),
                    "--quiet",
                ],
                check=False,
            ).returncode
            doc = json.loads((d / "out" / "report.json").read_text())
            planted = doc.get("planted") or []
            aa = doc.get("aa_control") or {}
            ok = bool(planted) and all(p.get("found") for p in planted)
            found += ok
            directional += len(aa.get("directional") or [])
            cells += int(aa.get("cells") or 0)
            print(
                f"pilot {i}: rc {rc}, {(time.time() - t0) / 60:.1f} min, planted found at every "
                f"level: {ok} ({[round(p['estimate'] * 100, 1) for p in planted]}%), A/A "
                f"directional {len(aa.get('directional') or [])} of {aa.get('cells')}",
                flush=True,
            )
    finally:
        for p in procs:
            p.terminate()
    print(
        f"planted found at every level in {found} of {args.pilots} pilots; "
        f"A/A directional in {directional} of {cells} cells"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
