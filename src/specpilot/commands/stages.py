"""``specpilot stages TRACE``: where real tasks spend their time, and which are worth a pilot.

TRACE is OpenTelemetry OTLP/JSON (spans mapped to stages by ``--map MAP.yaml``, a
``StageMap``: see :mod:`specpilot.analysis.service.traces`) or a CSV of stage timings. Prints, per
task group, the mean time per stage, the decode share, the Amdahl projection for an assumed
decode speed-up, and the recommendation: ``pilot`` (decode-dominated, long outputs),
``fix_first`` (another stage dominates) or ``marginal``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specpilot.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stages", help="stage decomposition of application traces (OTLP/JSON or CSV)"
    )
    p.add_argument("trace", help="OTLP/JSON (.json/.jsonl) or CSV (.csv) of task stage timings")
    p.add_argument("--format", choices=("auto", "otlp", "csv"), default="auto")
    p.add_argument("--map", dest="stage_map", help="YAML span -> stage mapping (StageMap fields)")
    p.add_argument(
        "--decode-speedup", type=float, default=2.0, help="decode speed-up assumed for Amdahl"
    )
    p.add_argument(
        "--min-decode-share",
        type=float,
        default=0.3,
        help="below this decode share a group is 'fix that first'",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml
    from pydantic import ValidationError

    from specpilot.analysis.service.e2e import recommend, stage_breakdown
    from specpilot.analysis.service.traces import StageMap, parse_csv, parse_otlp

    path = Path(args.trace)
    text = path.read_text(encoding="utf-8")
    fmt = args.format
    if fmt == "auto":
        fmt = "csv" if path.suffix.lower() == ".csv" else "otlp"
    smap = None
    if args.stage_map:
        try:
            smap = StageMap.model_validate(yaml.safe_load(Path(args.stage_map).read_text()) or {})
        except ValidationError as exc:
            fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"{args.stage_map}: {fields}") from None
    st = parse_csv(text) if fmt == "csv" else parse_otlp(text, smap)
    rows = stage_breakdown(st, args.decode_speedup)
    recs = recommend(rows, args.min_decode_share)
    if args.json:
        doc = {
            "source": st.source,
            "groups": [r.to_dict() for r in rows],
            "recommendations": [r.to_dict() for r in recs],
        }
        print(json.dumps(doc, indent=2))
        return 0
    _print(rows, recs, st.source, args.decode_speedup)
    return 0


def _print(rows: list, recs: list, source: str, s: float) -> None:
    stages = sorted({k for r in rows for k in r.mean_stage_s})
    print(f"source: {source}")
    head = f"{'group':<16}{'tasks':>6}" + "".join(f"{k[:10]:>11}" for k in stages)
    print(head + f"{'total_s':>9}{'decode%':>9}{f'x{s:g} dec':>10}")
    for r in rows:
        cells = "".join(f"{r.mean_stage_s.get(k, 0.0):>11.3f}" for k in stages)
        share = "-" if r.decode_share is None else f"{r.decode_share:.0%}"
        proj = "-" if r.projection is None else f"{r.projection.overall_speedup:.2f}x"
        print(f"{r.task_group:<16}{r.tasks:>6}{cells}{r.mean_total_s:>9.3f}{share:>9}{proj:>10}")
    print("stage columns: mean seconds per task; last column: whole-task speed-up (Amdahl)")
    for rec in recs:
        print(f"  {rec.task_group}: {rec.action} - {rec.reason}")
