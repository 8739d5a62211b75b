"""The report from a large pilot: 1M requests, 10M rounds, 50M chunks, goal < 60 s.

    .venv/bin/python benchmarks/report_scale.py                          # 20k requests (quick)
    .venv/bin/python benchmarks/report_scale.py --requests 1000000       # the issue's scale
    .venv/bin/python benchmarks/report_scale.py --pilot PILOT.duckdb     # a real pilot file

With ``--pilot`` the file is read through the store's typed reader (``read_pilot``). Without it a
synthetic three-arm pilot (base / spec k=3 / alt, three phases, four task groups) is built the
way the store would hand it over: the raw rounds are generated *in DuckDB* and aggregated per
request *in DuckDB* (``RequestRounds``, the verify-cost points), the chunk gaps as numpy columns;
no Python loop touches a round or a chunk. The requests and round aggregates go to the analysis
as columns (``PilotData.request_columns`` / ``request_rounds_columns``, what the reader can
fetch from DuckDB at scale) or, with ``--records``, as record lists. Timed separately: building
that input (the reader's share), the analysis, rendering (HTML with plots, Markdown, JSON) and
writing the files.
Prints one JSON object with the timings and the CPU model.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from specpilot.analysis import AnalysisConfig, analyze
from specpilot.records import (
    ArmRecord,
    ChunkGaps,
    HardwareFacts,
    MetricSnapshot,
    PhaseRecord,
    PilotData,
    PilotRecord,
    RequestRecord,
    RequestRounds,
    StrategySpec,
    VerifyCostPoint,
)

ARMS = (("base", "baseline", 0), ("spec", "speculative", 3), ("alt", "alternative", 0))
PHASES = (("off_peak", 2.0), ("peak", 8.0), ("burst", 16.0))
GROUPS = ("code", "structured", "longform", "zh_business")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


ROUNDS_SQL = """
CREATE TABLE reqs AS
SELECT i AS req, i % {per_arm} AS slot, i // {per_arm} AS arm_ix,
       CAST(5 + hash(i, 'n') % 11 AS INTEGER) AS n_rounds
FROM range({n}) t(i);
CREATE TABLE rounds AS
SELECT r.req, r.arm_ix, u.ri,
       CASE WHEN r.arm_ix = 1 THEN 3 ELSE 0 END AS proposed,
       CASE WHEN r.arm_ix = 1 THEN least(3, CAST(floor(ln((hash(r.req, u.ri) % 100000 + 1) / 100001.0)
            / ln(0.6 + 0.1 * (r.slot % 4) / 3.0)) AS INTEGER)) ELSE 0 END AS accepted,
       CASE WHEN r.arm_ix = 1 THEN 0.006 ELSE 0.0 END AS draft_s,
       CASE WHEN r.arm_ix = 1 THEN 0.0189 ELSE 0.018 END + (hash(r.req, u.ri, 'v') % 1000) * 1e-6 AS verify_s,
       0.002 AS overhead_s
FROM reqs r, LATERAL (SELECT unnest(range(r.n_rounds)) AS ri) u;
"""

AGG_SQL = """
SELECT req, count(*) AS rounds, count(*) FILTER (WHERE proposed > 0) AS spec_rounds,
       sum(proposed) AS proposed, sum(accepted) AS accepted, sum(accepted + 1) AS committed,
       sum(draft_s) AS draft_s, sum(verify_s) AS verify_s, sum(overhead_s) AS overhead_s,
       count(*) FILTER (WHERE proposed >= 1) AS pp1, count(*) FILTER (WHERE proposed >= 2) AS pp2,
       count(*) FILTER (WHERE proposed >= 3) AS pp3, count(*) FILTER (WHERE accepted >= 1) AS pa1,
       count(*) FILTER (WHERE accepted >= 2) AS pa2, count(*) FILTER (WHERE accepted >= 3) AS pa3
FROM rounds GROUP BY req ORDER BY req
"""

VERIFY_SQL = """
SELECT arm_ix, proposed + 1 AS tokens, count(*) AS n, quantile_cont(verify_s, 0.5) AS med,
       quantile_cont(verify_s, 0.1) AS p10, quantile_cont(verify_s, 0.9) AS p90
FROM rounds GROUP BY ALL ORDER BY ALL
"""


def synthetic(
    n_requests: int, chunks_per_request: int, records: bool
) -> tuple[PilotData, dict[str, Any]]:
    """A three-arm pilot of ``n_requests`` scheduled requests (a third per arm), as columns
    (what the store's reader hands over at scale) or, with ``records``, as record lists."""
    t0 = time.perf_counter()
    per_arm = n_requests // 3
    n = per_arm * 3
    con = duckdb.connect()
    con.execute(ROUNDS_SQL.format(n=n, per_arm=per_arm))
    n_rounds = con.execute("SELECT count(*) FROM rounds").fetchone()[0]
    t_gen = time.perf_counter()
    agg = con.execute(AGG_SQL).fetchnumpy()
    ver = con.execute(VERIFY_SQL).fetchall()
    t_sql = time.perf_counter()
    data = _pilot(per_arm, ver)
    req_cols, rr_cols = _request_columns(per_arm), _round_columns(per_arm, agg)
    if records:
        data.requests, data.request_rounds = (
            _as_records(req_cols, RequestRecord),
            _as_records(rr_cols, RequestRounds),
        )
    else:
        data.request_columns, data.request_rounds_columns = req_cols, rr_cols
    data.chunk_gaps = _chunks(per_arm, chunks_per_request)
    t_rec = time.perf_counter()
    return data, {
        "requests": n,
        "rounds": int(n_rounds),
        "chunks": int(sum(len(g.gap_s) for g in data.chunk_gaps)),
        "input": "records" if records else "columns",
        "generate_rounds_in_duckdb_s": t_gen - t0,
        "aggregate_rounds_in_duckdb_s": t_sql - t_gen,
        "build_input_s": t_rec - t_sql,
    }


def _labels(per_arm: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    slot = np.arange(per_arm)
    phase = np.array([p for p, _ in PHASES], dtype=object)[slot * 3 // per_arm]
    group = np.array(GROUPS, dtype=object)[slot % len(GROUPS)]
    rid = np.array([f"{p}-{i:07d}" for p, i in zip(phase, slot, strict=True)], dtype=object)
    return phase, group, rid


def _request_columns(per_arm: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    phase, group, rid = _labels(per_arm)
    slot = np.arange(per_arm, dtype=np.float64)
    base_e2e = 2.0 * rng.lognormal(0, 0.3, per_arm)
    parts: dict[str, list[np.ndarray]] = {}
    for a, (arm, _, _) in enumerate(ARMS):
        factor = (0.8, 1.0, 1.0)[a] * np.where(phase == "burst", 1.25 if a == 1 else 1.0, 1.0)
        e2e = base_e2e * factor * rng.lognormal(0, 0.03, per_arm)
        ok = rng.random(per_arm) >= 0.002
        cols = {
            "run_id": np.full(per_arm, f"run-{arm}", dtype=object),
            "arm": np.full(per_arm, arm, dtype=object),
            "phase": phase,
            "task_group": group,
            "request_id": rid,
            "prompt_id": np.array([f"{g}-{i % 500}" for i, g in enumerate(group)], dtype=object),
            "status": np.where(ok, "ok", "timeout").astype(object),
            "scheduled_t": slot,
            "sent_t": slot,
            "first_content_t": slot + 0.1 * e2e,
            "done_t": np.where(ok, slot + e2e, np.nan),
            "output_tokens": np.where(ok, 120.0, np.nan),
            "prompt_tokens": np.full(per_arm, 200.0),
            "deadline_s": np.full(per_arm, 4.0),
            "ttft_slo_s": np.full(per_arm, 1.0),
            "queue_s": np.full(per_arm, 0.01),
            "prefill_s": 0.09 * e2e,
            "decode_s": 0.9 * e2e,
        }
        for k, v in cols.items():
            parts.setdefault(k, []).append(v)
    return {k: np.concatenate(v) for k, v in parts.items()}


def _round_columns(per_arm: int, agg: dict[str, np.ndarray]) -> dict[str, Any]:
    phase, group, rid = _labels(per_arm)
    n = per_arm * len(ARMS)
    spec = np.repeat(np.arange(len(ARMS)) == 1, per_arm)
    cols: dict[str, Any] = {
        "run_id": np.repeat(np.array([f"run-{a}" for a, _, _ in ARMS], dtype=object), per_arm),
        "arm": np.repeat(np.array([a for a, _, _ in ARMS], dtype=object), per_arm),
        "phase": np.tile(phase, len(ARMS)),
        "task_group": np.tile(group, len(ARMS)),
        "request_id": np.tile(rid, len(ARMS)),
        "truncated_rounds": np.zeros(n, dtype=np.int64),
        "mean_batch_size": np.ones(n),
    }
    for k in (
        "rounds",
        "spec_rounds",
        "proposed",
        "accepted",
        "committed",
        "draft_s",
        "verify_s",
        "overhead_s",
    ):
        cols[k] = np.asarray(agg[k])
    cols["pos_proposed"] = np.where(
        spec[:, None], np.stack([agg[f"pp{j}"] for j in (1, 2, 3)], axis=1), 0
    )
    cols["pos_accepted"] = np.where(
        spec[:, None], np.stack([agg[f"pa{j}"] for j in (1, 2, 3)], axis=1), 0
    )
    return cols


def _as_records(cols: dict[str, Any], cls: type) -> list[Any]:
    """Columns -> records (what a reader returning lists would pay)."""
    import dataclasses

    names = [f.name for f in dataclasses.fields(cls) if f.name in cols]
    out = []
    for row in zip(*(cols[k] for k in names), strict=True):
        kw = {}
        for k, v in zip(names, row, strict=True):
            if isinstance(v, np.ndarray):
                v = [int(x) for x in v]
            elif isinstance(v, float) and v != v:
                v = None
            elif isinstance(v, np.generic):
                v = v.item()
            kw[k] = v
        out.append(cls(**kw))
    return out


def _pilot(per_arm: int, ver: list[tuple]) -> PilotData:
    durations = {p: (per_arm / 3) / rate for p, rate in PHASES}
    arms = [
        ArmRecord(
            "scale",
            f"run-{arm}",
            arm,
            role,
            "builtin",
            strategy=StrategySpec("draft", k=k) if k else StrategySpec(),
        )
        for arm, role, k in ARMS
    ]
    phases = [
        PhaseRecord(
            f"run-{arm}",
            arm,
            p,
            0.0,
            durations[p],
            rate,
            per_arm // 3,
            actual_start_t=0.0,
            actual_end_t=durations[p],
            status="complete",
        )
        for arm, _, _ in ARMS
        for p, rate in PHASES
    ]
    verify = [
        VerifyCostPoint(ARMS[a][0], "rounds", tok, 1, n_, med, p10, p90)
        for a, tok, n_, med, p10, p90 in ver
    ]
    snaps = [
        MetricSnapshot(
            f"run-{arm}",
            arm,
            p,
            "after",
            0.0,
            "builtin",
            rss_bytes=(2 << 30) + (300 << 20) * (arm == "spec"),
        )
        for arm, _, _ in ARMS
        for p, _ in PHASES
    ]
    pilot = PilotRecord(
        "scale",
        "report_scale",
        {"workload": {"phases": [{"arrival": {"kind": "trace"}}]}},
        "",
        "0",
        0.0,
        hardware=HardwareFacts(cpu_model=cpu_model()),
    )
    return PilotData(pilot, arms=arms, phases=phases, verify_costs=verify, snapshots=snaps)


def _chunks(per_arm: int, per_request: int) -> list[ChunkGaps]:
    rng = np.random.default_rng(1)
    n = max(1, per_arm * per_request // (len(PHASES) * len(GROUPS)))
    out = []
    for arm, _, k in ARMS:
        for p, _ in PHASES:
            for g in GROUPS:
                tokens = (rng.geometric(0.55, n).clip(1, 4) if k else np.ones(n)).astype(np.int32)
                out.append(
                    ChunkGaps(
                        f"run-{arm}", arm, p, g, rng.gamma(2.0, 0.01, n).astype(np.float32), tokens
                    )
                )
    return out


def run(data: PilotData, out_dir: Path, resamples: int) -> dict[str, float]:
    from specpilot.report import Report
    from specpilot.report.document import to_document
    from specpilot.report.markdown import render_markdown
    from specpilot.report.page import render_html
    from specpilot.report.plots import render_all
    from specpilot.simulate.section import pilot_simulation

    t0 = time.perf_counter()
    a = analyze(data, AnalysisConfig(bootstrap_resamples=resamples))
    t1 = time.perf_counter()
    doc = to_document(a, pilot_simulation(a.data, list(a.plan.pairs)))
    svgs = render_all(doc["figures"])
    rep = Report(doc, render_html(doc, svgs), render_markdown(doc))
    t2 = time.perf_counter()
    rep.write(out_dir)
    t3 = time.perf_counter()
    return {
        "analyze_s": t1 - t0,
        "render_s": t2 - t1,
        "write_s": t3 - t2,
        "report_total_s": t3 - t0,
        "verdict": doc["verdicts"][0]["verdict"] if doc["verdicts"] else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--chunks-per-request", type=int, default=50)
    ap.add_argument(
        "--resamples", type=int, default=1000, help="bootstrap resamples (the default config's)"
    )
    ap.add_argument("--pilot", help="a pilot DuckDB file, read with specpilot.store.read_pilot")
    ap.add_argument(
        "--records", action="store_true", help="hand the analysis record lists, not columns"
    )
    ap.add_argument("--out", help="report directory (default: a temporary one)")
    args = ap.parse_args()
    res: dict[str, Any] = {"cpu": cpu_model()}
    if args.pilot:
        from specpilot.store import read_pilot  # type: ignore[attr-defined]

        t = time.perf_counter()
        data = read_pilot(args.pilot)
        res.update(read_pilot_s=time.perf_counter() - t, requests=len(data.requests))
    else:
        data, info = synthetic(args.requests, args.chunks_per_request, args.records)
        res.update(info)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="report-scale-"))
    res.update(run(data, out, args.resamples))
    res["out"] = str(out)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
