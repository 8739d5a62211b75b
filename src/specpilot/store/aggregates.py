"""What analysis needs from the big tables, computed in DuckDB (no Python loop per row).

- ``request_rounds``: one ``RequestRounds`` per measured request (warm-up requests left out,
  as everywhere in the analysis) that has rounds: sums, the request's
  batch share of round time (each round's time / its batch size), per-position counts
  (``pos_proposed[i-1]``: rounds that proposed >= i drafts; ``pos_accepted[i-1]``: rounds that
  accepted >= i) and ``accepted_hist[j]`` (rounds with a proposal that accepted exactly j),
  lists as long as the request's largest proposal (+1 for the histogram). Phase and task group
  come from the request.
- ``verify_costs``: median / p10 / p90 of ``verify_s`` per (arm, proposed + 1, batch size) over
  the rounds of non-warm-up requests (source ``rounds``). Each row of a batched round carries
  the whole round's time, so a batched round counts once per row; with one k per batch the
  quantiles are those of the rounds.
- ``chunk_gaps``: per (run, arm, phase, task group) of ok, non-warm-up requests, numpy arrays
  of the gaps between a chunk and the previous one of its request (first chunks have none;
  in no particular order: gaps feed distributions)
  and of the tokens each chunk carried. The gaps are computed when chunks are written
  (``chunks.gap_s``), so reading 50M chunks is a scan, not a window over them.

    >>> import duckdb
    >>> from specpilot.records import RoundRecord
    >>> from specpilot.store import codec
    >>> from specpilot.store.schema import prepare, TABLES
    >>> con = duckdb.connect(); prepare(con, ":memory:", writable=True)
    >>> _ = codec.insert(con, TABLES["rounds"], [RoundRecord("q", i, 3, a, a + 1, 0.0, 0.02, 0.0)
    ...                                       for i, a in enumerate([3, 1, 0])])
    >>> rr = request_rounds(con)[0]
    >>> rr.committed, rr.pos_proposed, rr.pos_accepted, rr.accepted_hist
    (7, [3, 3, 3], [2, 1, 1], [1, 1, 0, 1])
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from specpilot.records import (
    TOTALS_ENGINES,
    ChunkGaps,
    RequestRecord,
    RequestRounds,
    StepCadence,
    VerifyCostPoint,
)
from specpilot.store.codec import records_of, to_records
from specpilot.store.schema import record_columns


def _kmax(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT coalesce(max(proposed), 0) FROM rounds").fetchone()
    return int(row[0]) if row else 0


def request_rounds(con: duckdb.DuckDBPyConnection) -> list[RequestRounds]:
    return records_of(RequestRounds, as_lists(request_rounds_columns(con)))


def request_rounds_columns(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """``request_rounds`` as columns (``PilotData.request_rounds_columns``): keys as object
    arrays, sums as numbers, ``pos_proposed`` / ``pos_accepted`` / ``accepted_hist`` as 2-D
    arrays (requests x positions, zero-padded) and ``kmax`` (each request's largest proposal).
    The SQL aggregate runs without the GIL; ``as_lists`` cuts per-request lists from it."""
    k = _kmax(con)
    pos = "".join(
        f", count(*) FILTER (WHERE proposed >= {i})::BIGINT AS p{i}"
        f", count(*) FILTER (WHERE accepted >= {i})::BIGINT AS a{i}"
        for i in range(1, k + 1)
    )
    hist = "".join(
        f", count(*) FILTER (WHERE proposed > 0 AND accepted = {j})::BIGINT AS h{j}"
        for j in range(k + 1)
    )
    zeros = "".join(f", 0::BIGINT AS p{i}, 0::BIGINT AS a{i}" for i in range(1, k + 1))
    zeros += "".join(f", 0::BIGINT AS h{j}" for j in range(k + 1))
    sql = f"""
        SELECT a.*, coalesce(q.phase, a.round_phase) AS phase,
               coalesce(q.task_group, '') AS task_group
        FROM (
            {_totals_sql(zeros)}
            UNION ALL
            SELECT run_id, arm, request_id, any_value(phase) AS round_phase, count(*) AS rounds,
                   count(*) FILTER (WHERE proposed > 0) AS spec_rounds,
                   sum(proposed)::BIGINT AS proposed, sum(accepted)::BIGINT AS accepted,
                   sum(committed)::BIGINT AS committed,
                   sum(draft_s / greatest(batch_size, 1)) AS draft_s,
                   sum(verify_s / greatest(batch_size, 1)) AS verify_s,
                   sum(overhead_s / greatest(batch_size, 1)) AS overhead_s,
                   count(truncated) AS truncated_rounds, avg(batch_size) AS mean_batch_size,
                   max(proposed) AS kmax{pos}{hist}
            FROM rounds GROUP BY run_id, arm, request_id
        ) a
        LEFT JOIN requests q USING (run_id, arm, request_id)
        WHERE NOT coalesce(q.warmup, false)
        ORDER BY a.run_id, a.arm, a.request_id
    """
    cols: dict[str, Any] = con.execute(sql).fetchnumpy()
    n = len(cols["rounds"])

    def table(prefix: str, start: int) -> np.ndarray:  # requests x positions, zero-padded
        names = [f"{prefix}{i}" for i in range(start, k + 1)]
        if not names:
            return np.zeros((n, 0), dtype=np.int64)
        return np.stack([np.asarray(cols.pop(nm), dtype=np.int64) for nm in names], axis=1)

    cols["pos_proposed"] = table("p", 1)
    cols["pos_accepted"] = table("a", 1)
    cols["accepted_hist"] = table("h", 0)
    cols["kmax"] = np.asarray(cols["kmax"], dtype=np.int64)
    return cols


# Engines that give per-request totals, not rounds (llama.cpp: ``timings.predicted_n`` /
# ``draft_n`` / ``draft_n_accepted``), get one row per ok request: every decode step commits its
# accepted drafts + 1, so decode steps = (output tokens - 1) - accepted (the first token is the
# prefill's, as for vLLM); which steps carried a draft is not reported, so ``spec_rounds`` is 0
# (k and the full-accept count stay unknown); the step time is the engine's decode time
# (``predicted_ms``), shown as verify time, not split.


def _totals_sql(zeros: str) -> str:
    engines = ", ".join(f"'{e}'" for e in TOTALS_ENGINES)
    return f"""
            SELECT q.run_id, q.arm, q.request_id, q.phase AS round_phase,
                   (q.output_tokens - 1 - t.acc)::BIGINT AS rounds, 0::BIGINT AS spec_rounds,
                   t.prop::BIGINT AS proposed, t.acc::BIGINT AS accepted,
                   (q.output_tokens - 1)::BIGINT AS committed, 0.0::DOUBLE AS draft_s,
                   q.decode_s::DOUBLE AS verify_s, 0.0::DOUBLE AS overhead_s,
                   0::BIGINT AS truncated_rounds, 1.0::DOUBLE AS mean_batch_size,
                   0 AS kmax{zeros}
            FROM (
                SELECT run_id, arm, request_id,
                       coalesce(try_cast(spec->>'proposed' AS DOUBLE), 0) AS prop,
                       coalesce(try_cast(spec->>'accepted' AS DOUBLE), 0) AS acc
                FROM requests
            ) t
            JOIN requests q USING (run_id, arm, request_id)
            JOIN arms m USING (run_id)
            WHERE m.engine IN ({engines}) AND q.status = 'ok' AND NOT q.warmup
              AND q.decode_s IS NOT NULL
              AND q.output_tokens - 1 - t.acc > 0
              AND NOT EXISTS (SELECT 1 FROM rounds r WHERE r.run_id = q.run_id
                              AND r.arm = q.arm AND r.request_id = q.request_id)"""


def as_lists(cols: dict[str, Any]) -> dict[str, Any]:
    """``request_rounds_columns`` with the 2-D position arrays cut into per-request lists as
    long as each request's largest proposal (+1 for the histogram; empty without proposals)."""
    out = dict(cols)
    kmax = out.pop("kmax").tolist()
    spec = (np.asarray(out["spec_rounds"]) > 0).tolist()

    def cut(arr: np.ndarray, extra: int) -> list[list[int]]:
        full = arr.shape[1]  # most requests use the arm's k: no copy then
        return [
            row if m + extra == full else row[: m + extra]
            for row, m in zip(arr.tolist(), kmax, strict=True)
        ]

    out["pos_proposed"] = cut(out["pos_proposed"], 0)
    out["pos_accepted"] = cut(out["pos_accepted"], 0)
    hist = cut(out["accepted_hist"], 1)
    out["accepted_hist"] = [h if s else [] for h, s in zip(hist, spec, strict=True)]
    return out


def request_columns(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The requests as columns for analysis at scale (``PilotData.request_columns``): text
    fields as object arrays, numbers as float64 with NaN for NULL, flags as bool, and one
    ``client_stage:<name>`` column per client stage (NaN where a request lacks it). ``spec``
    and ``output_text`` are left out (read the records for them)."""
    keys = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT unnest(json_keys(client_stages)) FROM requests ORDER BY 1"
        ).fetchall()
    ]
    fields = [
        (name, typ)
        for name, typ in record_columns(RequestRecord).items()
        if typ in ("VARCHAR", "BIGINT", "DOUBLE", "BOOLEAN") and name != "output_text"
    ]
    sel = [f'"{name}"' for name, _ in fields]
    sel += [
        f"(client_stages->>'{key.replace(chr(39), chr(39) * 2)}')::DOUBLE AS \"client_stage:{key}\""
        for key in keys
    ]
    order = "ORDER BY run_id, arm, scheduled_t, request_id"
    cols: dict[str, Any] = con.execute(
        f"SELECT {', '.join(sel)} FROM requests {order}"
    ).fetchnumpy()
    types = dict(fields)
    out: dict[str, Any] = {}
    for name, arr in cols.items():
        typ = types.get(name, "DOUBLE")
        if typ == "VARCHAR":
            out[name] = np.asarray(
                np.ma.filled(arr, None) if np.ma.isMaskedArray(arr) else arr, dtype=object
            )
        elif typ == "BOOLEAN":
            out[name] = np.asarray(np.ma.filled(arr, False), dtype=bool)
        else:
            out[name] = np.ma.filled(np.ma.asarray(arr, dtype=np.float64), np.nan)
    return out


def verify_costs(con: duckdb.DuckDBPyConnection) -> list[VerifyCostPoint]:
    rows = con.execute(
        """
        SELECT r.arm, 'rounds' AS source, r.proposed + 1 AS tokens, r.batch_size,
               count(*) AS samples, median(r.verify_s) AS median_s,
               quantile_cont(r.verify_s, 0.1) AS p10_s, quantile_cont(r.verify_s, 0.9) AS p90_s
        FROM rounds r ANTI JOIN (SELECT run_id, arm, request_id FROM requests WHERE warmup) w
             USING (run_id, arm, request_id)
        GROUP BY ALL ORDER BY r.arm, r.batch_size, tokens
        """
    ).fetchall()
    names = ["arm", "source", "tokens", "batch_size", "samples", "median_s", "p10_s", "p90_s"]
    return to_records(VerifyCostPoint, names, rows)


def step_cadence(con: duckdb.DuckDBPyConnection) -> list[StepCadence]:
    """Median step-to-step time per (arm, phase, rows in the step), steps followed by a prefill
    left out (the gap holds the prefill, which a simulator adds apart)."""
    rows = con.execute(
        """
        WITH s AS (
            SELECT run_id, arm, t_start, min(phase) AS phase, count(*) AS rows
            FROM rounds GROUP BY run_id, arm, t_start
        ), g AS (
            SELECT *, lead(t_start) OVER (PARTITION BY run_id, arm ORDER BY t_start) AS t_next
            FROM s
        )
        SELECT g.arm, g.phase, g.rows, count(*), median(g.t_next - g.t_start),
               quantile_cont(g.t_next - g.t_start, 0.1), quantile_cont(g.t_next - g.t_start, 0.9)
        FROM g ANTI JOIN prefills p
             ON p.run_id = g.run_id AND p.arm = g.arm
            AND p.t_start >= g.t_start AND p.t_start < g.t_next
        WHERE g.t_next IS NOT NULL
        GROUP BY ALL ORDER BY ALL
        """
    ).fetchall()
    names = ["arm", "phase", "batch_size", "samples", "median_s", "p10_s", "p90_s"]
    return to_records(StepCadence, names, rows)


def chunk_gaps(con: duckdb.DuckDBPyConnection) -> list[ChunkGaps]:
    groups = con.execute(
        """
        SELECT run_id, arm, phase, task_group FROM requests
        WHERE status = 'ok' AND NOT warmup GROUP BY ALL ORDER BY ALL
        """
    ).fetchall()
    if not groups:
        return []
    names = ("run_id", "arm", "phase", "task_group")
    con.register(
        "_gap_groups",
        {
            "gid": np.arange(len(groups), dtype=np.int32),
            **{n: np.array([g[i] for g in groups], dtype=object) for i, n in enumerate(names)},
        },
    )
    try:  # no strings and no ORDER BY in the big result: numbers only, grouped in numpy
        cols = con.execute(
            """
            WITH q AS (
                SELECT r.run_id, r.arm, r.request_id, g.gid FROM requests r
                JOIN _gap_groups g ON g.run_id = r.run_id AND g.arm = r.arm
                                   AND g.phase = r.phase AND g.task_group = r.task_group
                WHERE r.status = 'ok' AND NOT r.warmup
            )
            SELECT q.gid, c.gap_s, c.tokens_in_chunk
            FROM chunks c JOIN q USING (run_id, arm, request_id)
            WHERE c.gap_s IS NOT NULL
            """
        ).fetchnumpy()
    finally:
        con.unregister("_gap_groups")
    gid = np.asarray(cols["gid"], dtype=np.int16 if len(groups) < 2**15 else np.int64)
    order = np.argsort(gid, kind="stable")  # a radix sort for 16-bit keys
    bounds = np.concatenate(([0], np.cumsum(np.bincount(gid, minlength=len(groups)))))
    gaps = np.asarray(cols["gap_s"], dtype=np.float64)[order]
    tokens = np.asarray(cols["tokens_in_chunk"], dtype=np.int64)[order]
    out = []
    for i, (run_id, arm, phase, group) in enumerate(groups):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        gap_s: Any = gaps[lo:hi]  # numpy arrays: ChunkGaps takes any sequence
        toks: Any = tokens[lo:hi]
        out.append(ChunkGaps(run_id, arm, phase, group, gap_s, toks))
    return out


def chunk_gap_column(index: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Gaps for chunk rows grouped by request in index order: ``t[i] - t[i-1]`` where row i
    continues row i-1's request (``index[i] == index[i-1] + 1``), else NaN (a first chunk).

        >>> chunk_gap_column(np.array([0, 1, 2, 0, 1]), np.array([1.0, 1.5, 1.75, 9.0, 9.5]))
        array([ nan, 0.5 , 0.25,  nan, 0.5 ])
    """
    index = np.asarray(index, dtype=np.int64)
    t = np.asarray(t, dtype=np.float64)
    out = np.full(len(t), np.nan)
    if len(t) > 1:
        cont = index[1:] == index[:-1] + 1
        out[1:] = np.where(cont, t[1:] - t[:-1], np.nan)
    return out
