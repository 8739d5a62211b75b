"""Is a candidate's spread between requests noise, or the workload's? Two or more pilots of one
config (the same seeded schedule, so the same requests in the same episodes) are read, and for
each candidate arm against the baseline, per load level, every request's log task-time ratio
(candidate over baseline, its task group's mean taken out, as the pooled cell's estimator does)
is set side by side across the pilots:

- the correlation of the per-request ratios between pilots (mean over pairs of pilots), and of
  the per-episode means;
- a two-way split (request x pilot, on the ratios) into the **workload's** standard deviation
  (a request's own lasting effect: it comes back in every pilot) and the **measurement's** (what
  changes from pilot to pilot: the machine, the queue, the process);
- the same split of the episodes' means (an episode's lasting part: what its requests and its
  arrivals fix; its changing part: the machine's moment, the processes);
- what the workload's part costs: the distinct requests a level needs before that part alone
  of the interval of the mean effect over traffic like this is +-h at the deciding level,
  however quiet the machine (n >= (z * sd_workload / h)^2, normal theory, h = 5% and 10%).

A planted arm (the baseline through a proxy that stretches every latency by one factor) has no
workload part: its correlation is about 0. A speculative arm's gain depends on how well the
draft predicts each answer, so its requests differ lastingly: more repeats of the same requests
narrow only the measurement's part, and only more distinct requests (longer levels, a larger
budget) narrow the workload's.

    .venv/bin/python benchmarks/effect_reproducibility.py runs/A/pilot.duckdb runs/B/pilot.duckdb
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np

from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.base.stats import stratify
from specpilot.analysis.comparison.pairs import pair_rows
from specpilot.analysis.episodes.celltest import task_log_ratios
from specpilot.records import level_of
from specpilot.store.store import read_pilot

sys.path.insert(0, str(Path(__file__).parent))
from engine_instances import split  # the same two-way split (rows x columns)

Key = tuple[str, str]  # (episode phase, request id)


def ratios(table: RequestTable, baseline: str, cand: str) -> dict[str, dict[Key, float]]:
    """Per load level: each paired request's log task-time ratio, its task group's mean taken
    out (``analysis.base.stats.stratify``: the level's own mean kept, which a pilot's column removes)."""
    b, c, _ = pair_rows(table, baseline, cand)
    ok, d = task_log_ratios(table, b, c)
    b = b[ok]
    level = np.array([level_of(str(p)) for p in table.phase[b]])
    out: dict[str, dict[Key, float]] = {}
    for lv in np.unique(level):
        m = level == lv
        x, _ = stratify(d[m], table.task_group[b][m])  # each group's own mean out
        keys = zip(table.phase[b][m].astype(str), table.request_id[b][m].astype(str), strict=True)
        out[str(lv)] = dict(zip(keys, x, strict=True))
    return out


def report(level: str, runs: list[dict[Key, float]], level_alpha: float) -> None:
    keys = sorted(set.intersection(*(set(r) for r in runs)))
    if len(keys) < 3:
        print(f"  {level}: {len(keys)} requests in common; the pilots do not share a schedule")
        return
    y = np.array([[r[k] for r in runs] for k in keys])  # requests x pilots
    pairs = list(itertools.combinations(range(len(runs)), 2))
    r_req = statistics.fmean(float(np.corrcoef(y[:, i], y[:, j])[0, 1]) for i, j in pairs)
    episodes = sorted({k[0] for k in keys})
    ep = np.array(
        [[y[[k[0] == e for k in keys], p].mean() for p in range(len(runs))] for e in episodes]
    )
    r_ep = statistics.fmean(float(np.corrcoef(ep[:, i], ep[:, j])[0, 1]) for i, j in pairs)
    parts = split(y)  # rows: requests (the workload's lasting part), columns: pilots
    sd_w, sd_m = parts["process_sd"], parts["residual_sd"]
    eps = split(ep)  # rows: episodes (what their requests and arrivals fix), columns: pilots
    z = NormalDist().inv_cdf(1.0 - level_alpha / 2.0)
    need = {h: int(np.ceil((z * sd_w / h) ** 2)) for h in (0.05, 0.10)}
    print(
        f"  {level}: {len(keys)} requests in {len(episodes)} episodes; correlation between pilots"
        f" per request {r_req:+.2f}, per episode {r_ep:+.2f}; sd workload {sd_w:.1%},"
        f" measurement {sd_m:.1%}; an episode's mean: sd lasting {eps['process_sd']:.1%},"
        f" changing {eps['residual_sd']:.1%}; distinct requests for a workload part of +-5%:"
        f" {need[0.05]}, +-10%: {need[0.10]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pilots", nargs="+", help="pilot.duckdb files of one config")
    ap.add_argument("--level-alpha", type=float, default=0.0125, help="two-sided (0.0125: 98.75%%)")
    args = ap.parse_args()
    if len(args.pilots) < 2:
        ap.error("give at least two pilot.duckdb files of the same config")
    tables = []
    for path in args.pilots:
        data = read_pilot(path)
        tables.append((RequestTable.build(data.requests, data.quality, data.arms), data.arms))
    base = next(a.arm for a in tables[0][1] if a.role == "baseline")
    cands = sorted({a.arm for a in tables[0][1] if a.arm != base})
    for cand in cands:
        per = [ratios(t, base, cand) for t, _ in tables]
        print(f"{cand} against {base} ({len(per)} pilots)")
        for level in sorted(set.intersection(*(set(p) for p in per))):
            report(level, [p[level] for p in per], args.level_alpha)


if __name__ == "__main__":
    main()
