"""Records <-> columns: bulk inserts through numpy arrays, typed records back from rows.

Inserts hand DuckDB one numpy array per column (``register`` + ``INSERT ... SELECT``), which
is ~10x faster than binding Python lists: numbers go as typed arrays (a null mask beside them
when some are None), text as object arrays, lists, nested records and JSON as JSON text cast
by DuckDB to the column's type.

    >>> import duckdb
    >>> from specpilot.records import RoundRecord
    >>> from specpilot.store.schema import TABLES
    >>> con = duckdb.connect()
    >>> _ = con.execute(TABLES["rounds"].create_sql())
    >>> insert(con, TABLES["rounds"], [RoundRecord("r", 0, 3, 2, 3, 0.01, 0.02, 0.001)])
    1
    >>> read(con, TABLES["rounds"])[0].committed
    3
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any

import duckdb
import numpy as np

from specpilot.store.schema import Table, existing_columns, record_columns

_NUMPY = {"BIGINT": np.int64, "DOUBLE": np.float64, "BOOLEAN": np.bool_}
_counter = itertools.count()


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.asdict(v)
    if isinstance(v, (set, frozenset)):
        return sorted(v)
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"not JSON serialisable: {type(v).__name__}")


def _finite(v: Any) -> Any:
    """JSON has no NaN/Infinity: such floats inside nested values are stored as null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def dumps(v: Any) -> str | None:
    if v is None:
        return None
    try:
        return json.dumps(v, ensure_ascii=False, default=_plain, allow_nan=False)
    except ValueError:  # a NaN somewhere inside
        return json.dumps(_finite(json.loads(json.dumps(v, default=_plain))), ensure_ascii=False)


def _objects(vals: Sequence[Any]) -> np.ndarray:
    arr = np.empty(len(vals), dtype=object)
    arr[:] = list(vals)
    return arr


def column(name: str, sqltype: str, vals: Sequence[Any]) -> tuple[dict[str, Any], str]:
    """One column as numpy arrays (by registered name) and its SELECT expression."""
    col = f'"{name}"'
    if sqltype in _NUMPY:
        if any(v is None for v in vals):
            mask = np.fromiter((v is None for v in vals), dtype=np.bool_, count=len(vals))
            filled: np.ndarray = np.array(
                [0 if v is None else v for v in vals], dtype=_NUMPY[sqltype]
            )
            expr = f'CASE WHEN "{name}__null" THEN NULL ELSE {col} END'
            return {name: filled, f"{name}__null": mask}, expr
        return {name: np.asarray(vals, dtype=_NUMPY[sqltype])}, col
    if sqltype == "VARCHAR":
        return {name: _objects(vals)}, f"{col}::VARCHAR"
    text = _objects([dumps(v) for v in vals])
    return {name: text}, f"{col}::JSON" + ("" if sqltype == "JSON" else f"::{sqltype}")


def _values(table: Table, records: Sequence[Any], names: list[str]) -> list[Sequence[Any]]:
    if not records:
        return [[] for _ in names]
    first = records[0]
    if isinstance(first, Mapping):
        return [[r.get(n) for r in records] for n in names]
    fields = [n for n in names if n in record_columns(table.record)]
    got = attrgetter(*fields)
    rows = [got(r) for r in records] if len(fields) > 1 else [(got(r),) for r in records]
    by_name = dict(zip(fields, zip(*rows, strict=True), strict=True))
    return [by_name.get(n) or [None] * len(records) for n in names]


def insert(
    con: duckdb.DuckDBPyConnection,
    table: Table,
    records: Sequence[Any],
    *,
    replace: bool = False,
    extra: Mapping[str, Sequence[Any]] | None = None,
) -> int:
    """Insert records (dataclasses or dicts); ``extra``: values of columns a record lacks."""
    if not records:
        return 0
    names = [c for c in table.columns if c not in (extra or {})]
    data: dict[str, Any] = {}
    exprs = {}
    for name, vals in zip(names, _values(table, records, names), strict=True):
        arrays, exprs[name] = column(name, table.columns[name], vals)
        data.update(arrays)
    for name, vals in (extra or {}).items():
        arrays, exprs[name] = column(name, table.columns[name], vals)
        data.update(arrays)
    return _insert_arrays(con, table, data, exprs, len(records), replace)


def insert_columns(con: duckdb.DuckDBPyConnection, table: Table, columns: Mapping[str, Any]) -> int:
    """Bulk insert from numpy arrays (or scalars, repeated): the fast path for big tables.

    Arrays are inserted as they are (numbers keep their dtype); a scalar is one value for
    every row; a column not given is NULL.
    """
    unknown = set(columns) - set(table.columns)
    if unknown:
        raise ValueError(f"{table.name}: no columns {sorted(unknown)}; have {list(table.columns)}")
    lengths = {len(v) for v in columns.values() if isinstance(v, (np.ndarray, list))}
    if len(lengths) != 1:
        raise ValueError(f"{table.name}: give arrays of one length (got lengths {lengths})")
    (n,) = lengths
    data: dict[str, Any] = {}
    exprs: dict[str, str] = {}
    for name, value in columns.items():
        typ = table.columns[name]
        if isinstance(value, np.ma.MaskedArray):  # masked entries are NULL
            data[name] = np.ma.getdata(value)
            data[f"{name}__null"] = np.ma.getmaskarray(value)
            exprs[name] = f'CASE WHEN "{name}__null" THEN NULL ELSE "{name}"::{typ} END'
        elif isinstance(value, (np.ndarray, list)):
            data[name] = np.asarray(value) if isinstance(value, list) else value
            exprs[name] = f'"{name}"::{typ}'
        else:
            exprs[name] = f"{duckdb_literal(value)}::{typ}"
    return _insert_arrays(con, table, data, exprs, n, False)


def duckdb_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(float(value)) if isinstance(value, float) else str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _insert_arrays(
    con: duckdb.DuckDBPyConnection,
    table: Table,
    data: dict[str, Any],
    exprs: Mapping[str, str],
    n: int,
    replace: bool,
) -> int:
    view = f"_insert_{next(_counter)}"
    con.register(view, data)
    try:
        cols = ", ".join(f'"{c}"' for c in exprs)
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        src = f" FROM {view}" if data else " FROM range(?)"
        params = [] if data else [n]
        con.execute(f"{verb} INTO {table.name} ({cols}) SELECT {', '.join(exprs.values())}{src}",
                    params)  # fmt: skip
    finally:
        con.unregister(view)
    return n


# -- reading ----------------------------------------------------------------------------------
def _struct_decoder(cls: type) -> Callable[[Any], Any]:
    inner = {n: _decoder(t, typing.get_type_hints(cls)[n]) for n, t in record_columns(cls).items()}

    def decode(v: Any) -> Any:
        if v is None:
            return None
        kw = {}
        for k, x in v.items():
            if k in inner:
                dec = inner[k]
                kw[k] = dec(x) if dec is not None and x is not None else x
        return cls(**{k: x for k, x in kw.items() if x is not None or k not in _defaults(cls)})

    return decode


def _decoder(sqltype: str, hint: Any) -> Callable[[Any], Any] | None:
    if sqltype == "JSON":
        return lambda v: json.loads(v) if isinstance(v, str) else v
    if sqltype.startswith("STRUCT("):
        from specpilot.store.schema import _strip_optional

        return _struct_decoder(_strip_optional(hint))
    return None


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    """Fields with a default: a NULL there (an older file, a bulk insert) reads as the default."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory
    return out


@functools.cache
def _optional(cls: type) -> frozenset[str]:
    from specpilot.store.schema import _strip_optional

    hints = typing.get_type_hints(cls)
    return frozenset(n for n, t in hints.items() if _strip_optional(t) is not t)


def to_records(cls: type, names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Rows of the columns ``names`` -> records; NULL in a non-optional field with a default
    reads as the default; columns the record lacks are dropped."""
    hints = typing.get_type_hints(cls)
    cols = record_columns(cls)
    keep = [i for i, n in enumerate(names) if n in cols]
    fields = [names[i] for i in keep]
    decoders = [_decoder(cols[n], hints[n]) for n in fields]
    defaults = _defaults(cls)
    fill = {
        n: defaults[n] for n in fields if n in defaults and n not in _optional(cls)
    }  # NULL -> default
    out = []
    for row in rows:
        kw = {}
        for i, n, dec in zip(keep, fields, decoders, strict=True):
            v = row[i]
            if v is None and n in fill:
                d = fill[n]
                v = d() if callable(d) else d
            elif dec is not None and v is not None:
                v = dec(v)
            kw[n] = v
        out.append(cls(**kw))
    return out


def read(
    con: duckdb.DuckDBPyConnection,
    table: Table,
    where: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Typed records of ``table`` (``where``: column equals value, None values ignored)."""
    have = existing_columns(con, table.name)
    names = [c for c in table.columns if c in have]
    conds = [(k, v) for k, v in (where or {}).items() if v is not None]
    sql = f"SELECT {', '.join(f'{chr(34)}{c}{chr(34)}' for c in names)} FROM {table.name}"
    if conds:
        sql += " WHERE " + " AND ".join(f'"{k}" = ?' for k, _ in conds)
    if table.order:
        sql += f" ORDER BY {table.order}"
    rows = con.execute(sql, [v for _, v in conds]).fetchall()
    return to_records(table.record, names, rows)
