"""Replay a request log: arrival times and request bodies from a production log.

A request log has one request a line: a time, the request body (OpenAI chat or completions) and
maybe a group or route field. Shapes read (fields and their sources in :mod:`.logshapes` and
:mod:`.vllmlog`): ``openai_batch`` (Batch API input lines plus a ``timestamp``),
``litellm_spend`` (``LiteLLM_SpendLogs`` rows), ``vllm_log`` (``vllm serve
--enable-log-requests``'s text log) and ``jsonl`` (``{"timestamp", "body"}``); ``auto`` tells
them apart by the first line.

What becomes of the times, in this order:

1. Sorted (by time, then line); offset 0 is the log's first request. A log whose times are all
   whole seconds (vLLM's default format) cannot say when in its second a request came: the k
   requests of one second are put at i/k s into it, so per-second counts stay exact.
2. ``window=(start_s, end_s)`` keeps the requests in [start_s, end_s) of those offsets (the
   seconds :func:`request_log_trace` gives ``find_windows`` and ``trace-windows``) and rebases
   them on start_s, so the window's quiet lead-in is replayed too, as ``Trace.window`` does.
3. ``time_scale`` multiplies every offset (2: half speed; 0.5: twice as fast).
4. ``rate_cap`` (requests/s, after scaling) thins and never stretches: when the replayed span's
   mean rate is above it, the i-th request in time order is kept when floor((i+1)f) > floor(if),
   f = cap / rate: an evenly spread, deterministic subset, so bursts keep their shape at a lower
   volume and no request moves. ``time_scale`` is the knob that stretches.

Groups: ``route_field`` (a dotted path into the line, e.g. ``model_group`` or
``metadata.user_api_key_alias``) with ``routes`` (route value -> group; the key ``default``
takes every other value), or ``group_field`` (the log names the group), or neither (None).
Every request of the window, before the rate cap, must get a group (a value without one is a
ConfigError listing them), so a cap never hides or reveals a missing route.

Memory: the file is read twice, line by line: the first pass keeps each request's time,
position and route (a few bytes each); the second reads back only the kept lines.

    >>> import json, pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> rows = [{"timestamp": 100 + 0.5 * i, "route": "a" if i % 2 else "b",
    ...          "body": {"messages": [{"role": "user", "content": f"q{i}"}]}} for i in range(6)]
    >>> _ = p.write_text("".join(json.dumps(r) + "\\n" for r in rows))
    >>> log = read_request_log(p, route_field="route", routes={"a": "code", "default": "chat"},
    ...                        window=(1.0, 3.0), time_scale=2.0)
    >>> log.shape, [(e.offset_s, e.group, e.body["messages"][0]["content"]) for e in log.entries]
    ('jsonl', [(0.0, 'chat', 'q2'), (1.0, 'code', 'q3'), (2.0, 'chat', 'q4'), (3.0, 'code', 'q5')])
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specpilot.errors import ConfigError, InputFileError
from specpilot.workload.logscan import (
    Scan,
    Selection,
    group_names,
    log_seconds,
    make_reader,
    read_lines,
    scan_log,
    select,
)
from specpilot.workload.logshapes import SHAPES, Line, Parsed, body_sha256, detect_shape
from specpilot.workload.trace import TIME_COLUMNS, Trace, length_stats, load_trace

__all__ = [
    "SHAPES",
    "LoggedRequest",
    "RequestLog",
    "RequestLogReplay",
    "arrivals_trace",
    "is_request_log",
    "read_request_log",
    "request_log_trace",
]


@dataclass(frozen=True)
class LoggedRequest:
    """One request to replay: its body as logged (minus ``stream``/``stream_options``)."""

    offset_s: float  # seconds from the replay's start (see the module docstring)
    api: str  # "chat" | "completions"
    body: dict[str, Any] = field(repr=False)
    group: str | None
    body_sha256: str  # of the canonical JSON body (logshapes.body_sha256)
    input_tokens_est: int  # exact when the log has token ids, else characters / 4
    output_tokens: int | None  # the logged output length, when the log has one (LiteLLM)
    line: int  # where it is in the log (1-based; vllm_log: the Received line)
    request_id: str | None = None
    route: str | None = None  # the route field's value, when routes map it
    truncated: bool = False  # the log cut the body (LiteLLM marks it litellm_truncated)

    @property
    def max_tokens(self) -> int | None:
        v = self.body.get("max_completion_tokens", self.body.get("max_tokens"))
        return v if type(v) is int else None


@dataclass(frozen=True)
class RequestLog:
    """The requests kept from a log, in replay order, and what was done to get them."""

    source: str
    shape: str
    entries: tuple[LoggedRequest, ...]
    duration_s: float  # the replayed span: the window's length, or first to last, time-scaled
    requests_in_log: int
    requests_in_window: int  # before the rate cap
    time_scale: float = 1.0
    window: tuple[float, float] | None = None
    rate_cap: float | None = None
    keep_fraction: float = 1.0  # what the rate cap kept
    skipped: dict[str, int] = field(default_factory=dict)  # lines that are no generation request
    start_time: str | None = None  # UTC time of the log's first request (None: no year logged)
    time_resolution_s: float | None = None  # 1.0: whole-second times, spread (module docstring)

    def times(self) -> np.ndarray:
        return np.array([e.offset_s for e in self.entries], dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        """Counts, lengths and hashes: never a prompt."""
        lengths = np.array([e.input_tokens_est for e in self.entries], dtype=np.int64)
        digest = hashlib.sha256("".join(e.body_sha256 for e in self.entries).encode()).hexdigest()
        return {
            "source": self.source,
            "shape": self.shape,
            "requests": len(self.entries),
            "requests_in_log": self.requests_in_log,
            "requests_in_window": self.requests_in_window,
            "duration_s": round(self.duration_s, 6),
            "window": list(self.window) if self.window else None,
            "time_scale": self.time_scale,
            "rate_cap": self.rate_cap,
            "keep_fraction": round(self.keep_fraction, 6),
            "by_group": dict(sorted(Counter(str(e.group) for e in self.entries).items())),
            "by_api": dict(sorted(Counter(e.api for e in self.entries).items())),
            "input_tokens_est": _stats(lengths),
            "truncated": sum(e.truncated for e in self.entries),
            "skipped": dict(self.skipped),
            "start_time": self.start_time,
            "time_resolution_s": self.time_resolution_s,
            "bodies_sha256": digest,
        }


_stats = length_stats  # the trace's own summary of lengths


@dataclass(frozen=True)
class RequestLogReplay:
    """A request log as an arrival process (``workload.arrivals.ArrivalProcess``)."""

    log: RequestLog = field(repr=False)

    def times(self, duration_s: float) -> np.ndarray:
        t = self.log.times()
        return t if duration_s >= self.log.duration_s else t[t < duration_s]

    def describe(self) -> dict[str, Any]:
        """The log as a phase's arrival: what was kept and how, counts, lengths and the hash
        of the bodies; never a prompt, a group or a route value (those stay in the requests)."""
        d = self.log.describe()
        del d["by_group"]
        return {"kind": "request_log", **d}


# -- the API -----------------------------------------------------------------------------------


def _check_options(
    shape: str,
    route_field: str | None,
    routes: Mapping[str, str] | None,
    group_field: str | None,
    time_scale: float,
    rate_cap: float | None,
    window: tuple[float, float] | None,
) -> None:
    def bad(msg: str, fix: str) -> ConfigError:
        return ConfigError(f"request log: {msg}", fix=fix)

    if shape != "auto" and shape not in SHAPES:
        raise bad(f"shape {shape!r} is unknown", f"use auto, {', '.join(SHAPES)}")
    if group_field is not None and (route_field is not None or routes is not None):
        raise bad("group_field and route_field/routes both given", "keep one")
    if (route_field is None) != (routes is None):
        raise bad("route_field and routes go together", "give the field and its value -> group map")
    if routes is not None and not all(isinstance(g, str) and g for g in routes.values()):
        raise bad("every routes value must be a group name", "value: GROUP under routes")
    if not time_scale > 0:
        raise bad(f"time_scale {time_scale:g} must be > 0", "2 replays at half speed")
    if rate_cap is not None and not rate_cap > 0:
        raise bad(f"rate_cap {rate_cap:g} must be > 0 requests/s", "leave it out for no cap")
    if window is not None and not 0 <= window[0] < window[1]:
        raise bad(f"window {list(window)}: need 0 <= start < end", "seconds from the first request")


def _open(path: str | Path, shape: str) -> tuple[Path, str]:
    """The log's path and shape (``auto``: detected from its first line)."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(
            f"request log not found: {p}", fix="check the path (relative to the workload file)"
        )
    return p, detect_shape(str(p), read_lines(p)) if shape == "auto" else shape


def read_request_log(
    path: str | Path,
    *,
    shape: str = "auto",
    route_field: str | None = None,
    routes: Mapping[str, str] | None = None,
    group_field: str | None = None,
    time_field: str | None = None,
    time_scale: float = 1.0,
    rate_cap: float | None = None,
    window: tuple[float, float] | None = None,
) -> RequestLog:
    """The requests of a log to replay (see the module docstring for each option)."""
    _check_options(shape, route_field, routes, group_field, time_scale, rate_cap, window)
    window = (float(window[0]), float(window[1])) if window is not None else None
    p, name = _open(path, shape)
    reader = make_reader(name, str(p), time_field)
    scan = scan_log(p, reader, group_field or route_field)
    sel = select(scan, window, time_scale, rate_cap)
    groups = group_names(p, scan, sel.in_window, route_field, routes, group_field)
    # a fresh reader: the first one's state (vLLM's year) belongs to reading in file order
    again = make_reader(name, str(p), time_field)
    entries = _read_back(p, again, scan, sel, groups, routes is not None)
    t0 = min(scan.t)
    return RequestLog(
        source=p.name,
        shape=name,
        entries=entries,
        duration_s=sel.duration_s,
        requests_in_log=len(scan.t),
        requests_in_window=int(sel.in_window.size),
        time_scale=time_scale,
        window=window,
        rate_cap=rate_cap,
        keep_fraction=sel.keep_fraction,
        skipped=dict(scan.skipped),
        start_time=dt.datetime.fromtimestamp(t0, dt.UTC).isoformat()
        if getattr(reader, "has_year", True)
        else None,
        time_resolution_s=1.0 if sel.spread else None,
    )


def _read_back(
    p: Path,
    reader: Any,
    scan: Scan,
    sel: Selection,
    groups: dict[int, str | None],
    routed: bool,
) -> tuple[LoggedRequest, ...]:
    """The second pass: the kept requests' lines, read at their offsets, in replay order."""
    out: list[LoggedRequest | None] = [None] * sel.index.size
    values = {c: v for v, c in scan.keys.items()}
    with p.open("rb") as f:
        for j in np.argsort(np.frombuffer(scan.offsets, dtype=np.int64)[sel.index], kind="stable"):
            i = int(sel.index[j])
            lines = []
            for off in (scan.offsets[i], scan.second[i]):
                if off >= 0:
                    f.seek(off)
                    text = f.readline().decode("utf-8").rstrip("\r\n")
                    lines.append(Line(scan.line[i], off, text))
            r = next(x for x in reader.read(lines) if isinstance(x, Parsed))
            code = scan.code[i]
            out[j] = LoggedRequest(
                offset_s=round(float(sel.offset_s[j]), 6),
                api=r.api,
                body=r.body,
                group=groups.get(code),
                body_sha256=body_sha256(r.body),
                input_tokens_est=scan.input_tokens[i],
                output_tokens=r.output_tokens,
                line=scan.line[i],
                request_id=r.request_id,
                route=values.get(code) if routed else None,
                truncated=r.truncated,
            )
    return tuple(e for e in out if e is not None)


def request_log_trace(
    path: str | Path, *, shape: str = "auto", time_field: str | None = None
) -> Trace:
    """The log's arrivals as a :class:`Trace` (offsets as ``read_request_log`` counts them;
    input tokens estimated, output tokens as logged, else ``max_tokens``, else 0), for
    ``find_windows`` and the ``trace-windows`` command."""
    _check_options(shape, None, None, None, 1.0, None, None)
    p, name = _open(path, shape)
    reader = make_reader(name, str(p), time_field)
    scan = scan_log(p, reader, None)
    order, rel, _ = log_seconds(scan)
    ins = np.frombuffer(scan.input_tokens, dtype=np.int64)[order]
    outs = np.frombuffer(scan.output_tokens, dtype=np.int64)[order]
    t0 = dt.datetime.fromtimestamp(min(scan.t), dt.UTC)  # UTC, as trace.start_time has no zone
    start = t0.strftime("%Y-%m-%d %H:%M:%S.%f") if getattr(reader, "has_year", True) else None
    return Trace.from_arrays(rel, ins, outs, source=p.name, start_time=start)


def is_request_log(path: str | Path) -> bool:
    """Whether a file reads as a request log rather than an arrival trace
    (:func:`~specpilot.workload.trace.load_trace`), by its first non-blank line: a JSON object
    of a log shape (a ``body``, a Batch API line, a LiteLLM row), or text that is not a CSV
    header naming a time column (vLLM's log)."""
    if not Path(path).is_file():
        return False  # load_trace says it is not there
    for line in read_lines(Path(path)):
        text = line.text.strip()
        if not text:
            continue
        if text.startswith("["):
            return False  # a JSON list of trace rows
        if text.startswith("{"):
            try:
                detect_shape(str(path), [line])
            except InputFileError:
                return False  # an object of another shape: a JSONL trace's row
            return True
        return not {c.strip().strip('"').lower() for c in text.split(",")} & set(TIME_COLUMNS)
    return False


def arrivals_trace(
    path: str | Path, *, shape: str = "auto", time_field: str | None = None
) -> Trace:
    """A file's arrivals as a :class:`Trace` (``trace-windows``): a request log's
    (:func:`request_log_trace`) or an arrival trace's; ``shape`` ``auto`` tells them apart
    (:func:`is_request_log`), ``trace`` reads an arrival trace, a log shape a log."""
    if shape == "trace" or (shape == "auto" and not is_request_log(path)):
        return load_trace(path)
    return request_log_trace(path, shape=shape, time_field=time_field)
