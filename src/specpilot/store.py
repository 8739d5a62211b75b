"""The result store: one DuckDB file per pilot run, written as records arrive.

    >>> import tempfile, os
    >>> from specpilot.store import Store
    >>> from specpilot.records import RequestRecord, ChunkTiming
    >>> path = os.path.join(tempfile.mkdtemp(), "run.duckdb")
    >>> with Store(path) as st:
    ...     run = st.start_run("r1", config={"seed": 1})
    ...     st.sink(RequestRecord(run, "baseline", "peak", "code", "peak-000000", 0.0, "ok"),
    ...             [ChunkTiming("peak-000000", 0.5, 3, run)])
    ...     [r.status for r in st.requests(run)], len(st.chunks(run))
    (['ok'], 1)

API (kept small and stable; the load generator and the pilot write through it):

- ``Store(path)`` opens or creates the file (``read_only=True`` for analysis); ``close()``;
  a context manager.
- ``start_run(run_id=None, *, config=None, schedule=None, manifests=None, meta=None) -> run_id``;
  ``add_manifest(run_id, arm, manifest)``; ``finish_run(run_id, status="complete")``.
- Writers, each one committed transaction (a crash loses at most the batch being written):
  ``add_requests``, ``add_chunks(chunks, arm=...)``, ``add_rounds``, ``add_prefills``,
  ``add_snapshot`` / ``add_snapshots``, ``add_quality``, ``add_compat``, ``add_drills``.
  ``sink(record, chunks)`` queues one finished request with its chunks for a group commit
  (returns at once; pass ``store.sink`` as the load generator's ``Sink``); ``flush()`` waits
  until they are durable (``close()`` and every reader flush first).
- Readers returning records: ``requests``, ``chunks``, ``rounds``, ``prefills``,
  ``snapshots``; dicts: ``runs``, ``manifests``, ``quality``, ``compat``, ``drills``;
  ``schedule(run_id)``; ``query(sql, params)`` for anything else.
- ``export_parquet(dir)``: one Parquet file per table (``specpilot export RUN.duckdb --parquet DIR``).

Tables follow the record dataclasses in :mod:`specpilot.records`: one column per field (dicts
and lists as JSON text), plus ``arm`` on chunks. A field added to a record becomes a column the
next time a file is opened (``ALTER TABLE ... ADD COLUMN``); ``schema_version`` records the
layout version and every migration. Requests are keyed by (run_id, arm, request_id): writing
the same request again replaces it (the last write wins). The connection is guarded by a lock,
so the load generator's writer thread and the main thread can share one ``Store``.
DuckDB lets one process hold the file for writing; readers open it when the run is over.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import threading
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from specpilot import __version__
from specpilot.records import (
    ChunkTiming,
    MetricSnapshot,
    PrefillRecord,
    RequestRecord,
    RoundRecord,
)

SCHEMA_VERSION = 1
R = TypeVar("R")

# Generic result tables for records defined by later issues (quality, compat, drills): the
# named columns are extracted when present, the whole record is kept in ``data`` (JSON).
_GENERIC: dict[str, dict[str, str]] = {
    "quality": {
        "run_id": "VARCHAR",
        "arm": "VARCHAR",
        "group": "VARCHAR",
        "request_id": "VARCHAR",
        "check": "VARCHAR",
        "passed": "BOOLEAN",
        "score": "DOUBLE",
    },
    "compat": {"run_id": "VARCHAR", "arm": "VARCHAR", "feature": "VARCHAR", "passed": "BOOLEAN"},
    "drills": {"run_id": "VARCHAR", "arm": "VARCHAR", "kind": "VARCHAR", "passed": "BOOLEAN"},
}


def _sql_type(annotation: Any) -> str:
    a = str(annotation).replace("typing.", "")
    if any(k in a for k in ("dict", "list", "tuple", "Any")):
        return "JSON"
    for py, sql in (
        ("bool", "BOOLEAN"),
        ("int", "BIGINT"),
        ("float", "DOUBLE"),
        ("str", "VARCHAR"),
    ):
        if a.split("|")[0].strip() == py:
            return sql
    return "JSON"


def _columns(cls: type) -> dict[str, str]:
    return {f.name: _sql_type(f.type) for f in dataclasses.fields(cls)}


_REC_TABLES: dict[str, tuple[type, dict[str, str], tuple[str, ...]]] = {
    # table: (record class, extra columns, primary key)
    "requests": (RequestRecord, {}, ("run_id", "arm", "request_id")),
    "chunks": (ChunkTiming, {"arm": "VARCHAR"}, ()),
    "rounds": (RoundRecord, {}, ()),
    "prefills": (PrefillRecord, {}, ()),
    "snapshots": (MetricSnapshot, {}, ()),
}


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _jsonable(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.asdict(v)
    if hasattr(v, "to_dict"):
        return v.to_dict()
    if isinstance(v, (set, frozenset)):
        return sorted(v)
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


def _dumps(v: Any) -> str | None:
    return (
        None if v is None else json.dumps(v, ensure_ascii=False, default=_jsonable, sort_keys=True)
    )


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _as_dict(rec: Any) -> dict[str, Any]:
    if isinstance(rec, dict):
        return dict(rec)
    if dataclasses.is_dataclass(rec) and not isinstance(rec, type):
        # Shallow (dataclasses.asdict deep-copies: 10x slower on 100k chunks); nested values
        # are serialised to JSON on insert anyway.
        return {n: getattr(rec, n) for n in _field_names(type(rec))}
    if hasattr(rec, "to_dict"):
        return dict(rec.to_dict())
    raise TypeError(f"cannot store a {type(rec).__name__}: pass a record dataclass or a dict")


class Store:
    """One DuckDB file per pilot run (see the module docstring for the API)."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        if read_only and not self.path.is_file():
            raise FileNotFoundError(f"no store at {self.path}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._con: duckdb.DuckDBPyConnection | None = duckdb.connect(
            str(self.path), read_only=read_only
        )
        self._cols: dict[str, list[str]] = {}
        self._types = {t: cols for t, (cols, _) in self._wanted().items()}
        self._pks = {t: pk for t, (_, pk) in self._wanted().items()}
        # Group commit for sink(): a writer thread commits whatever is queued in one
        # transaction, so a busy run batches naturally and an idle one commits at once.
        self._cv = threading.Condition()
        self._pending: list[tuple[str, list[dict[str, Any]], bool]] = []
        self._busy = False
        self._closing = False
        self._writer: threading.Thread | None = None
        self._writer_error: BaseException | None = None
        if not read_only:
            self._migrate()
        self._load_columns()

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush queued sink() records, checkpoint and close."""
        if self._writer is not None:
            with self._cv:
                self._closing = True
                self._cv.notify_all()
            self._writer.join()
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

    # -- schema ------------------------------------------------------------------------
    def _tables(self) -> set[str]:
        rows = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        )
        return {r[0] for r in rows.fetchall()}

    def _existing_columns(self, table: str) -> list[str]:
        rows = self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table],
        ).fetchall()
        return [r[0] for r in rows]

    def _wanted(self) -> dict[str, tuple[dict[str, str], tuple[str, ...]]]:
        out: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
            "runs": (
                {
                    "run_id": "VARCHAR",
                    "name": "VARCHAR",
                    "status": "VARCHAR",
                    "started_at": "TIMESTAMP",
                    "finished_at": "TIMESTAMP",
                    "specpilot_version": "VARCHAR",
                    "config": "JSON",
                    "schedule": "JSON",
                    "meta": "JSON",
                },
                ("run_id",),
            ),
            "manifests": (
                {
                    "run_id": "VARCHAR",
                    "arm": "VARCHAR",
                    "recorded_at": "TIMESTAMP",
                    "manifest": "JSON",
                },
                ("run_id", "arm"),
            ),
        }
        for table, (cls, extra, pk) in _REC_TABLES.items():
            cols = _columns(cls)
            cols.update(extra)
            out[table] = (cols, pk)
        for table, cols in _GENERIC.items():
            out[table] = ({**cols, "t": "TIMESTAMP", "data": "JSON"}, ())
        return out

    def _migrate(self) -> None:
        with self._lock:
            con = self.con
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(
                    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, specpilot_version VARCHAR,"
                    " applied_at TIMESTAMP, note VARCHAR)"
                )
                fresh = con.execute("SELECT count(*) FROM schema_version").fetchone() == (0,)
                existing = self._tables()
                notes = []
                for table, (cols, pk) in self._wanted().items():
                    if table not in existing:
                        body = ", ".join(f"{_q(c)} {t}" for c, t in cols.items())
                        if pk:
                            body += f", PRIMARY KEY ({', '.join(_q(c) for c in pk)})"
                        con.execute(f"CREATE TABLE {_q(table)} ({body})")
                        continue
                    have = set(self._existing_columns(table))
                    for c, t in cols.items():
                        if c not in have:
                            con.execute(f"ALTER TABLE {_q(table)} ADD COLUMN {_q(c)} {t}")
                            notes.append(f"{table}.{c}")
                if fresh or notes:
                    con.execute(
                        "INSERT INTO schema_version VALUES (?, ?, ?, ?)",
                        [
                            SCHEMA_VERSION,
                            __version__,
                            _now(),
                            "created" if fresh else "added " + ", ".join(notes),
                        ],
                    )
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def _load_columns(self) -> None:
        for table in self._tables():
            self._cols[table] = self._existing_columns(table)

    @property
    def schema_version(self) -> int:
        row = self.con.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # -- writing -----------------------------------------------------------------------
    def _insert(self, table: str, rows: Sequence[dict[str, Any]], replace: bool = False) -> int:
        """Insert rows column-wise (UNNEST of one list per column: fast, one statement)."""
        if not rows:
            return 0
        types = self._types[table]
        cols = [c for c in self._cols[table] if c in types]
        selects, params = [], []
        for i, c in enumerate(cols, 1):
            t = types[c]
            vals = [r.get(c) for r in rows]
            if t == "JSON":
                vals = [_dumps(v) for v in vals]
                t = "VARCHAR"
            selects.append(f"UNNEST(${i}::{t}[])")
            params.append(vals)
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        sql = f"{verb} INTO {_q(table)} ({', '.join(_q(c) for c in cols)}) SELECT {', '.join(selects)}"
        self.con.execute(sql, params)
        return len(rows)

    def _write(self, *batches: tuple[str, Sequence[dict[str, Any]], bool]) -> None:
        with self._lock:
            con = self.con
            con.execute("BEGIN TRANSACTION")
            try:
                for table, rows, replace in batches:
                    self._insert(table, rows, replace)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def start_run(
        self,
        run_id: str | None = None,
        *,
        name: str = "",
        config: Any = None,
        schedule: Any = None,
        manifests: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Register a run (its frozen config, schedule and per-arm manifests); returns its id."""
        run_id = run_id or f"{_now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
        if hasattr(schedule, "to_dict"):
            schedule = schedule.to_dict()
        if hasattr(config, "model_dump"):
            config = config.model_dump(mode="json")
        row = {
            "run_id": run_id,
            "name": name,
            "status": "running",
            "started_at": _now(),
            "finished_at": None,
            "specpilot_version": __version__,
            "config": config,
            "schedule": schedule,
            "meta": meta or {},
        }
        now = _now()
        mrows = [
            {"run_id": run_id, "arm": arm, "recorded_at": now, "manifest": m}
            for arm, m in (manifests or {}).items()
        ]
        with self._lock:
            exists = self.con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if exists:
                raise ValueError(
                    f"run {run_id!r} already exists in {self.path}: pick another run_id"
                )
            self._write(("runs", [row], False), ("manifests", mrows, True))
        return run_id

    def add_manifest(self, run_id: str, arm: str, manifest: Any) -> None:
        self._write(
            (
                "manifests",
                [{"run_id": run_id, "arm": arm, "recorded_at": _now(), "manifest": manifest}],
                True,
            )
        )

    def finish_run(
        self, run_id: str, status: str = "complete", meta: dict[str, Any] | None = None
    ) -> None:
        with self._lock:
            self.con.execute(
                "UPDATE runs SET status = ?, finished_at = ?, meta = CASE WHEN ? IS NULL THEN meta ELSE ? END"
                " WHERE run_id = ?",
                [status, _now(), _dumps(meta), _dumps(meta), run_id],
            )

    def add_requests(self, records: Iterable[RequestRecord]) -> int:
        rows = [_as_dict(r) for r in records]
        self._write(("requests", rows, True))
        return len(rows)

    def add_chunks(
        self, chunks: Iterable[ChunkTiming], *, arm: str | None = None, run_id: str | None = None
    ) -> int:
        """Chunks carry no arm: pass ``arm`` (and ``run_id`` if the chunks lack it)."""
        rows = []
        for c in chunks:
            d = _as_dict(c)
            if arm is not None:
                d["arm"] = arm
            if run_id is not None and not d.get("run_id"):
                d["run_id"] = run_id
            rows.append(d)
        self._write(("chunks", rows, False))
        return len(rows)

    def sink(self, record: RequestRecord, chunks: Sequence[ChunkTiming]) -> None:
        """Queue one finished request and its chunks (a loadgen ``Sink``); returns at once.

        A writer thread commits queued requests together with their chunks (group commit:
        one transaction per wake-up, ~10 ms on a small machine). ``flush()`` waits until
        everything queued is durable; a crash loses only what was queued after the last
        commit began, i.e. requests that finished a few milliseconds before the crash.
        """
        crow = []
        for c in chunks:
            d = _as_dict(c)
            d["arm"] = record.arm
            d["run_id"] = d.get("run_id") or record.run_id
            crow.append(d)
        with self._cv:
            if self._writer_error is not None:
                raise RuntimeError(
                    f"store writer failed: {self._writer_error!r}"
                ) from self._writer_error
            if self._closing or self._con is None:
                raise ValueError(f"store {self.path} is closed")
            self._pending.append(("requests", [_as_dict(record)], True))
            if crow:
                self._pending.append(("chunks", crow, False))
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_loop, daemon=True, name="store-writer"
                )
                self._writer.start()
            self._cv.notify_all()

    def _write_loop(self) -> None:
        while True:
            with self._cv:
                while not self._pending and not self._closing:
                    self._cv.wait()
                if not self._pending and self._closing:
                    return
                batch, self._pending, self._busy = self._pending, [], True
            merged: dict[tuple[str, bool], list[dict[str, Any]]] = {}
            for table, rows, replace in batch:
                merged.setdefault((table, replace), []).extend(rows)
            try:
                self._write(
                    *(
                        (t, self._dedupe(t, rows) if r else rows, r)
                        for (t, r), rows in merged.items()
                    )
                )
            except BaseException as exc:  # reported by flush()/close()/the next sink()
                with self._cv:
                    self._writer_error = self._writer_error or exc
            with self._cv:
                self._busy = False
                self._cv.notify_all()

    def _dedupe(self, table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Within one statement a key may appear once: the last write wins."""
        pk = self._pks[table]
        last = {tuple(r.get(c) for c in pk): r for r in rows}
        return list(last.values())

    def flush(self) -> None:
        """Wait until every record queued by ``sink`` is committed; re-raise a writer error."""
        with self._cv:
            while self._pending or self._busy:
                self._cv.wait()
            if self._writer_error is not None:
                raise RuntimeError(
                    f"store writer failed: {self._writer_error!r}"
                ) from self._writer_error

    def add_rounds(self, rounds: Iterable[RoundRecord]) -> int:
        rows = [_as_dict(r) for r in rounds]
        self._write(("rounds", rows, False))
        return len(rows)

    def add_prefills(self, prefills: Iterable[PrefillRecord]) -> int:
        rows = [_as_dict(r) for r in prefills]
        self._write(("prefills", rows, False))
        return len(rows)

    def add_snapshot(self, snapshot: MetricSnapshot) -> None:
        self._write(("snapshots", [_as_dict(snapshot)], False))

    def add_snapshots(self, snapshots: Iterable[MetricSnapshot]) -> int:
        rows = [_as_dict(s) for s in snapshots]
        self._write(("snapshots", rows, False))
        return len(rows)

    def _add_generic(self, table: str, records: Iterable[Any]) -> int:
        now = _now()
        rows = []
        for rec in records:
            d = _as_dict(rec)
            row = {c: d.get(c) for c in _GENERIC[table]}
            row["t"], row["data"] = now, d
            rows.append(row)
        self._write((table, rows, False))
        return len(rows)

    def add_quality(self, records: Iterable[Any]) -> int:
        """Quality results (QualityRecord or dicts with run_id, arm, group, request_id, check, passed, score)."""
        return self._add_generic("quality", records)

    def add_compat(self, records: Iterable[Any]) -> int:
        """Compatibility results (run_id, arm, feature, passed, ...)."""
        return self._add_generic("compat", records)

    def add_drills(self, records: Iterable[Any]) -> int:
        """Rollback-drill results (run_id, arm, kind, passed, ...)."""
        return self._add_generic("drills", records)

    # -- reading -----------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.con.execute(sql, params or []).fetchall()

    def _select(self, table: str, where: dict[str, Any], order: str) -> list[dict[str, Any]]:
        if self._writer is not None:
            self.flush()
        cols = self._cols[table]
        conds = [f"{_q(k)} = ?" for k, v in where.items() if v is not None]
        params = [v for v in where.values() if v is not None]
        sql = f"SELECT {', '.join(_q(c) for c in cols)} FROM {_q(table)}"
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        with self._lock:
            rows = self.con.execute(sql + f" ORDER BY {order}", params).fetchall()
        types = self._types[table]
        out = []
        for row in rows:
            d = dict(zip(cols, row, strict=True))
            for c, t in types.items():
                if t == "JSON" and isinstance(d.get(c), str):
                    d[c] = json.loads(d[c])
            out.append(d)
        return out

    def _records(self, cls: type[R], table: str, where: dict[str, Any], order: str) -> list[R]:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        out = []
        for d in self._select(table, where, order):
            kw = {k: v for k, v in d.items() if k in names}
            for k, v in list(kw.items()):
                if v is None and k in ("client_stages", "metrics"):
                    kw[k] = {}
            out.append(cls(**kw))
        return out

    def runs(self) -> list[dict[str, Any]]:
        return self._select("runs", {}, "started_at, run_id")

    def schedule(self, run_id: str) -> dict[str, Any] | None:
        rows = self._select("runs", {"run_id": run_id}, "run_id")
        return rows[0]["schedule"] if rows else None

    def manifests(self, run_id: str | None = None) -> dict[str, Any]:
        return {
            r["arm"]: r["manifest"] for r in self._select("manifests", {"run_id": run_id}, "arm")
        }

    def requests(
        self, run_id: str | None = None, arm: str | None = None, phase: str | None = None
    ) -> list[RequestRecord]:
        return self._records(
            RequestRecord,
            "requests",
            {"run_id": run_id, "arm": arm, "phase": phase},
            "arm, scheduled_t, request_id",
        )

    def chunks(
        self, run_id: str | None = None, arm: str | None = None, request_id: str | None = None
    ) -> list[ChunkTiming]:
        return self._records(
            ChunkTiming,
            "chunks",
            {"run_id": run_id, "arm": arm, "request_id": request_id},
            "arm, request_id, t",
        )

    def rounds(
        self, run_id: str | None = None, arm: str | None = None, request_id: str | None = None
    ) -> list[RoundRecord]:
        return self._records(
            RoundRecord,
            "rounds",
            {"run_id": run_id, "arm": arm, "request_id": request_id},
            "arm, request_id, round_index",
        )

    def prefills(self, run_id: str | None = None, arm: str | None = None) -> list[PrefillRecord]:
        return self._records(
            PrefillRecord, "prefills", {"run_id": run_id, "arm": arm}, "arm, t_start, request_id"
        )

    def snapshots(
        self, run_id: str | None = None, arm: str | None = None, phase: str | None = None
    ) -> list[MetricSnapshot]:
        return self._records(
            MetricSnapshot, "snapshots", {"run_id": run_id, "arm": arm, "phase": phase}, "t, label"
        )

    def quality(self, run_id: str | None = None, arm: str | None = None) -> list[dict[str, Any]]:
        return [r["data"] for r in self._select("quality", {"run_id": run_id, "arm": arm}, "t")]

    def compat(self, run_id: str | None = None, arm: str | None = None) -> list[dict[str, Any]]:
        return [r["data"] for r in self._select("compat", {"run_id": run_id, "arm": arm}, "t")]

    def drills(self, run_id: str | None = None, arm: str | None = None) -> list[dict[str, Any]]:
        return [r["data"] for r in self._select("drills", {"run_id": run_id, "arm": arm}, "t")]

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        if self._writer is not None:
            self.flush()
        out = {}
        with self._lock:
            for t in sorted(self._cols):
                row = self.con.execute(f"SELECT count(*) FROM {_q(t)}").fetchone()
                out[t] = int(row[0]) if row else 0
        return out

    # -- export ------------------------------------------------------------------------
    def export_parquet(self, out_dir: str | Path) -> list[Path]:
        """One Parquet file per table in ``out_dir`` (created); returns the paths."""
        if self._writer is not None:
            self.flush()
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        with self._lock:
            for table in sorted(self._cols):
                p = out / f"{table}.parquet"
                target = str(p).replace("'", "''")
                self.con.execute(f"COPY (SELECT * FROM {_q(table)}) TO '{target}' (FORMAT PARQUET)")
                paths.append(p)
        return paths
