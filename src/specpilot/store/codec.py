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


def _dumps_std(v: Any) -> str:
    try:
        return json.dumps(v, ensure_ascii=False, default=_plain, allow_nan=False)
    except ValueError:  # a NaN somewhere inside: JSON has none, store null
        return json.dumps(_finite(json.loads(json.dumps(v, default=_plain))), ensure_ascii=False)


try:  # 4x faster JSON both ways (reading 1M requests' spec is seconds with the stdlib)
    import orjson

    _OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS

    def _dumps_fast(v: Any) -> str:  # NaN and infinities become null, as in _dumps_std
        return orjson.dumps(v, default=_plain, option=_OPTS).decode()

    _loads: Callable[[Any], Any] = orjson.loads
    _dumps: Callable[[Any], str] = _dumps_fast
except ImportError:  # pragma: no cover - orjson is a dependency; the stdlib still works
    _loads = json.loads
    _dumps = _dumps_std


def dumps(v: Any) -> str | None:
    return None if v is None else _dumps(v)


def object_array(vals: Sequence[Any]) -> np.ndarray:
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
        return {name: object_array(vals)}, f"{col}::VARCHAR"
    text = object_array([dumps(v) for v in vals])
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
        con.execute(
            f"{verb} INTO {table.name} ({cols}) SELECT {', '.join(exprs.values())}{src}", params
        )
    finally:
        con.unregister(view)
    return n


# -- reading ----------------------------------------------------------------------------------
def _plain_list(v: Any) -> Any:
    return v.tolist() if isinstance(v, np.ndarray) else v


def _json(v: Any) -> Any:
    if v is None or not isinstance(v, str):
        return v
    if v == "{}":  # the common empty values, without the parser
        return {}
    if v == "[]":
        return []
    return _loads(v)


def _struct_decoder(cls: type) -> Callable[[Any], Any]:
    hints = typing.get_type_hints(cls)
    inner = {n: _decoder(t, hints[n]) for n, t in record_columns(cls).items()}
    defaults = _defaults(cls)

    def decode(v: Any) -> Any:
        if v is None:
            return None
        kw = {}  # (a None-safe decoder, as every decoder here)
        for k, x in v.items():
            if k in inner:
                dec = inner[k]
                x = _plain_list(x)
                if x is not None or k not in defaults:
                    kw[k] = dec(x) if dec is not None and x is not None else x
        return cls(**kw)

    return decode


def _decoder(sqltype: str, hint: Any) -> Callable[[Any], Any] | None:
    if sqltype == "JSON":
        return _json
    if sqltype.endswith("[]"):
        return _plain_list
    if sqltype.startswith("STRUCT("):
        from specpilot.store.schema import strip_optional

        return _struct_decoder(strip_optional(hint))
    return None


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    """Fields with a default: a NULL there (an older file, a bulk insert) reads as the default.
    Values are factories (called once per row, so no two records share a dict)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = functools.partial(lambda d: d, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory
    return out


@functools.cache
def _optional(cls: type) -> frozenset[str]:
    from specpilot.store.schema import strip_optional

    hints = typing.get_type_hints(cls)
    return frozenset(n for n, t in hints.items() if strip_optional(t) is not t)


def from_columns(cls: type, cols: Mapping[str, Any], n: int) -> list[Any]:
    """Columns (numpy arrays from ``fetchnumpy``, or lists) -> ``n`` records, built column by
    column (no Python work per row beyond the constructor). NULL in a field that is not
    optional and has a default reads as the default; a missing column (an older file) too."""
    hints = typing.get_type_hints(cls)
    types = record_columns(cls)
    defaults = _defaults(cls)
    columns: list[list[Any]] = []
    for f in dataclasses.fields(cls):
        name = f.name
        if name not in cols:
            if name not in defaults:
                raise ValueError(f"{cls.__name__}.{name}: no column and no default")
            columns.append([defaults[name]() for _ in range(n)])
            continue
        raw = cols[name]
        vals = raw.tolist() if isinstance(raw, np.ndarray) else list(raw)
        dec = _decoder(types[name], hints[name])
        if dec is not None:  # decoders pass None through
            vals = list(map(dec, vals))
        if name in defaults and name not in _optional(cls) and None in vals:
            make = defaults[name]
            vals = [make() if v is None else v for v in vals]
        columns.append(vals)
    return list(itertools.starmap(cls, zip(*columns, strict=True))) if columns else []


def to_records(cls: type, names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Rows of the columns ``names`` -> records (see ``from_columns``); other columns dropped."""
    cols = {n: [r[i] for r in rows] for i, n in enumerate(names) if n in record_columns(cls)}
    return from_columns(cls, cols, len(rows))


def fetch_records(cls: type, cur: duckdb.DuckDBPyConnection) -> list[Any]:
    """An executed query's result -> records, through numpy columns."""
    return records_of(cls, cur.fetchnumpy())


def records_of(cls: type, cols: Mapping[str, Any]) -> list[Any]:
    """``fetchnumpy`` columns -> records (columns the record lacks are dropped)."""
    n = len(next(iter(cols.values()))) if cols else 0
    return from_columns(cls, {k: v for k, v in cols.items() if k in record_columns(cls)}, n)


def select_sql(
    con: duckdb.DuckDBPyConnection, table: Table, where: Mapping[str, Any] | None = None
) -> tuple[str, list[Any]]:
    """The typed read of ``table`` (``where``: column equals value, None values ignored)."""
    have = existing_columns(con, table.name)
    names = [c for c in record_columns(table.record) if c in have]
    conds = [(k, v) for k, v in (where or {}).items() if v is not None]
    sql = f"SELECT {', '.join(f'{chr(34)}{c}{chr(34)}' for c in names)} FROM {table.name}"
    if conds:
        sql += " WHERE " + " AND ".join(f'"{k}" = ?' for k, _ in conds)
    if table.order:
        sql += f" ORDER BY {table.order}"
    return sql, [v for _, v in conds]


def read(
    con: duckdb.DuckDBPyConnection,
    table: Table,
    where: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Typed records of ``table`` (``where``: column equals value, None values ignored)."""
    sql, params = select_sql(con, table, where)
    return fetch_records(table.record, con.execute(sql, params))
