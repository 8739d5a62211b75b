"""``Store``: one DuckDB pilot file, written through one writer thread, read as typed records.

See the package docstring (``specpilot.store``) for the API and an example.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from specpilot.records import (
    ArmRecord,
    ChunkTiming,
    CompatRecord,
    ConsistencyRecord,
    DrillRecord,
    MetricSnapshot,
    OutputRecord,
    PhaseRecord,
    PilotData,
    PilotRecord,
    PrefillRecord,
    QualityRecord,
    RequestRecord,
    RoundRecord,
)
from specpilot.store import codec
from specpilot.store.aggregates import chunk_gap_column
from specpilot.store.schema import TABLES, PilotFileError, prepare
from specpilot.store.writer import Finished, Op, Writer

_UPSERT = ("pilots", "arms", "phases", "requests")


def damaged(path: Path, exc: BaseException) -> PilotFileError:
    """The one-line error for a pilot file DuckDB cannot read (``exc``: what DuckDB said)."""
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return PilotFileError(
        f"{path}: damaged, not readable as a pilot file ({type(exc).__name__}: {first}); "
        "restore it from a copy, or rerun the pilot into a new --out"
    )


class Store:
    """One pilot file. ``read_only=True`` for analysis (several readers, no writer)."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if read_only and not self.path.is_file():
            raise FileNotFoundError(f"no pilot file at {self.path}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        try:
            self._con: duckdb.DuckDBPyConnection | None = duckdb.connect(
                str(self.path), read_only=read_only
            )
        except duckdb.IOException as exc:  # not a DuckDB file, or locked by a writer
            raise PilotFileError(
                f"{self.path}: cannot open ({exc}); give a pilot file, and if another process "
                "is writing this one, read it when that process has ended"
            ) from exc
        except duckdb.Error as exc:  # truncated, a byte lost, random bytes: DuckDB's own words
            raise damaged(self.path, exc) from exc
        try:
            if not read_only:
                self._con.execute("SET preserve_insertion_order = false")  # faster bulk inserts
            prepare(self._con, str(self.path), writable=not read_only)
        except duckdb.Error as exc:
            self._con.close()
            raise damaged(self.path, exc) from exc
        except BaseException:
            self._con.close()
            raise
        self._writer = None if read_only else Writer(self._con, self._lock)

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Commit what is queued, checkpoint and close (idempotent)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        with self._lock:
            if self._con is not None:
                if not self.read_only:
                    self._con.execute("CHECKPOINT")
                self._con.close()
                self._con = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise ValueError(f"store {self.path} is closed")
        return self._con

    def _w(self) -> Writer:
        if self._writer is None:
            raise ValueError(
                f"store {self.path} is " + ("read-only" if self.read_only else "closed")
            )
        return self._writer

    def flush(self) -> None:
        """Wait until every queued write is committed; re-raise a failed sink's error."""
        if self._writer is not None:
            self._writer.flush()

    @property
    def committed_requests(self) -> int:
        """Requests from ``sink`` that are durable (committed) so far."""
        return self._writer.committed_requests if self._writer is not None else 0

    # -- writing -----------------------------------------------------------------------
    def add(self, table: str, records: Iterable[Any]) -> int:
        """Write records (dataclasses of ``table``'s record type, or dicts); waits for the commit.

        ``pilots``, ``arms``, ``phases`` and ``requests`` are upserts by key (the last write
        wins); the other tables append.
        """
        if table not in TABLES:
            raise ValueError(f"no table {table!r}; tables: {', '.join(TABLES)}")
        rows = list(records)
        if rows:
            kind = "upsert" if table in _UPSERT else "insert"
            self._w().write(Op(kind, table, rows))
        return len(rows)

    def add_pilot(self, pilot: PilotRecord) -> None:
        self.add("pilots", [pilot])

    def add_arm(self, arm: ArmRecord) -> None:
        self.add("arms", [arm])

    def add_phases(self, phases: Iterable[PhaseRecord]) -> int:
        return self.add("phases", phases)

    def add_requests(self, requests: Iterable[RequestRecord]) -> int:
        return self.add("requests", requests)

    def add_chunks(
        self, chunks: Iterable[ChunkTiming], *, arm: str, run_id: str | None = None
    ) -> int:
        """Chunks carry no arm: give it (and ``run_id`` when the chunks lack one). Prefer
        ``sink``, which writes a request with its chunks and replaces them on a rewrite."""
        items = list(chunks)
        if not items:
            return 0
        by_req: dict[tuple[str, str], list[ChunkTiming]] = {}
        for c in items:
            by_req.setdefault((c.run_id or run_id or "", c.request_id), []).append(c)
        gaps = {}
        for group in by_req.values():
            ordered = sorted(group, key=lambda c: c.index)
            for p, c in itertools.pairwise(ordered):
                gaps[id(c)] = c.t - p.t
        extra: dict[str, list[Any]] = {
            "arm": [arm] * len(items),
            "run_id": [c.run_id or run_id or "" for c in items],
            "gap_s": [gaps.get(id(c)) for c in items],
        }
        self._w().write(Op("insert_extra", "chunks", (items, extra)))
        return len(items)

    def add_rounds(self, rounds: Iterable[RoundRecord]) -> int:
        return self.add("rounds", rounds)

    def add_prefills(self, prefills: Iterable[PrefillRecord]) -> int:
        return self.add("prefills", prefills)

    def add_snapshots(self, snapshots: Iterable[MetricSnapshot]) -> int:
        return self.add("snapshots", snapshots)

    def add_quality(self, records: Iterable[QualityRecord]) -> int:
        return self.add("quality", records)

    def add_outputs(self, records: Iterable[OutputRecord]) -> int:
        return self.add("outputs", records)

    def add_consistency(self, records: Iterable[ConsistencyRecord]) -> int:
        return self.add("consistency", records)

    def add_compat(self, records: Iterable[CompatRecord]) -> int:
        return self.add("compat", records)

    def add_drills(self, records: Iterable[DrillRecord]) -> int:
        return self.add("drills", records)

    def add_columns(self, table: str, columns: Mapping[str, Any]) -> int:
        """Bulk insert from numpy arrays (a scalar repeats; a missing column is NULL).

        For ``chunks`` without ``gap_s``, rows must be grouped by request in index order: the
        gaps are computed from ``index`` and ``t``.
        """
        if table not in TABLES:
            raise ValueError(f"no table {table!r}; tables: {', '.join(TABLES)}")
        cols = dict(columns)
        if table == "chunks" and "gap_s" not in cols and "index" in cols and "t" in cols:
            gap = chunk_gap_column(cols["index"], cols["t"])
            cols["gap_s"] = np.ma.masked_invalid(gap)
        n = max((len(v) for v in cols.values() if isinstance(v, (np.ndarray, list))), default=0)
        self._w().write(Op("columns", table, cols))
        return n

    def delete(self, table: str, **where: Any) -> None:
        """Delete the rows of ``table`` whose columns equal ``where`` (e.g. before a recompute)."""
        if table not in TABLES:
            raise ValueError(f"no table {table!r}; tables: {', '.join(TABLES)}")
        unknown = set(where) - set(TABLES[table].columns)
        if unknown:
            raise ValueError(f"{table} has no columns {sorted(unknown)}")
        self._w().write(Op("delete", table, where))

    def sink(
        self,
        record: RequestRecord,
        chunks: Sequence[ChunkTiming] = (),
        rounds: Sequence[RoundRecord] = (),
        prefill: PrefillRecord | None = None,
    ) -> None:
        """Queue one finished request with its chunks, rounds and prefill; returns at once.

        This is the load generator's ``Sink``. Writing the same request again (run_id, arm,
        request_id) replaces it and everything that came with it. ``flush()`` waits until
        queued requests are durable; ``committed_requests`` counts those that are.
        """
        self._w().submit(Op("sink", "requests", Finished(record, chunks, rounds, prefill)))

    # -- reading -----------------------------------------------------------------------
    def records(self, table: str, **where: Any) -> list[Any]:
        """Typed records of ``table`` whose columns equal ``where`` (None values ignored)."""
        if table not in TABLES:
            raise ValueError(f"no table {table!r}; tables: {', '.join(TABLES)}")
        self.flush()
        with self._lock:
            return codec.read(self.con, TABLES[table], where)

    def requests(self, run_id: str | None = None, arm: str | None = None) -> list[RequestRecord]:
        return self.records("requests", run_id=run_id, arm=arm)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        self.flush()
        with self._lock:
            return self.con.execute(sql, list(params or [])).fetchall()

    def columns(self, sql: str, params: Sequence[Any] | None = None) -> dict[str, np.ndarray]:
        """A query's result as numpy arrays (the way to read big tables, e.g. all rounds)."""
        self.flush()
        with self._lock:
            out: dict[str, np.ndarray] = self.con.execute(sql, list(params or [])).fetchnumpy()
            return out

    def arrow(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """A query's result as a ``pyarrow.Table`` (needs ``pip install pyarrow``)."""
        try:
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise ImportError("Store.arrow needs pyarrow: pip install pyarrow") from exc
        self.flush()
        with self._lock:
            result: Any = self.con.execute(sql, list(params or []))
            for name in ("to_arrow_table", "fetch_arrow_table", "arrow"):  # by DuckDB version
                if hasattr(result, name):
                    return getattr(result, name)()
            raise RuntimeError("this DuckDB has no Arrow export")

    def read(self, *, rounds: bool = False, columns: bool = False) -> PilotData:
        """Every record of the pilot (``specpilot.store.read_pilot``)."""
        from specpilot.store.reader import pilot_data

        self.flush()
        with self._lock:
            return pilot_data(self.con, str(self.path), rounds=rounds, columns=columns)

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        self.flush()
        with self._lock:
            return {
                t: int(self.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
                for t in ("schema_version", *TABLES)
            }

    def export_parquet(self, out_dir: str | Path) -> list[Path]:
        """One Parquet file per table in ``out_dir`` (created); returns the paths."""
        from specpilot.store.reader import export_parquet

        self.flush()
        with self._lock:
            return export_parquet(self.con, out_dir)


def read_pilot(path: str | Path, *, rounds: bool = False, columns: bool = False) -> PilotData:
    """Every record of the pilot in ``path`` (``rounds=True``: the raw rounds too;
    ``columns=True``: requests and round aggregates as numpy columns, see ``pilot_data``)."""
    with Store(path, read_only=True) as st:
        try:
            return st.read(rounds=rounds, columns=columns)
        except duckdb.Error as exc:  # a file damaged past its header: found while reading
            raise damaged(st.path, exc) from exc
