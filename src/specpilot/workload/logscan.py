"""The first pass over a request log and what it selects (:mod:`.requestlog` is the API).

The first pass reads every line once and keeps, per request, its time, its place in the file
(byte offsets, so the second pass reads back only what is kept) and its route or group value as
a small code: a few bytes a request, whatever the size of the bodies. The selection sorts the
times, spreads whole seconds, cuts the window, scales and thins to the rate cap, and maps the
window's routes to groups (the module docstring of :mod:`.requestlog` says how).

    >>> spread_seconds(np.array([5.0, 5.0, 5.0, 6.0])).tolist()
    [5.0, 5.333333333333333, 5.666666666666667, 6.0]
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specpilot.errors import ConfigError, InputFileError
from specpilot.workload.logshapes import (
    MISSING,
    Line,
    LiteLLMSpend,
    OpenAIBatch,
    Parsed,
    PlainJsonl,
    input_tokens_est,
    lookup,
)
from specpilot.workload.vllmlog import VllmLog

__all__ = [
    "Scan",
    "Selection",
    "group_names",
    "log_seconds",
    "make_reader",
    "read_lines",
    "scan_log",
    "select",
    "spread_seconds",
]


# -- the first pass: every request's time, place and route ---------------------------------


def make_reader(name: str, source: str, time_field: str | None) -> Any:
    """The reader of a shape: ``name`` and ``read(lines) -> Parsed | Skipped, ...``."""
    if name == "vllm_log":
        return VllmLog(source)
    kinds = {"openai_batch": OpenAIBatch, "litellm_spend": LiteLLMSpend, "jsonl": PlainJsonl}
    return kinds[name](source, time_field)


def read_lines(p: Path) -> Iterator[Line]:
    with p.open("rb") as f:
        offset = 0
        for n, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputFileError(
                    f"{p}:{n}: not UTF-8 text", fix="decompress a .gz or .zst log first"
                ) from None
            yield Line(n, offset, text.rstrip("\r\n"))
            offset += len(raw)


@dataclass
class Scan:
    """The first pass over a log: one slot per request, in file order."""

    t: array[float] = field(default_factory=lambda: array("d"))
    whole: array[int] = field(default_factory=lambda: array("b"))
    line: array[int] = field(default_factory=lambda: array("q"))
    offsets: array[int] = field(default_factory=lambda: array("q"))  # first line's byte offset
    second: array[int] = field(default_factory=lambda: array("q"))  # vllm_log's 2nd line, or -1
    code: array[int] = field(default_factory=lambda: array("i"))  # index into keys, -1: missing
    input_tokens: array[int] = field(default_factory=lambda: array("q"))
    output_tokens: array[int] = field(default_factory=lambda: array("q"))
    keys: dict[str, int] = field(default_factory=dict)  # route/group value -> code
    skipped: Counter[str] = field(default_factory=Counter)

    def add(self, r: Parsed, key: Any) -> None:
        self.t.append(r.t)
        self.whole.append(r.whole_second)
        self.line.append(r.lines[-1].number)
        self.offsets.append(r.lines[0].offset)
        self.second.append(r.lines[1].offset if len(r.lines) > 1 else -1)
        if key is MISSING or key is None:
            self.code.append(-1)
        else:
            self.code.append(self.keys.setdefault(_key_text(key), len(self.keys)))
        self.input_tokens.append(input_tokens_est(r.api, r.body, r.input_tokens))
        out = r.output_tokens
        if out is None:
            out = r.body.get("max_completion_tokens", r.body.get("max_tokens"))
        self.output_tokens.append(out if type(out) is int else 0)


def _key_text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def scan_log(p: Path, shape: Any, key_field: str | None) -> Scan:
    scan = Scan()
    for r in shape.read(read_lines(p)):
        if isinstance(r, Parsed):
            scan.add(r, lookup(r.fields, key_field) if key_field else None)
        else:
            scan.skipped[r.reason] += 1
    if not scan.t:
        hint = f" (skipped: {dict(scan.skipped)})" if scan.skipped else ""
        fix = "start vllm serve with --enable-log-requests" if shape.name == "vllm_log" else None
        raise InputFileError(f"{p}: no chat or completions request in the log{hint}", fix=fix)
    return scan


# -- selection: sort, window, scale, cap ---------------------------------------------------


def spread_seconds(ts: np.ndarray) -> np.ndarray:
    """Sorted whole seconds -> the k requests of each second at i/k s into it."""
    starts = np.r_[0, np.flatnonzero(np.diff(ts)) + 1]
    counts = np.diff(np.r_[starts, ts.size])
    rank = np.arange(ts.size) - np.repeat(starts, counts)
    return ts + rank / np.repeat(counts, counts)


def log_seconds(scan: Scan) -> tuple[np.ndarray, np.ndarray, bool]:
    """(order: request indices by time then line, their offsets from the first, spread?)."""
    t = np.frombuffer(scan.t, dtype=np.float64)
    order = np.lexsort((np.frombuffer(scan.line, dtype=np.int64), t))
    ts = t[order]
    spread = bool(np.frombuffer(scan.whole, dtype=np.int8).all())
    if spread:
        ts = spread_seconds(ts)
    return order, ts - ts[0], spread


@dataclass(frozen=True)
class Selection:
    index: np.ndarray  # request indices (into the scan), in replay order
    offset_s: np.ndarray  # their replay offsets
    duration_s: float
    in_window: np.ndarray  # request indices in the window, before the cap
    keep_fraction: float
    spread: bool  # whole-second times, spread over their seconds


def select(
    scan: Scan, window: tuple[float, float] | None, time_scale: float, rate_cap: float | None
) -> Selection:
    order, rel, spread = log_seconds(scan)
    if window is None:
        idx, off, span = order, rel, float(rel[-1])
    else:
        inside = (rel >= window[0]) & (rel < window[1])
        idx, off, span = order[inside], rel[inside] - window[0], window[1] - window[0]
    off, duration = off * time_scale, span * time_scale
    keep, frac = np.ones(idx.size, dtype=bool), 1.0
    if rate_cap is not None and duration > 0 and idx.size / duration > rate_cap:
        frac = rate_cap * duration / idx.size
        i = np.arange(idx.size)
        keep = np.floor((i + 1) * frac + 1e-9) > np.floor(i * frac + 1e-9)
    return Selection(idx[keep], off[keep], duration, idx, frac, spread)


# -- groups ----------------------------------------------------------------------------------


def group_names(
    p: Path,
    scan: Scan,
    in_window: np.ndarray,
    route_field: str | None,
    routes: Mapping[str, str] | None,
    group_field: str | None,
) -> dict[int, str | None]:
    """code -> group for every route/group value of the window's requests (-1: missing)."""
    codes = np.frombuffer(scan.code, dtype=np.int32)[in_window]
    values = {c: v for v, c in scan.keys.items()}
    uniq, inv = np.unique(codes, return_inverse=True)
    first = np.full(uniq.size, np.iinfo(np.int64).max)
    np.minimum.at(first, inv, np.frombuffer(scan.line, dtype=np.int64)[in_window])
    count = np.bincount(inv, minlength=uniq.size)
    present = {int(c): int(line) for c, line in zip(uniq, first, strict=True)}
    if group_field is not None:
        if -1 in present:
            raise InputFileError(
                f"{p}:{present[-1]}: no {group_field} (the group_field)",
                fix="give every line its group, or use route_field with routes: {default: GROUP}",
            )
        return {c: values[c] for c in present}
    if route_field is None or routes is None:
        return {c: None for c in present}
    out: dict[int, str | None] = {}
    unmapped = []
    for c, line in sorted(present.items(), key=lambda kv: kv[1]):
        value = values.get(c)
        group = routes.get(value) if value is not None else None
        group = group if group is not None else routes.get("default")
        if group is None:
            n = int(count[np.searchsorted(uniq, c)])
            unmapped.append(f"{value if value is not None else '<missing>'} ({n}, line {line})")
        out[c] = group
    if unmapped:
        more = f" and {len(unmapped) - 10} more" if len(unmapped) > 10 else ""
        raise ConfigError(
            f"{p}: {len(unmapped)} value(s) of {route_field} not in routes: "
            f"{', '.join(unmapped[:10])}{more}",
            fix="map each under routes: (value: group), or add default: GROUP for the rest",
        )
    return out
