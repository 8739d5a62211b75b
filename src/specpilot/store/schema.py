"""The pilot file's tables, derived from the record dataclasses: one typed column per field.

Types follow the annotations: ``str`` VARCHAR, ``int`` BIGINT, ``float`` DOUBLE, ``bool``
BOOLEAN, ``list[str|int|float]`` a list of those, a nested record (``HardwareFacts``,
``StrategySpec``, ``ResourceBudget``) a STRUCT of its fields, anything free-form (dicts,
``Any``) JSON. No column is named after a reserved SQL keyword (``task_group``, ``check_name``).

Keys: ``pilots`` (pilot_id), ``arms`` (run_id), ``phases`` (run_id, arm, phase) and
``requests`` (run_id, arm, request_id) are PRIMARY KEYs: writing a row again replaces it.
``chunks`` (run_id, arm, request_id, index), ``rounds`` (..., round_index) and ``prefills``
(run_id, arm, request_id) are kept unique by the writer, which replaces a request's children
when the request is written again; an index on 50M chunks would cost gigabytes of memory and
most of the write rate. ``chunks`` also has ``arm`` (from its request) and ``gap_s``, the
time since the previous chunk of the same request (NULL for the first), computed on write. The
other tables are append-only (``Store.delete`` clears a selection).

Versions: ``SCHEMA_VERSION`` 2 is the pilot file (one pilot per file). A version-1 file (the
run store: tables ``runs``/``manifests``, several runs per file, untyped quality tables) is
refused with a message naming its version and what to run: migrating it would have to invent
arm roles, phases and typed quality records it never held. A field added to a record later
becomes a column when a file is opened for writing (noted in ``schema_version``).

    >>> TABLES["requests"].columns["client_stages"], TABLES["arms"].columns["strategy"][:7]
    ('JSON', 'STRUCT(')
    >>> TABLES["chunks"].columns["arm"], TABLES["requests"].key
    ('VARCHAR', ('run_id', 'arm', 'request_id'))
"""

from __future__ import annotations

import dataclasses
import functools
import time
import types
import typing
from dataclasses import dataclass
from typing import Any

import duckdb

from specpilot import __version__
from specpilot import records as R
from specpilot.errors import InputFileError

SCHEMA_VERSION = 2
_SCALARS = {str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN"}


class PilotFileError(InputFileError):
    """A file that is not a pilot file this specpilot can use; the message says what to do."""


def strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else Any
    return tp


def sql_type(tp: Any) -> str:
    """The DuckDB type of a resolved annotation (see the module docstring)."""
    tp = strip_optional(tp)
    if tp in _SCALARS:
        return _SCALARS[tp]
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        fields = ", ".join(f"{n} {t}" for n, t in record_columns(tp).items())
        return f"STRUCT({fields})"
    if typing.get_origin(tp) is list:
        (arg,) = typing.get_args(tp) or (Any,)
        if arg in _SCALARS:
            return f"{_SCALARS[arg]}[]"
    return "JSON"


@functools.cache
def record_columns(cls: type) -> dict[str, str]:
    """Field name -> DuckDB type, in field order."""
    hints = typing.get_type_hints(cls)
    return {f.name: sql_type(hints[f.name]) for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class Table:
    name: str
    record: type
    key: tuple[str, ...] = ()  # the logical key (see the module docstring)
    primary_key: bool = False  # enforced by DuckDB
    extra: tuple[tuple[str, str], ...] = ()  # columns the record does not have
    order: str = ""  # ORDER BY of typed reads

    @functools.cached_property
    def columns(self) -> dict[str, str]:
        return {**record_columns(self.record), **dict(self.extra)}

    def create_sql(self) -> str:
        body = ", ".join(f'"{c}" {t}' for c, t in self.columns.items())
        if self.primary_key:
            body += f", PRIMARY KEY ({', '.join(self.key)})"
        return f"CREATE TABLE {self.name} ({body})"


_KEYS = ("run_id", "arm", "request_id")
TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table("pilots", R.PilotRecord, ("pilot_id",), True, order="created_unix"),
        Table("arms", R.ArmRecord, ("run_id",), True, order="run_order, repetition, run_id"),
        Table(
            "phases",
            R.PhaseRecord,
            ("run_id", "arm", "phase"),
            True,
            order="run_id, arm, planned_start_s, phase",
        ),
        Table(
            "requests",
            R.RequestRecord,
            _KEYS,
            True,
            order="run_id, arm, scheduled_t, request_id",
        ),
        Table(
            "chunks",
            R.ChunkTiming,
            (*_KEYS, "index"),
            extra=(("arm", "VARCHAR"), ("gap_s", "DOUBLE")),
            order='run_id, arm, request_id, "index"',
        ),
        Table(
            "rounds",
            R.RoundRecord,
            (*_KEYS, "round_index"),
            order="run_id, arm, request_id, round_index",
        ),
        Table("prefills", R.PrefillRecord, _KEYS, order="run_id, arm, request_id"),
        Table("snapshots", R.MetricSnapshot, order="run_id, arm, t, label"),
        Table(
            "quality",
            R.QualityRecord,
            order="run_id, arm, task_group, prompt_id, check_name, sample_index",
        ),
        Table("outputs", R.OutputRecord, order="run_id, arm, task_group, prompt_id, sample_index"),
        Table("consistency", R.ConsistencyRecord, order="task_group, prompt_id, candidate_arm"),
        Table("compat", R.CompatRecord, order="run_id, arm, feature"),
        Table("drills", R.DrillRecord, order="run_id, arm, requested_t"),
    )
}
VERSION_TABLE = (
    "CREATE TABLE schema_version (version INTEGER, specpilot_version VARCHAR, "
    "applied_unix DOUBLE, note VARCHAR)"
)


def table_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
    ).fetchall()
    return {r[0] for r in rows}


def existing_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    rows = con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
        "ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return [r[0] for r in rows]


def _note(con: duckdb.DuckDBPyConnection, note: str) -> None:
    con.execute(
        "INSERT INTO schema_version VALUES (?, ?, ?, ?)",
        [SCHEMA_VERSION, __version__, time.time(), note],
    )


def file_version(con: duckdb.DuckDBPyConnection, path: str) -> int | None:
    """The schema version of an opened file (None: empty); raises for a file of another kind."""
    tables = table_names(con)
    if not tables:
        return None
    if "schema_version" not in tables:
        raise PilotFileError(
            f"{path} is not a specpilot pilot file (it holds {', '.join(sorted(tables))} but no "
            "schema_version table): give a new file name, or the pilot file you meant"
        )
    row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def check_version(version: int, path: str) -> None:
    if version == 1:
        raise PilotFileError(
            f"{path} is a specpilot run store of schema version 1 (tables runs/manifests, several "
            f"runs per file); this specpilot reads pilot files of version {SCHEMA_VERSION} (one "
            "pilot per file, arms, phases, rounds). Run the load again into a new file "
            "(specpilot load ... --out NEW.duckdb); the old tables can still be exported as they "
            f"are: specpilot export {path} --parquet DIR"
        )
    if version > SCHEMA_VERSION:
        raise PilotFileError(
            f"{path} was written by a newer specpilot (schema version {version}; this one reads "
            f"{SCHEMA_VERSION}): upgrade specpilot to read it"
        )
    if version < 1:
        raise PilotFileError(f"{path}: schema_version holds no version: not a pilot file")


def prepare(con: duckdb.DuckDBPyConnection, path: str, writable: bool) -> None:
    """Create a new file's tables, or check an existing one (adding columns when writable)."""
    version = file_version(con, path)
    if version is None and not writable:
        raise PilotFileError(f"{path} is empty: not a pilot file")
    if version is not None:
        check_version(version, path)
    if not writable:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        if version is None:
            con.execute(VERSION_TABLE)
            _note(con, "created")
        have = table_names(con)
        added = []
        for table in TABLES.values():
            if table.name not in have:
                con.execute(table.create_sql())
                if version is not None:
                    added.append(table.name)
                continue
            present = set(existing_columns(con, table.name))
            for col, typ in table.columns.items():
                if col not in present:
                    con.execute(f'ALTER TABLE {table.name} ADD COLUMN "{col}" {typ}')
                    added.append(f"{table.name}.{col}")
        if added:
            _note(con, "added " + ", ".join(added))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
