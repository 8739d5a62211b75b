"""Stage timings of real application tasks from traces: OTLP/JSON and a plain CSV (R4).

Pure parsing of text already read (``specpilot stages TRACE`` reads the file).

**OTLP/JSON** (the OpenTelemetry protocol's JSON encoding: one ``{"resourceSpans": ...}``
object, or one per line as the OTLP file exporter writes). One trace is one task: its root
span's duration is the task time. Spans map to stages by a small ``StageMap`` (span-name globs
and attribute values, first rule wins); where mapped spans nest or overlap, each instant goes
to the deepest mapped span covering it, and root time no mapped span covers is ``other``. An LLM
call span is split at its first-token event (or attribute) into ``prefill`` and ``decode``;
without one it counts whole as decode and the table says the decode share is an upper bound.

**CSV**, either long (``task_id,stage,duration_s[,task_group,input_tokens,output_tokens]``) or
wide (``task_id[,task_group],retrieval_s,prefill_s,decode_s,...[,input_tokens,output_tokens]``).

    >>> st = parse_csv("task_id,task_group,retrieval_s,decode_s\\n1,rag,7,3\\n")
    >>> st.stages["retrieval"].tolist(), st.stages["decode"].tolist()
    ([7.0], [3.0])
"""

from __future__ import annotations

import csv
import fnmatch
import io
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from specpilot.analysis.service.e2e import StageTable
from specpilot.errors import InputFileError


class TraceError(InputFileError):
    """A trace that cannot be read; the message names the line or field and the fix."""


class StageRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    names: list[str] = Field(default_factory=list, description="span-name globs, case-insensitive")
    attributes: dict[str, list[str]] = Field(default_factory=dict)


def _rules() -> dict[str, StageRule]:
    op = "gen_ai.operation.name"
    return {
        "queue": StageRule(names=["*queue*"]),
        "prefill": StageRule(names=["*prefill*"]),
        "decode": StageRule(names=["*decode*"]),
        "retrieval": StageRule(
            names=["*retriev*", "*search*", "*embed*", "*rerank*", "*vector*"],
            attributes={op: ["embeddings"]},
        ),
        "tools": StageRule(names=["*tool*", "*function*"], attributes={op: ["execute_tool"]}),
        "llm": StageRule(
            names=["chat*", "*llm*", "*completion*", "*generate*"],
            attributes={op: ["chat", "text_completion", "generate_content"]},
        ),
    }


class StageMap(BaseModel):
    """Span -> stage rules (``stages`` in order; ``llm`` is split at the first token)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    stages: dict[str, StageRule] = Field(default_factory=_rules)
    group_attributes: list[str] = Field(
        default_factory=lambda: ["task.group", "specpilot.task_group", "gen_ai.agent.name"]
    )
    first_token_events: list[str] = Field(
        default_factory=lambda: ["first_token", "gen_ai.first_token", "first token"]
    )
    first_token_attributes: list[str] = Field(
        default_factory=lambda: ["gen_ai.server.time_to_first_token", "llm.time_to_first_token"]
    )
    input_tokens_attribute: str = "gen_ai.usage.input_tokens"
    output_tokens_attribute: str = "gen_ai.usage.output_tokens"


@dataclass
class _Span:
    span_id: str
    parent: str
    name: str
    start: int  # ns
    end: int
    attrs: dict[str, Any]
    events: list[tuple[str, int]]


def _value(v: dict[str, Any]) -> Any:
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return None


def _spans(doc: dict[str, Any]) -> Iterable[tuple[str, _Span]]:
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])):
            for s in ss.get("spans", []):
                try:
                    span = _Span(
                        s["spanId"],
                        s.get("parentSpanId") or "",
                        s.get("name", ""),
                        int(s["startTimeUnixNano"]),
                        int(s["endTimeUnixNano"]),
                        {a["key"]: _value(a.get("value", {})) for a in s.get("attributes", [])},
                        [(e.get("name", ""), int(e["timeUnixNano"])) for e in s.get("events", [])],
                    )
                except (KeyError, ValueError) as exc:
                    raise TraceError(
                        f"span {s.get('name', '?')!r}: missing or bad field {exc}; OTLP/JSON spans need "
                        "spanId, startTimeUnixNano and endTimeUnixNano"
                    ) from None
                yield s["traceId"], span


def _docs(text: str) -> list[dict[str, Any]]:
    text = text.strip()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    docs = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                docs.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TraceError(f"line {i}: not JSON ({exc.msg}); expected OTLP/JSON") from None
    return docs


def _stage_of(span: _Span, smap: StageMap) -> str | None:
    name = span.name.lower()
    for stage, rule in smap.stages.items():
        if any(fnmatch.fnmatchcase(name, g.lower()) for g in rule.names):
            return stage
        if any(str(span.attrs.get(k)) in vals for k, vals in rule.attributes.items()):
            return stage
    return None


def _first_token(span: _Span, smap: StageMap) -> int | None:
    for name, t in span.events:
        if name in smap.first_token_events:
            return t
    for a in smap.first_token_attributes:
        if isinstance(span.attrs.get(a), int | float):
            return span.start + int(float(span.attrs[a]) * 1e9)
    return None


def _task(spans: list[_Span], smap: StageMap) -> tuple[str, dict[str, float], float, float, bool]:
    ids = {s.span_id: s for s in spans}
    roots = [s for s in spans if s.parent not in ids]
    root = min(roots, key=lambda s: s.start)
    depth = {}
    for s in spans:
        d, p = 0, s
        while p.parent in ids and d < 100:
            d, p = d + 1, ids[p.parent]
        depth[s.span_id] = d
    pieces: list[tuple[int, int, int, str]] = []  # start, end, depth, stage
    undivided = False
    tokens = {"in": np.nan, "out": np.nan}
    for s in spans:
        stage = _stage_of(s, smap)
        if stage is None:
            continue
        if stage == "llm":
            ft = _first_token(s, smap)
            undivided |= ft is None
            ft = s.start if ft is None else min(max(ft, s.start), s.end)
            pieces += [
                (s.start, ft, depth[s.span_id], "prefill"),
                (ft, s.end, depth[s.span_id], "decode"),
            ]
            for key, attr in (
                ("in", smap.input_tokens_attribute),
                ("out", smap.output_tokens_attribute),
            ):
                if isinstance(s.attrs.get(attr), int | float):
                    tokens[key] = np.nansum([tokens[key], float(s.attrs[attr])])
        else:
            pieces.append((s.start, s.end, depth[s.span_id], stage))
    stages = _sweep(root.start, root.end, pieces)
    group = next((str(root.attrs[a]) for a in smap.group_attributes if a in root.attrs), root.name)
    return group, stages, tokens["in"], tokens["out"], undivided


def _sweep(t0: int, t1: int, pieces: list[tuple[int, int, int, str]]) -> dict[str, float]:
    """Seconds per stage over [t0, t1]: each instant to the deepest piece covering it."""
    cuts = sorted(
        {
            t0,
            t1,
            *(min(max(p[0], t0), t1) for p in pieces),
            *(min(max(p[1], t0), t1) for p in pieces),
        }
    )
    out: dict[str, float] = {}
    for a, b in itertools.pairwise(cuts):
        cover = [p for p in pieces if p[0] <= a and p[1] >= b and p[1] > p[0]]
        stage = max(cover, key=lambda p: p[2])[3] if cover else "other"
        out[stage] = out.get(stage, 0.0) + (b - a) / 1e9
    return out


def parse_otlp(text: str, smap: StageMap | None = None) -> StageTable:
    """One task per trace id (see the module docstring)."""
    smap = smap or StageMap()
    traces: dict[str, list[_Span]] = {}
    for doc in _docs(text):
        for tid, span in _spans(doc):
            traces.setdefault(tid, []).append(span)
    if not traces:
        raise TraceError(
            "no spans found: expected OTLP/JSON with resourceSpans[].scopeSpans[].spans[]"
        )
    rows = [_task(spans, smap) for spans in traces.values()]
    undivided = any(r[4] for r in rows)
    source = (
        "trace (LLM spans without a first-token mark: decode share is an upper bound)"
        if undivided
        else "trace"
    )
    return _table([(g, st, i, o) for g, st, i, o, _ in rows], source)


def _table(rows: list[tuple[str, dict[str, float], float, float]], source: str) -> StageTable:
    names = sorted({k for _, st, _, _ in rows for k in st})
    return StageTable(
        task_group=np.array([r[0] for r in rows], dtype=object),
        stages={k: np.array([r[1].get(k, 0.0) for r in rows]) for k in names},
        output_tokens=np.array([r[3] for r in rows], dtype=float),
        input_tokens=np.array([r[2] for r in rows], dtype=float),
        source=source,
    )


def _num(v: str | None, where: str) -> float:
    if v is None or v == "":
        return np.nan
    try:
        return float(v)
    except ValueError:
        raise TraceError(f"{where}: {v!r} is not a number") from None


def parse_csv(text: str) -> StageTable:
    """Long or wide CSV (see the module docstring)."""
    reader = csv.DictReader(io.StringIO(text))
    cols = reader.fieldnames or []
    if "task_id" not in cols:
        raise TraceError(f"CSV needs a task_id column; found {cols}")
    long = "stage" in cols and "duration_s" in cols
    stage_cols = [c for c in cols if c.endswith("_s") and c != "duration_s"]
    if not long and not stage_cols:
        raise TraceError("CSV needs stage,duration_s columns (long) or <stage>_s columns (wide)")
    tasks: dict[str, tuple[str, dict[str, float], float, float]] = {}
    for i, row in enumerate(reader, 2):
        tid = row["task_id"]
        g, st, tin, tout = tasks.get(tid, (row.get("task_group") or "all", {}, np.nan, np.nan))
        if long:
            stage = row["stage"]
            st[stage] = st.get(stage, 0.0) + _num(row["duration_s"], f"line {i} duration_s")
        else:
            for c in stage_cols:
                val = _num(row[c], f"line {i} {c}")
                if not np.isnan(val):
                    st[c[:-2]] = st.get(c[:-2], 0.0) + val
        tin = (
            _num(row.get("input_tokens"), f"line {i} input_tokens")
            if row.get("input_tokens")
            else tin
        )
        tout = (
            _num(row.get("output_tokens"), f"line {i} output_tokens")
            if row.get("output_tokens")
            else tout
        )
        tasks[tid] = (g, st, tin, tout)
    if not tasks:
        raise TraceError("CSV has no rows")
    return _table(list(tasks.values()), "trace (CSV)")
