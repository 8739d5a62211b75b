"""``specpilot export PILOT.duckdb --parquet DIR``: one Parquet file per table of a pilot file.

Any schema version is exported as it is (also a version-1 run store, which this specpilot
no longer reads): the way to keep the data of an old file.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a pilot file (DuckDB) to Parquet")
    p.add_argument("store", help="the pilot's .duckdb file")
    p.add_argument("--parquet", required=True, metavar="DIR", help="output directory (created)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specpilot.store import export_file

    for path, rows in export_file(args.store, args.parquet).items():
        print(f"{path}  ({rows} rows)")
    return 0
