"""``specpilot quality RUN.duckdb``: recompute every business check from the answers a pilot
stored, and the quality gate of each candidate arm against the baseline.

    specpilot quality pilot.duckdb                      # checks of the pilot's own workload
    specpilot quality pilot.duckdb --workload mine.yaml --baseline baseline --json

The store's typed reader (``specpilot.store.read_pilot``) supplies the records; with
``--write`` the recomputed QualityRecords are stored back (``Store.add_quality``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quality", help="recompute the quality checks and gates of a pilot file")
    p.add_argument("store", help="the pilot's .duckdb file")
    p.add_argument(
        "--workload", default=None, help="workload YAML whose checks to use (default: the pilot's)"
    )
    p.add_argument(
        "--baseline", default=None, help="baseline arm (default: the arm with role baseline)"
    )
    p.add_argument("--isolation", default="auto", choices=("auto", "bwrap", "unshare", "rlimits"))
    p.add_argument("--json", action="store_true", help="print the records and verdicts as JSON")
    p.add_argument(
        "--write", action="store_true", help="store the recomputed QualityRecords in the file"
    )
    p.set_defaults(func=run)


def _read(path: str) -> Any:
    if not Path(path).is_file():
        raise FileNotFoundError(f"pilot file not found: {path}")
    from specpilot.store import read_pilot

    return read_pilot(path)


def run(args: argparse.Namespace) -> int:
    from specpilot.analysis.verdicts.quality import reports_target_logprobs
    from specpilot.quality.config import QualityConfig
    from specpilot.quality.recheck import recheck, resolve_groups
    from specpilot.quality.summary import gate
    from specpilot.workload.config import load_workload

    data = _read(args.store)
    cfg_dict = data.pilot.config or {}
    qcfg = QualityConfig.model_validate(cfg_dict.get("quality") or {})
    if args.workload:
        groups = resolve_groups(load_workload(args.workload), Path(args.workload).parent)
    else:
        groups = resolve_groups(cfg_dict.get("workload"), Path(args.store).parent)
    records = recheck(data, groups, qcfg.sandbox.limits(), args.isolation)
    data.quality = records
    baseline = args.baseline or next((a.arm for a in data.arms if a.role == "baseline"), None)
    arms = list(dict.fromkeys(a.arm for a in data.arms)) or sorted({r.arm for r in records})
    verdicts = []
    if baseline is not None:
        for arm in arms:
            if arm != baseline:
                verdicts.append(
                    gate(
                        records,
                        data.outputs,
                        data.compat,
                        baseline_arm=baseline,
                        candidate_arm=arm,
                        cfg=qcfg,
                        target_logprobs=reports_target_logprobs(data, arm),
                    )
                )
    if args.write:
        from specpilot.store import Store

        with Store(args.store) as st:
            st.add_quality(records)
    if args.json:
        out = {
            "quality": [r.to_dict() for r in records],
            "verdicts": [_verdict_dict(v) for v in verdicts],
        }
        json.dump(out, sys.stdout, indent=2, ensure_ascii=False, default=str)
        print()
    else:
        print(report(records, verdicts))
    return 0 if all(v.passed for v in verdicts) else 1


def _verdict_dict(v: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(v)


def report(records: list[Any], verdicts: list[Any]) -> str:
    from specpilot.quality.sampled import pass_rates

    lines = ["arm           group          answers  key pass  95% CI"]
    for pr in pass_rates(records):
        rate = "-" if pr.rate is None else f"{pr.rate:.2f}"
        lines.append(
            f"{pr.arm:<13} {pr.task_group:<14} {pr.n:>7}  {rate:>8}  [{pr.ci[0]:.2f}, {pr.ci[1]:.2f}]"
        )
        for reason, n in list(pr.reasons.items())[:3]:
            lines.append(f"{'':<29}{n:>4} x {reason}")
    for v in verdicts:
        lines.append("")
        lines.append(
            f"gate {v.candidate_arm} vs {v.baseline_arm}: {'PASS' if v.passed else 'FAIL'}"
        )
        lines += [f"  - {r}" for r in v.reasons]
        lines += [f"  note: {n}" for n in v.notes]
    return "\n".join(lines)
