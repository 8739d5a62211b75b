"""``specpilot export RUN.duckdb --parquet DIR``: one Parquet file per table of a run store."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a run store (DuckDB) to Parquet")
    p.add_argument("store", help="the run's .duckdb file")
    p.add_argument("--parquet", required=True, metavar="DIR", help="output directory (created)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specpilot.store import Store

    with Store(args.store, read_only=True) as st:
        counts = st.counts()
        paths = st.export_parquet(args.parquet)
    for p in paths:
        print(f"{p}  ({counts.get(p.stem, 0)} rows)")
    return 0
