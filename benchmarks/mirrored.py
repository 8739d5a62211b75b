"""Issue 49 item 3, by hand: the mirrored episode design against the turn-taking one, on the same
pinned servers in the same wall time, as an A/A and as a planted +15%.

``2 x --replicas`` builtin servers (``specpilot serve``, one thread each, the target without a
draft: one config), started here as an operator would and pinned with ``taskset``: arm A's
replicas on core ``--core-a``, arm B's on the other core; the load generator runs unpinned. Each round
runs four pilots by ``urls:``, the designs alternating:

- A/A: ``base`` (A's replicas) against ``ctl`` (B's), the same config;
- planted: ``base`` against ``slow``, B's replicas behind a proxy that dilates every latency by
  exactly 1.15 (``loadgen.dilate``, the planted arm's own mechanism): a known +15%.

Turn-taking replays each episode on one arm, then the other: its level is ``--duration``
seconds cut into ``--episodes`` episodes. Mirrored replays each episode on both at once, so in
the same wall time its level is twice as long, cut into twice the episodes. Per design it
prints the A/A's directional cells (false positives), the planted cells found slower (power)
and the median interval width, over the rounds.

    .venv/bin/python benchmarks/mirrored.py --rounds 3 --out /tmp/mirrored

Figures go in the issue note with ``lscpu``'s model name and flags. About 2 minutes a pilot on
2 cores; the servers load the model once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from replicas_pilot import serve, wait_healthy
from specpilot.loadgen.dilate import DilatingProxy

PILOT = """\
name: mirrored-{kind}-{design}
workload:
  seed: {seed}
  groups: {{structured: {{output: {{mean: 8}}}}, code: {{output: {{mean: 8}}}}}}
  phases: [{{name: peak, duration_s: {dur}, arrival: {{kind: poisson, rate: {rate}}}}}]
arms:
  - {{name: base, role: baseline, engine: openai, urls: {base}}}
  - {{name: {cand}, role: speculative, engine: openai, urls: {other}}}
episodes: {{per_level: {episodes}, planted: null, seed: {seed}, design: {design}{share}}}
quality: {{greedy_prompts: 1, sampled_prompts: 1, samples: 2}}
compat: {{enabled: false}}
drill: {{enabled: false}}
"""


def _servers(
    cores: dict[str, int], n: int
) -> tuple[list[subprocess.Popen[bytes]], dict[str, list[str]]]:
    procs, urls = [], {"a": [], "b": []}
    for arm in ("a", "b"):
        for _ in range(n):
            proc, url = serve(draft=False, prefix=("taskset", "-c", str(cores[arm])))
            procs.append(proc)
            urls[arm].append(url)
    wait_healthy(urls["a"] + urls["b"])
    return procs, urls


def _pilot(d: Path, text: str) -> tuple[int, float, dict]:
    d.mkdir(parents=True, exist_ok=True)
    (d / "p.yaml").write_text(text)
    t0 = time.time()
    cmd = [sys.executable, "-m", "specpilot.cli", "pilot", str(d / "p.yaml")]
    rc = subprocess.run([*cmd, "--out", str(d / "out"), "--quiet"], check=False).returncode
    report = d / "out" / "report.json"
    doc = json.loads(report.read_text()) if report.exists() else {}
    return rc, time.time() - t0, doc


def _cells(doc: dict, cand: str) -> list[dict]:
    return [c for c in doc.get("comparisons") or [] if c["candidate_arm"] == cand]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=8, help="turn-taking episodes per level")
    ap.add_argument("--duration", type=float, default=40.0, help="turn-taking seconds per level")
    ap.add_argument("--rate", type=float, default=1.0, help="req/s of the level")
    ap.add_argument("--core-a", type=int, default=0)
    ap.add_argument("--replicas", type=int, default=4, help="servers (processes) an arm")
    ap.add_argument("--out", type=Path, default=Path("/tmp/mirrored"))
    args = ap.parse_args()
    cores = {"a": args.core_a, "b": 1 - args.core_a}
    procs, urls = _servers(cores, args.replicas)
    slow = [DilatingProxy(u, 0.15).start() for u in urls["b"]]
    rows: list[dict] = []
    try:
        for r in range(args.rounds):
            for kind, cand, other in (
                ("aa", "ctl", [u + "/v1" for u in urls["b"]]),
                ("planted", "slow", [p.url + "/v1" for p in slow]),
            ):
                for design in ("turns", "mirrored") if r % 2 == 0 else ("mirrored", "turns"):
                    k = 2 if design == "mirrored" else 1  # the same wall time
                    text = PILOT.format(
                        kind=kind,
                        design=design,
                        seed=101 + r,
                        dur=args.duration * k,
                        rate=args.rate,
                        base=json.dumps([u + "/v1" for u in urls["a"]]),
                        cand=cand,
                        other=json.dumps(other),
                        episodes=args.episodes * k,
                        share=", share_machine: true" if design == "mirrored" else "",
                    )
                    rc, wall, doc = _pilot(args.out / f"r{r}-{kind}-{design}", text)
                    cells = _cells(doc, cand)
                    row = {
                        "round": r,
                        "kind": kind,
                        "design": design,
                        "rc": rc,
                        "minutes": round(wall / 60, 2),
                        "cells": [
                            {
                                "group": c["task_group"],
                                "outcome": c["outcome"],
                                "estimate": c["task_rel_change"]["estimate"],
                                "low": c["task_rel_change"]["low"],
                                "high": c["task_rel_change"]["high"],
                                "df": c.get("df"),
                                "episode_noise": c.get("episode_noise"),
                                "undecided_because": c.get("undecided_because"),
                            }
                            for c in cells
                        ],
                        "notes": [n for n in doc.get("notes") or [] if "mirrored" in n],
                    }
                    rows.append(row)
                    with (args.out / "rows.jsonl").open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(
                        f"round {r} {kind:<7} {design:<8} rc {rc} {row['minutes']:.1f} min: "
                        + ", ".join(
                            f"{c['group']} {c['outcome']} {c['estimate']:+.1%} "
                            f"[{c['low']:+.1%}, {c['high']:+.1%}]"
                            for c in row["cells"]
                            if c["estimate"] is not None and c["low"] is not None
                        ),
                        flush=True,
                    )
    finally:
        for p in slow:
            p.stop()
        for p in procs:
            p.terminate()
    summarize(rows)
    return 0


def summarize(rows: list[dict]) -> None:
    """Per design: A/A directional cells, planted cells found slower, median interval width."""
    for design in ("turns", "mirrored"):
        aa = [c for r in rows if r["design"] == design and r["kind"] == "aa" for c in r["cells"]]
        pl = [
            c for r in rows if r["design"] == design and r["kind"] == "planted" for c in r["cells"]
        ]
        fp = sum(c["outcome"] in ("faster", "slower") for c in aa)
        found = sum(c["outcome"] == "slower" for c in pl)
        widths = [
            c["high"] - c["low"] for c in aa + pl if c["low"] is not None and c["high"] is not None
        ]
        mins = [r["minutes"] for r in rows if r["design"] == design]
        print(
            f"{design:<8}: A/A directional {fp} of {len(aa)} cells; planted found {found} of "
            f"{len(pl)} cells; median interval width "
            f"{statistics.median(widths) if widths else float('nan'):.1%}; "
            f"{statistics.mean(mins) if mins else 0:.1f} min a pilot"
        )


if __name__ == "__main__":
    sys.exit(main())
