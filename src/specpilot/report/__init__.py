"""The report (R9): one self-contained HTML file, a Markdown summary and a JSON document with
every figure (JSON Schema: ``report/report.schema.json``), from a pilot's records.

    >>> from specpilot.records import PilotData, PilotRecord
    >>> r = build_report(PilotData(PilotRecord("p", "empty", {}, "", "0", 0.0)))
    >>> sorted(r.files())
    ['report.html', 'report.json', 'report.md', 'rollout/README.md']
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specpilot.analysis.config import AnalysisConfig
from specpilot.records import PilotData

# (the analysed pilot's records, its compared (baseline, candidate) pairs) -> the simulator's
# section of the document
Simulation = Callable[[PilotData, Sequence[tuple[str, str]]], Mapping[str, Any]]


@dataclass(frozen=True)
class Report:
    document: dict[str, Any]
    html: str
    markdown: str

    def files(self) -> dict[str, str]:
        """File name -> text: the three formats, one rule file per candidate, and the rollout
        (``rollout/...``: ``report.rollout``)."""
        from specpilot.report.rollout import FOLDER, rollout_files

        out = {
            "report.html": self.html,
            "report.md": self.markdown,
            "report.json": json.dumps(self.document, indent=1, allow_nan=False, default=str) + "\n",
        }
        for arm, text in self.document["rollback_rules"].items():
            out[f"rollback-{arm}.rules.yml"] = text
        for name, text in rollout_files(self.document).items():
            out[f"{FOLDER}/{name}"] = text
        return out

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write every file into ``out_dir`` (created); returns the paths, the rollout folder
        as one. The rollout folder is emptied of its files first: a scope adopted by an
        earlier analysis of this pilot and not by this one must leave no file behind."""
        from specpilot.report.rollout import FOLDER

        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        folder = d / FOLDER
        if folder.is_dir():
            for old in folder.iterdir():
                if old.is_file() or old.is_symlink():
                    old.unlink()
        paths: list[Path] = []
        for name, text in self.files().items():
            p = d / name
            p.parent.mkdir(exist_ok=True)
            p.write_text(text, encoding="utf-8")
            if p.parent != folder:
                paths.append(p)
                continue
            if p.suffix == ".sh":
                p.chmod(0o755)  # a launch script
            if folder not in paths:
                paths.append(folder)
        return paths


def build_report(
    data: PilotData,
    cfg: AnalysisConfig | None = None,
    plots: bool = True,
    simulation: Simulation | None = None,
) -> Report:
    """Analyse the pilot and render the three formats (``plots=False`` skips matplotlib).
    ``simulation``: what computes the simulator's section from the analysed data and the
    compared pairs (``simulate.section.pilot_simulation``; None: the report says it was not
    simulated). The report itself runs no simulation: it renders what it is given."""
    from specpilot.analysis.pilot import analyze
    from specpilot.report.document import to_document
    from specpilot.report.markdown import render_markdown
    from specpilot.report.page import render_html
    from specpilot.report.plots import render_all

    a = analyze(data, cfg)
    sim = simulation(a.data, list(a.plan.pairs)) if simulation is not None else None
    doc = to_document(a, sim)
    svgs = render_all(doc["figures"]) if plots else {}
    return Report(doc, render_html(doc, svgs), render_markdown(doc))


__all__ = ["Report", "Simulation", "build_report"]
