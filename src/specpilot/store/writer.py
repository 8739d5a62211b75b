"""The store's one writer thread: every write is queued to it and committed in groups.

Each wake-up takes everything queued and commits it in one transaction (group commit), so a
busy run batches naturally and an idle one commits at once. ``submit`` returns a sequence
number; ``wait(seq)`` blocks until that write is durable. A finished request from the load
generator (``sink``) is queued without waiting: ``committed_requests`` counts those durable,
and a crash loses only what was queued after the last commit began.

A group that fails is split in halves and retried, down to the one bad write (raised to its
caller, or for a sink reported on the next ``sink``/``flush``): it never takes the others down
with it.

    >>> import duckdb, threading
    >>> from specpilot.store.schema import prepare
    >>> con = duckdb.connect(); prepare(con, ":memory:", writable=True)
    >>> w = Writer(con, threading.RLock())
    >>> w.wait(w.submit(Op("sql", "", ("CREATE TABLE t (x INTEGER)", []))))
    >>> w.close()
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from specpilot.records import ChunkTiming, PrefillRecord, RequestRecord, RoundRecord
from specpilot.store import codec
from specpilot.store.schema import TABLES

Key = tuple[str, str, str]


@dataclass
class Op:
    """One queued write. kind: insert | insert_extra | upsert | columns | sink | delete | sql."""

    kind: str
    table: str
    payload: Any
    seq: int = 0
    error: BaseException | None = None


@dataclass
class Finished:
    """A finished request with what came with it (one ``sink`` call)."""

    record: RequestRecord
    chunks: Sequence[ChunkTiming] = ()
    rounds: Sequence[RoundRecord] = ()
    prefill: PrefillRecord | None = None

    @property
    def key(self) -> Key:
        r = self.record
        return (r.run_id, r.arm, r.request_id)


@dataclass
class _State:
    queue: list[Op] = field(default_factory=list)
    seq: int = 0  # last submitted
    done: int = 0  # last applied (committed or failed)
    busy: bool = False
    closing: bool = False
    sink_error: BaseException | None = None


class Writer:
    """Owns all writes to one DuckDB connection (``lock`` is shared with readers)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, lock: threading.RLock) -> None:
        self.con = con
        self.lock = lock
        self.committed_requests = 0
        self._st = _State()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._request_keys: set[Key] | None = None  # loaded on the first rewrite check

    # -- the caller's side ---------------------------------------------------------------
    def submit(self, op: Op) -> int:
        with self._cv:
            if self._st.closing:
                raise ValueError("the store is closed")
            if op.kind == "sink" and self._st.sink_error is not None:
                err = self._st.sink_error
                raise RuntimeError(f"store writer failed: {err!r}") from err
            self._st.seq += 1
            op.seq = self._st.seq
            self._st.queue.append(op)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="store")
                self._thread.start()
            self._cv.notify_all()
            return op.seq

    def wait(self, seq: int, op: Op | None = None) -> None:
        """Block until write ``seq`` is applied; raise its error (or a sink's, on flush)."""
        with self._cv:
            while self._st.done < seq:
                self._cv.wait()
            if op is not None and op.error is not None:
                raise op.error
            if op is None and self._st.sink_error is not None:
                err = self._st.sink_error
                raise RuntimeError(f"store writer failed: {err!r}") from err

    def write(self, op: Op) -> None:
        """Submit and wait: a synchronous write."""
        self.wait(self.submit(op), op)

    def flush(self) -> None:
        with self._cv:
            seq = self._st.seq
        self.wait(seq)

    def close(self) -> None:
        with self._cv:
            self._st.closing = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # -- the writer thread ---------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._st.queue and not self._st.closing:
                    self._cv.wait()
                if not self._st.queue:
                    return
                batch, self._st.queue = self._st.queue, []
            committed = self._apply(batch)
            with self._cv:
                self.committed_requests += committed
                self._st.done = max(op.seq for op in batch)
                self._cv.notify_all()

    def _apply(self, batch: list[Op]) -> int:
        """Commit ``batch`` in one transaction; if that fails, each half on its own (so one bad
        write costs a few transactions, and only that write fails)."""
        try:
            return self._transaction(batch)
        except Exception as exc:
            self._request_keys = None  # the rollback may have undone keys noted meanwhile
            if len(batch) > 1:
                mid = len(batch) // 2
                return self._apply(batch[:mid]) + self._apply(batch[mid:])
            op = batch[0]
            op.error = exc
            if op.kind == "sink":
                with self._cv:
                    self._st.sink_error = self._st.sink_error or exc
            return 0

    def _transaction(self, ops: list[Op]) -> int:
        with self.lock:
            self.con.execute("BEGIN TRANSACTION")
            try:
                n = 0
                i = 0
                while i < len(ops):
                    if ops[i].kind == "sink":  # consecutive sinks: one statement per table
                        j = i
                        while j < len(ops) and ops[j].kind == "sink":
                            j += 1
                        n += self._sinks([op.payload for op in ops[i:j]])
                        i = j
                        continue
                    self._one(ops[i])
                    i += 1
                self.con.execute("COMMIT")
                return n
            except BaseException:
                self.con.execute("ROLLBACK")
                raise

    def _one(self, op: Op) -> None:
        table = TABLES.get(op.table)
        if op.kind == "sql":
            sql, params = op.payload
            self.con.execute(sql, params)
        elif op.kind == "delete":
            assert table is not None
            where = {k: v for k, v in op.payload.items() if v is not None}
            cond = " AND ".join(f'"{k}" = ?' for k in where) or "TRUE"
            self.con.execute(f"DELETE FROM {table.name} WHERE {cond}", list(where.values()))
            if table.name == "requests":
                self._request_keys = None
        elif op.kind == "insert_extra":
            assert table is not None
            records, extra = op.payload
            codec.insert(self.con, table, records, extra=extra)
        elif op.kind == "columns":
            assert table is not None
            codec.insert_columns(self.con, table, op.payload)
            if table.name == "requests":
                self._request_keys = None
        else:
            assert table is not None
            records = op.payload
            if op.kind == "upsert":
                records = _last_per_key(records, table.key)
            codec.insert(self.con, table, records, replace=op.kind == "upsert")
            if table.name == "requests":
                self._known_keys().update(_key_of(r) for r in records)

    def _known_keys(self) -> set[Key]:
        if self._request_keys is None:
            rows = self.con.execute("SELECT run_id, arm, request_id FROM requests").fetchall()
            self._request_keys = {(a, b, c) for a, b, c in rows}
        return self._request_keys

    def _sinks(self, items: list[Finished]) -> int:
        """Finished requests: a request written again replaces its chunks, rounds, prefill."""
        last = {f.key: f for f in items}
        known = self._known_keys()
        again = [k for k in last if k in known]
        if again:
            self._delete_children(again)
        recs = [f.record for f in last.values()]
        codec.insert(self.con, TABLES["requests"], recs, replace=True)
        known.update(last)
        chunks = [c for f in last.values() for c in f.chunks]
        arms = [f.record.arm for f in last.values() for _ in f.chunks]
        runs = [c.run_id or f.record.run_id for f in last.values() for c in f.chunks]
        gaps = [g for f in last.values() for g in _gaps(f.chunks)]
        extra: dict[str, list[Any]] = {"arm": arms, "run_id": runs, "gap_s": gaps}
        codec.insert(self.con, TABLES["chunks"], chunks, extra=extra)
        rounds = [_labelled(r, f.record) for f in last.values() for r in f.rounds]
        codec.insert(self.con, TABLES["rounds"], rounds)
        prefills = [_labelled(f.prefill, f.record) for f in last.values() if f.prefill is not None]
        codec.insert(self.con, TABLES["prefills"], prefills)
        return len(items)  # sink calls now durable (a rewrite counts: it was confirmed too)

    def _delete_children(self, keys: list[Key]) -> None:
        view = "_rewritten_keys"
        cols = list(zip(*keys, strict=True))
        self.con.register(
            view, {n: codec.object_array(v) for n, v in zip(("r", "a", "q"), cols, strict=True)}
        )
        try:
            for table in ("chunks", "rounds", "prefills"):
                self.con.execute(
                    f"DELETE FROM {table} USING {view} k WHERE {table}.run_id = k.r "
                    f"AND {table}.arm = k.a AND {table}.request_id = k.q"
                )
        finally:
            self.con.unregister(view)


def _labelled(rec: Any, req: RequestRecord) -> Any:
    """A round or prefill with its request's ids where it has none of its own."""
    if rec.run_id and rec.arm and rec.phase:
        return rec
    import dataclasses

    return dataclasses.replace(
        rec, run_id=rec.run_id or req.run_id, arm=rec.arm or req.arm, phase=rec.phase or req.phase
    )


def _gaps(chunks: Sequence[ChunkTiming]) -> list[float | None]:
    """Seconds since the previous chunk of the request, in index order (None for the first)."""
    ordered = sorted(chunks, key=lambda c: c.index)
    gap = {c.index: c.t - p.t for p, c in itertools.pairwise(ordered)}
    return [gap.get(c.index) for c in chunks]


def _key_of(rec: Any) -> Key:
    get: Callable[[str], Any] = rec.get if isinstance(rec, dict) else lambda n: getattr(rec, n)
    return (get("run_id"), get("arm"), get("request_id"))


def _last_per_key(records: Sequence[Any], key: tuple[str, ...]) -> list[Any]:
    """Within one statement a key may appear once: the last write wins."""
    if not key:
        return list(records)
    out: dict[tuple[Any, ...], Any] = {}
    for r in records:
        get = r.get if isinstance(r, dict) else (lambda n, r=r: getattr(r, n))
        out[tuple(get(k) for k in key)] = r
    return list(out.values())
