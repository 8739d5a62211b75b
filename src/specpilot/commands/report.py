"""``specpilot report PILOT.duckdb``: analyse a pilot file and write its report.

Writes ``report.html`` (self-contained), ``report.md``, ``report.json`` (every figure; schema in
``specpilot/report/report.schema.json``), one ``rollback-<arm>.rules.yml`` per candidate and the
rollout to deploy (``rollout/``: ``report.rollout``) into ``--out`` (default: next to the pilot
file, ``<name>-report/``), then prints the verdicts.
The analysis settings come from the pilot config's ``analysis:`` section, overridden by
``--config FILE.yaml`` (an ``AnalysisConfig``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specpilot.errors import ConfigError
from specpilot.report.fmt import no_verdict_reason


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="analyse a pilot file: verdict, HTML/Markdown/JSON report")
    p.add_argument("pilot", help="the pilot's DuckDB file")
    p.add_argument("--out", help="output directory (default: <pilot>-report next to the file)")
    p.add_argument("--config", help="YAML AnalysisConfig (thresholds, bootstrap, cost inputs)")
    p.add_argument("--no-plots", action="store_true", help="skip the plots (no matplotlib needed)")
    p.set_defaults(func=run)


def analysis_config(pilot_config: dict[str, Any], path: str | None) -> Any:
    """The pilot's ``analysis:`` section, then the file's keys on top; errors name the field."""
    import yaml
    from pydantic import ValidationError

    from specpilot.analysis.config import AnalysisConfig

    merged = dict(pilot_config.get("analysis") or {})
    if path:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of AnalysisConfig fields")
        merged.update(loaded)
    try:
        return AnalysisConfig.model_validate(merged)
    except ValidationError as exc:
        where = path or "the pilot config's analysis section"
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{where}: {fields}") from None


def read(path: Path) -> Any:
    """The pilot's records through the store's typed reader (big tables as numpy columns)."""
    from specpilot.store import read_pilot

    return read_pilot(path, columns=True)


def run(args: argparse.Namespace) -> int:
    from specpilot.report import build_report
    from specpilot.simulate.section import pilot_simulation

    path = Path(args.pilot)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such pilot file")
    data = read(path)
    cfg = analysis_config(data.pilot.config or {}, args.config)
    rep = build_report(data, cfg, plots=not args.no_plots, simulation=pilot_simulation)
    out = Path(args.out) if args.out else path.with_name(path.stem + "-report")
    paths = rep.write(out)
    for v in rep.document["verdicts"]:
        flag = " [PILOT_HYPOTHESIS]" if v["pilot_hypothesis"] else ""
        print(f"{v['verdict']}{flag}: {v['candidate_arm']} vs {v['baseline_arm']}: {v['summary']}")
    if not rep.document["verdicts"]:
        print("no verdict: " + no_verdict_reason(rep.document))
    for p in paths:
        print(f"wrote {p}")
    return 0
