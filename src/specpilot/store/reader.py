"""Reading a pilot file: ``read_pilot`` returns every record as ``records.PilotData``.

Small tables come back as typed records; the big ones as their SQL aggregates
(``request_rounds``, ``verify_costs``, ``chunk_gaps``, ``step_cadence``: see ``store.aggregates``), raw rounds
only when asked for. Nothing downstream reparses raw JSON.

    >>> data = read_pilot("pilot.duckdb")                     # doctest: +SKIP
    >>> [a.role for a in data.arms], len(data.requests)      # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb

from specpilot.records import ArmRecord, PilotData, RequestRounds, VerifyCostPoint
from specpilot.store import aggregates, codec
from specpilot.store.aggregates import as_lists
from specpilot.store.schema import TABLES, PilotFileError, table_names


def _with_cursor(con: duckdb.DuckDBPyConnection, fn: Callable[..., Any], *args: Any) -> Any:
    cur = con.cursor()  # its own connection to the same database: safe in another thread
    try:
        return fn(cur, *args)
    finally:
        cur.close()


def _columns(cur: duckdb.DuckDBPyConnection, table: str) -> dict[str, Any]:
    sql, params = codec.select_sql(cur, TABLES[table])
    out: dict[str, Any] = cur.execute(sql, params).fetchnumpy()
    return out


def pilot_data(
    con: duckdb.DuckDBPyConnection, path: str, *, rounds: bool = False, columns: bool = False
) -> PilotData:
    """Every record of the file. The big queries run on worker threads (DuckDB releases the
    GIL) while this thread turns finished results into records. ``columns``: requests and
    their round aggregates as numpy columns (``request_columns``, ``request_rounds_columns``)
    instead of records, for analysis at scale."""
    pilots = codec.read(con, TABLES["pilots"])
    if len(pilots) != 1:
        raise PilotFileError(
            f"{path} holds {len(pilots)} pilot records; a pilot file holds exactly one "
            "(Store.add_pilot writes it)"
        )
    big = [*([] if columns else ["requests"]), "prefills", *(["rounds"] if rounds else [])]
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="read_pilot") as pool:
        cols = {t: pool.submit(_with_cursor, con, _columns, t) for t in big}
        rr = pool.submit(_with_cursor, con, aggregates.request_rounds_columns)
        req = pool.submit(_with_cursor, con, aggregates.request_columns) if columns else None
        gaps = pool.submit(_with_cursor, con, aggregates.chunk_gaps)
        costs = pool.submit(_with_cursor, con, aggregates.verify_costs)
        cadence = pool.submit(_with_cursor, con, aggregates.step_cadence)

        def typed(name: str) -> list[Any]:
            if name in cols:
                return codec.records_of(TABLES[name].record, cols[name].result())
            return codec.read(con, TABLES[name])

        arms = typed("arms")
        return PilotData(
            pilot=pilots[0],
            arms=arms,
            phases=typed("phases"),
            requests=[] if columns else typed("requests"),
            request_rounds=[]
            if columns
            else codec.records_of(RequestRounds, as_lists(rr.result())),
            request_columns=req.result() if req is not None else None,
            request_rounds_columns=rr.result() if columns else None,
            prefills=typed("prefills"),
            verify_costs=[*costs.result(), *calibration_points(arms)],
            chunk_gaps=gaps.result(),
            step_cadence=cadence.result(),
            snapshots=typed("snapshots"),
            quality=typed("quality"),
            outputs=typed("outputs"),
            consistency=typed("consistency"),
            compat=typed("compat"),
            drills=typed("drills"),
            rounds=typed("rounds") if rounds else [],
        )


def calibration_points(arms: list[ArmRecord]) -> list[VerifyCostPoint]:
    """The engine's own load-time measurement of the verify-cost curve, from each arm's
    manifest (``calibration.forward_s``: the chosen format's forward seconds by batch and new
    tokens), once per arm (its first run)."""
    out: list[VerifyCostPoint] = []
    seen: set[str] = set()
    for a in sorted(arms, key=lambda a: (a.run_order, a.repetition)):
        cal = (a.manifest or {}).get("calibration") or {}
        if a.arm in seen or not cal.get("forward_s"):
            continue
        seen.add(a.arm)
        fmt = (cal.get("formats") or {}).get("target")
        for row in cal["forward_s"]:
            out.append(
                VerifyCostPoint(
                    arm=a.arm,
                    source="calibration",
                    tokens=int(row["tokens"]),
                    batch_size=int(row["batch"]),
                    samples=int(row.get("samples", 0)),
                    median_s=float(row["seconds"]),
                    dtype=fmt,
                )
            )
    return out


def export_parquet(con: duckdb.DuckDBPyConnection, out_dir: str | Path) -> list[Path]:
    """One Parquet file per table of an open file (any schema version)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for table in sorted(table_names(con)):
        p = out / f"{table}.parquet"
        target = str(p).replace("'", "''")
        con.execute(f"COPY (SELECT * FROM \"{table}\") TO '{target}' (FORMAT PARQUET)")
        paths.append(p)
    return paths


def export_file(path: str | Path, out_dir: str | Path) -> dict[Path, int]:
    """Export any specpilot DuckDB file as it is (also version 1): path -> rows."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no pilot file at {path}")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:  # not a DuckDB file, or locked by a writer
        raise PilotFileError(
            f"{path}: cannot open ({exc})",
            fix="give a specpilot DuckDB file; if a pilot is writing it, export when it is done",
        ) from None
    try:
        paths = export_parquet(con, out_dir)
        return {
            p: int(con.execute(f'SELECT count(*) FROM "{p.stem}"').fetchone()[0])  # type: ignore[index]
            for p in paths
        }
    finally:
        con.close()
