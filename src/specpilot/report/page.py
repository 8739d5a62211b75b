"""One self-contained HTML file: inline CSS and SVG plots, no script, no URL; prints cleanly.

>>> from specpilot.analysis import analyze
>>> from specpilot.records import PilotData, PilotRecord
>>> from specpilot.report.document import to_document
>>> page = render_html(to_document(analyze(PilotData(PilotRecord("p", "empty", {}, "", "0", 0.0)))), {})
>>> 'id="verdict"' in page and "http" not in page
True
"""

from __future__ import annotations

from html import escape
from typing import Any

from specpilot.report import sections as s
from specpilot.report import sections_capacity as sc
from specpilot.report import sections_load as sl
from specpilot.report import sections_ops as so
from specpilot.report import sections_previous as sp

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans CJK SC","PingFang SC",
"Microsoft YaHei","Source Han Sans SC",sans-serif;margin:0 auto;max-width:1200px;
padding:1rem 1.5rem;color:#222;line-height:1.35}
h1{font-size:1.5rem;margin:.2rem 0}h2{border-bottom:2px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
h3{font-size:1rem;margin:1rem 0 .3rem}
table{border-collapse:collapse;font-size:.8rem;margin:.4rem 0;width:100%}
th,td{border:1px solid #ddd;padding:.2rem .4rem;text-align:left;vertical-align:top}th{background:#f4f4f4}
.verdict-block{border:3px solid #888;border-radius:6px;padding:.6rem 1rem;margin:.6rem 0}
.verdict-label{font-size:1.6rem;font-weight:700;margin:.1rem 0}
.verdict-ADOPT{border-color:#2ca02c}.verdict-ADOPT_IN_WINDOWS{border-color:#e6a000}.verdict-DO_NOT_ADOPT{border-color:#d62728}
.verdict-UNDECIDED{border-color:#1f77b4;border-style:dashed}
.hypothesis{background:#fff6d6;border:1px solid #e6c200;padding:.3rem .6rem;margin:.4rem 0}
.ok{color:#2ca02c;font-weight:600}.bad{color:#d62728;font-weight:600}
.st-pass{color:#2ca02c}.st-fail{color:#d62728;font-weight:700}.st-unsupported,.st-not_run{color:#888}
figure.plot{margin:1rem 0;page-break-inside:avoid;break-inside:avoid}figure.plot svg{max-width:100%;height:auto}
figcaption{font-size:.8rem;color:#444}pre{font-size:.75rem;overflow-x:auto;background:#f8f8f8;padding:.4rem}
.nodata{color:#888;font-style:italic}.cost-line{font-weight:600}
nav ol{margin:.3rem 0;padding:0;font-size:.8rem}nav li{display:inline;margin-right:.8rem}
dt{font-weight:600;margin-top:.3rem}dd{margin-left:1.5rem}
.first-page p.decision{border-left:10px solid #1f77b4;padding:.1rem .6rem;margin:.4rem 0}
.first-page p.decision-adopt{border-left-color:#2ca02c}.first-page p.decision-do_not_adopt{border-left-color:#d62728}
.first-page p.decision-no_difference{border-left-color:#888}.first-page p.checks{margin:.4rem 0;font-size:.9rem}
#verdict h2{margin-top:.8rem}#plot-forest svg{max-height:330px;width:auto}
abbr{text-decoration:underline dotted;cursor:help}
@media print{body{max-width:none;padding:0;font-size:10pt}nav{display:none}section{break-inside:auto}
h2{break-after:avoid}table{font-size:7.5pt}details{display:block}details>summary{display:none}}
"""

SECTIONS = (
    ("verdict", "Verdict", s.verdict),
    ("load-range", "Load range", s.load_range),
    ("hardware", "Hardware", s.hardware),
    ("arms", "Frozen configuration of every arm", so.arms),
    ("rounds", "Per-round advance and time breakdown", s.rounds),
    ("verify-cost", "Verify-cost curve", sl.verify_cost),
    ("quality", "Per-group quality and consistency", sl.quality),
    ("load", "Peak and burst behaviour", sl.load),
    ("end-to-end", "End to end", sl.end_to_end),
    ("capacity", "Capacity and crossover", sc.capacity),
    ("simulation", "Simulation (calibrated on this pilot)", sc.simulation),
    ("memory", "Memory", so.memory),
    ("cost", "Cost", so.cost),
    ("compatibility", "Compatibility matrix", so.compatibility),
    ("drills", "Rollback drills", so.drills),
    ("previous-run", sp.TITLE, sp.html),  # a rerun's cells beside the previous run's
    ("definitions", "Metric definitions", so.definitions),
)


def render_html(doc: dict[str, Any], svgs: dict[str, str | None]) -> str:
    """The page: title, contents, then every section in R9 order."""
    p = doc["pilot"]
    nav = "".join(f'<li><a href="#{sid}">{escape(title)}</a></li>' for sid, title, _ in SECTIONS)
    body = "".join(fn(doc, svgs) for _, _, fn in SECTIONS)
    title = f"specpilot report: {p['name']}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{escape(title)}</h1><p>pilot {escape(p['pilot_id'])}, status {escape(p['status'])}, "
        f"config sha256 {escape((p['config_sha256'] or '')[:16])}, {escape(doc['generated_by'])}</p></header>"
        f"<nav><ol>{nav}</ol></nav>{body}</body></html>"
    )
