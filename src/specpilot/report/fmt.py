"""Number and table formatting shared by the HTML and Markdown renderers.

>>> num(0.12345), pct(0.051), signed_pct(-0.125), mib(3 * 2**20), num(None)
('0.123', '5.1%', '-12.5%', '3.0 MiB', 'n/a')
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from html import escape
from typing import Any

import numpy as np

from specpilot.numbers import NA, pct, signed_pct  # noqa: F401  (the report's names)


def num(x: Any, digits: int = 3) -> str:
    if x is None:
        return NA
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"
    return str(x)


def ms(x: float | None) -> str:
    return NA if x is None else f"{x * 1000:.1f} ms"


def seconds(x: float | None) -> str:
    return NA if x is None else (f"{x:.3f} s" if x < 10 else f"{x:.1f} s")


def mib(x: float | None) -> str:
    return NA if x is None else f"{x / 2**20:,.1f} MiB"


def interval(iv: dict[str, Any] | None, f: Any = signed_pct) -> str:
    """'+1.2% [-0.5%, +3.0%]' from an Interval dict."""
    if not iv or iv.get("estimate") is None:
        return NA
    return f"{f(iv['estimate'])} [{f(iv['low'])}, {f(iv['high'])}]"


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    """An HTML table; cells are escaped unless they are already markup (``Markup``)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{c if isinstance(c, Markup) else escape(str(c))}</td>" for c in r)
        + "</tr>"
        for r in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(c: Any) -> str:
        return str(c).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


class Markup(str):
    """A string that is already HTML (not escaped again by ``html_table``)."""


def clean(x: Any) -> Any:
    """JSON-safe: dataclasses and tuples as dicts/lists, numpy scalars as Python, NaN/inf as null."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        d = x.to_dict() if hasattr(x, "to_dict") else dataclasses.asdict(x)
        return clean(d)
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return [clean(v) for v in x.tolist()]
    if isinstance(x, np.generic):
        return clean(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def simulated_for(doc: dict[str, Any], v: dict[str, Any]) -> list[str]:
    """The simulation's lines for one verdict's pair (its crossover, or why there is none, and
    the k schedule with its check), each labelled simulated: the verdict block shows them
    beside the measured result, never in its place."""
    sim = doc.get("simulation") or {}
    pair = (v["baseline_arm"], v["candidate_arm"])
    out = [
        f"Simulated crossover: {x['text']}"
        for x in sim.get("crossovers", [])
        if (x["baseline_arm"], x["candidate_arm"]) == pair
    ]
    for k in sim.get("k_schedules", []):
        if (k.get("baseline_arm"), k["candidate_arm"]) == pair:
            label = "Simulated deployable setting" + (
                "" if k.get("validated") else " (not validated: no evidence)"
            )
            out.append(f"{label}: {k_schedule_line(k)}")
    return out


def k_schedule_line(k: dict[str, Any]) -> str:
    """One k schedule of the document as text: the ranges, vLLM's syntax, the step-by-step
    check (the report's simulation section and its verdict blocks say it the same way)."""
    check = (k.get("check") or {}).get("text", "not checked")
    return f"{k['text']}; vLLM --speculative-config '{k['vllm_speculative_config']}'; {check}"


def no_verdict_reason(doc: dict[str, Any]) -> str:
    """Why a report has no verdict, and how to get one; then the analysis's notes.

    >>> no_verdict_reason({"arms": [{"arm": "baseline", "strategy": {"kind": "none"}}],
    ...                    "notes": []})  # doctest: +ELLIPSIS
    'one arm (baseline): nothing to compare it with. ... --arm speculative)...'
    """
    names = list(dict.fromkeys(str(a.get("arm")) for a in doc.get("arms") or []))
    notes = [str(n) for n in doc.get("notes") or []]
    if len(names) == 1:
        why = (
            f"one arm ({names[0]}): nothing to compare it with. A verdict compares a baseline "
            "with a speculative arm: load the speculative server into the same file "
            "(specpilot load URL --workload W --out FILE --arm speculative), or run both with "
            "specpilot pilot"
        )
    elif not names:
        why = "the file holds no arm: run specpilot load or specpilot pilot into it first"
    elif not notes:
        why = (
            f"no arm of {', '.join(names)} runs a speculative strategy against a plain arm of "
            "its engine: add a speculative arm (role: speculative) to compare"
        )
    else:
        return "; ".join(notes)
    return "; ".join([why, *notes])
