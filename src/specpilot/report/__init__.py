"""The report (R9): one self-contained HTML file, a Markdown summary and a JSON document with
every figure (JSON Schema: ``report/report.schema.json``), from a pilot's records.

    >>> from specpilot.records import PilotData, PilotRecord
    >>> r = build_report(PilotData(PilotRecord("p", "empty", {}, "", "0", 0.0)))
    >>> sorted(r.files())
    ['report.html', 'report.json', 'report.md']
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
        """File name -> text: the three formats and one rule file per candidate."""
        out = {
            "report.html": self.html,
            "report.md": self.markdown,
            "report.json": json.dumps(self.document, indent=1, allow_nan=False, default=str) + "\n",
        }
        for arm, text in self.document["rollback_rules"].items():
            out[f"rollback-{arm}.rules.yml"] = text
        return out

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write every file into ``out_dir`` (created); returns the paths."""
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, text in self.files().items():
            p = d / name
            p.write_text(text, encoding="utf-8")
            paths.append(p)
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
