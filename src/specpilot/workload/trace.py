"""Arrival traces: load, cut, scale, and find the off-peak, peak and burst windows.

Formats (detected from the header):

- Azure LLM inference trace CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens`` with wall-clock
  timestamps such as ``2023-11-16 18:17:03.9799600`` (7 fractional digits).
- Generic CSV or JSONL with a timestamp and two token counts. Accepted column names:
  timestamp (``timestamp``, ``time``, ``t``, ``arrival_time``; seconds as numbers, or ISO
  date-times; ``timestamp_ms`` for milliseconds), input tokens (``input_tokens``,
  ``prompt_tokens``, ``context_tokens``, ``ContextTokens``), output tokens (``output_tokens``,
  ``completion_tokens``, ``generated_tokens``, ``GeneratedTokens``).

Times become seconds from the first arrival (sorted). Scaling, so an hour of production
traffic can be replayed against a 2-core machine: ``time_scale`` multiplies every time
(``10`` stretches a minute of trace over ten; ``0.5`` replays twice as fast), ``length_scale``
multiplies token counts, clipped to [``min_tokens``, ``max_*_tokens``].

    >>> import numpy as np
    >>> from specpilot.workload.trace import Trace, find_windows
    >>> t = np.concatenate([np.arange(0, 600, 1.0), np.arange(300, 310, 0.05)])
    >>> tr = Trace.from_arrays(t, np.full(t.size, 100), np.full(t.size, 20))
    >>> w = find_windows(tr, window_s=60, burst_s=10)
    >>> round(w["burst"].start_s), round(w["burst"].rate)
    (300, 21)
    >>> tr.window(300, 310).scaled(time_scale=2.0, length_scale=0.5).duration_s > 19
    True
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specpilot.errors import ConfigError, InputFileError

_TIME_COLS = ("timestamp", "time", "t", "arrival_time", "arrival_timestamp")
TIME_COLUMNS = (*_TIME_COLS, "timestamp_ms")  # a CSV trace's header names one of these
_IN_COLS = ("input_tokens", "prompt_tokens", "context_tokens", "contexttokens", "input_len")
_OUT_COLS = (
    "output_tokens",
    "completion_tokens",
    "generated_tokens",
    "generatedtokens",
    "output_len",
)


@dataclass(frozen=True)
class Trace:
    """Arrivals (seconds from the first, ascending) with input and output token counts."""

    t: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str = ""
    start_time: str | None = None  # wall-clock time of t == 0, when the file had one
    origin_s: float = 0.0  # offset of t == 0 in the original file's seconds (after window())

    @classmethod
    def from_arrays(
        cls,
        t: Any,
        input_tokens: Any,
        output_tokens: Any,
        source: str = "",
        start_time: str | None = None,
    ) -> Trace:
        t = np.asarray(t, dtype=np.float64)
        order = np.argsort(t, kind="stable")
        t = t[order]
        t0 = float(t[0]) if t.size else 0.0
        return cls(
            t=t - t0,
            input_tokens=np.asarray(input_tokens, dtype=np.int64)[order],
            output_tokens=np.asarray(output_tokens, dtype=np.int64)[order],
            source=source,
            start_time=start_time,
        )

    @property
    def n(self) -> int:
        return int(self.t.size)

    @property
    def duration_s(self) -> float:
        """Time from the first to the last arrival."""
        return float(self.t[-1] - self.t[0]) if self.n > 1 else 0.0

    @property
    def rate(self) -> float:
        return (self.n - 1) / self.duration_s if self.duration_s > 0 else 0.0

    def window(self, start_s: float, end_s: float) -> Trace:
        """Arrivals in [start_s, end_s), times rebased so that start_s is 0."""
        lo, hi = np.searchsorted(self.t, [start_s, end_s], side="left")
        return Trace(
            t=self.t[lo:hi] - start_s,
            input_tokens=self.input_tokens[lo:hi],
            output_tokens=self.output_tokens[lo:hi],
            source=self.source,
            start_time=self.start_time,
            origin_s=self.origin_s + start_s,
        )

    def scaled(
        self,
        time_scale: float = 1.0,
        length_scale: float = 1.0,
        *,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
        min_tokens: int = 1,
    ) -> Trace:
        """Times multiplied by ``time_scale``, token counts by ``length_scale`` (then clipped)."""
        if time_scale <= 0 or length_scale <= 0:
            raise ConfigError(
                f"time_scale={time_scale:g}, length_scale={length_scale:g}: both must be > 0",
                fix="time_scale 2 replays at half speed; length_scale 0.5 halves token counts",
            )

        def scale(x: np.ndarray, cap: int | None) -> np.ndarray:
            y = np.maximum(np.rint(x * length_scale), min_tokens).astype(np.int64)
            return np.minimum(y, cap) if cap is not None else y

        return Trace(
            t=self.t * time_scale,
            input_tokens=scale(self.input_tokens, max_input_tokens),
            output_tokens=scale(self.output_tokens, max_output_tokens),
            source=self.source,
            start_time=self.start_time,
            origin_s=self.origin_s,
        )

    def describe(self) -> dict[str, Any]:
        stats = length_stats

        return {
            "source": self.source,
            "start_time": self.start_time,
            "requests": self.n,
            "duration_s": round(self.duration_s, 3),
            "rate_per_s": round(self.rate, 4),
            "input_tokens": stats(self.input_tokens),
            "output_tokens": stats(self.output_tokens),
        }


def load_trace(path: str | Path) -> Trace:
    """Read an Azure trace CSV, or a generic CSV/JSONL trace (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(
            f"trace not found: {p}",
            fix="check the path (relative paths start at the workload file's directory)",
        )
    rows = _read_rows(p)
    if not rows:
        raise InputFileError(f"{p}: empty trace", fix="give a CSV with a header row, or JSONL")
    keys = {k.strip().lower(): k for k in rows[0]}

    def col(names: tuple[str, ...], what: str) -> str:
        for name in names:
            if name in keys:
                return keys[name]
        raise InputFileError(
            f"{p}: no {what} column (found: {', '.join(rows[0])})",
            fix=f"name it one of {', '.join(names)}",
        )

    ms = "timestamp_ms" in keys
    tcol = keys["timestamp_ms"] if ms else col(_TIME_COLS, "timestamp")
    icol, ocol = col(_IN_COLS, "input-token"), col(_OUT_COLS, "output-token")
    raw = _column(rows, tcol, p)
    start_time = None
    try:
        t = np.array([float(x) for x in raw], dtype=np.float64) * (1e-3 if ms else 1.0)
    except (TypeError, ValueError):
        stamps = _parse_datetimes([str(x) for x in raw], p)
        t = (stamps - stamps.min()).astype(np.int64) / 1e9
        start_time = str(stamps.min()).replace("T", " ")  # full precision: offsets add to it
    try:
        ins = [int(float(x)) for x in _column(rows, icol, p)]
        outs = [int(float(x)) for x in _column(rows, ocol, p)]
    except (TypeError, ValueError) as exc:
        raise InputFileError(f"{p}: token counts must be numbers ({exc})") from None
    return Trace.from_arrays(t, ins, outs, source=p.name, start_time=start_time)


def _read_rows(p: Path) -> list[dict[str, Any]]:
    """A JSON list, JSONL objects or CSV rows (by the first character)."""
    text = p.read_text("utf-8")
    first = text.lstrip()[:1]
    if first not in ("{", "["):
        return list(csv.DictReader(io.StringIO(text)))
    lines = [text] if first == "[" else text.splitlines()
    rows: list[Any] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            where = f"{p}:{n}" if first == "{" else str(p)
            raise InputFileError(f"{where}: not valid JSON ({exc})") from None
        rows.extend(obj if first == "[" else [obj])
    if any(not isinstance(r, dict) for r in rows):
        raise InputFileError(f"{p}: every trace row must be a JSON object")
    return rows


def _column(rows: list[dict[str, Any]], key: str, p: Path) -> list[Any]:
    for n, r in enumerate(rows, 1):
        if key not in r:
            raise InputFileError(f"{p}: row {n} has no {key!r}", fix="give every row all columns")
    return [r[key] for r in rows]


def _parse_datetimes(raw: list[str], where: Path) -> np.ndarray:
    """ISO 8601 wall-clock strings -> datetime64[ns] (UTC when an offset or 'Z' is given).

    numpy parses naive ISO times with up to 9 fractional digits (Azure has 7); strings with
    a UTC offset go through ``datetime.fromisoformat`` and are converted to UTC.
    """
    vals = [x.strip().replace(" ", "T") for x in raw]
    if any(_TZ.search(v) for v in vals):
        out = []
        for v in vals:
            v = re.sub(
                r"(\.\d{6})\d+", r"\1", v.removesuffix("Z") + ("+00:00" if v.endswith("Z") else "")
            )
            try:
                d = dt.datetime.fromisoformat(v)
            except ValueError:
                raise InputFileError(
                    f"{where}: cannot parse timestamp {v!r}", fix="use seconds or ISO 8601"
                ) from None
            if d.tzinfo is not None:
                d = d.astimezone(dt.UTC).replace(tzinfo=None)
            out.append(np.datetime64(d, "ns"))
        return np.array(out, dtype="datetime64[ns]")
    try:
        return np.array(vals, dtype="datetime64[ns]")
    except ValueError as exc:
        raise InputFileError(
            f"{where}: cannot parse timestamps ({exc})", fix="use seconds or ISO 8601"
        ) from None


_TZ = re.compile(r"(Z|[+-]\d\d:?\d\d)$")


# -- windows --------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """One window of a trace, chosen by arrival rate.

    kind: ``off_peak`` (lowest non-zero rate over ``window_s``), ``peak`` (highest rate over
    ``window_s``) or ``burst`` (the ``burst_s`` window whose rate jumps most above the rate of
    the ``context_s`` before it, among those at least at the trace's mean rate).
    ratio: rate / the trace's mean rate.
    jump: for ``burst``, rate / ``baseline_rate`` (the rate over the ``context_s`` before it,
    with one arrival of smoothing, so a burst out of silence has a large but finite jump).
    """

    kind: str
    start_s: float
    end_s: float
    requests: int
    rate: float
    ratio: float
    baseline_rate: float | None = None
    jump: float | None = None
    start_time: str | None = None
    mean_input_tokens: float = 0.0
    mean_output_tokens: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["duration_s"] = self.duration_s
        return d


def _counts(t: np.ndarray, starts: np.ndarray, width: float) -> np.ndarray:
    return np.searchsorted(t, starts + width, side="left") - np.searchsorted(t, starts, side="left")


def _wallclock(trace: Trace, offset_s: float) -> str | None:
    if trace.start_time is None:
        return None
    base = np.datetime64(trace.start_time.replace(" ", "T"), "ns")
    t = base + np.timedelta64(round((trace.origin_s + offset_s) * 1e9), "ns")
    return str(t.astype("datetime64[ms]")).replace("T", " ")


def _window(
    trace: Trace, kind: str, start: float, width: float, baseline: float | None = None
) -> Window:
    sub = trace.window(start, start + width)
    rate = sub.n / width
    mean = trace.n / max(trace.duration_s, 1e-9)
    return Window(
        kind=kind,
        start_s=round(float(start), 3),
        end_s=round(float(start + width), 3),
        requests=sub.n,
        rate=round(rate, 4),
        ratio=round(rate / mean, 3),
        baseline_rate=None if baseline is None else round(baseline, 4),
        jump=None if baseline is None else round(rate / baseline, 2),
        start_time=_wallclock(trace, float(start)),
        mean_input_tokens=round(float(sub.input_tokens.mean()), 1) if sub.n else 0.0,
        mean_output_tokens=round(float(sub.output_tokens.mean()), 1) if sub.n else 0.0,
    )


def rate_series(trace: Trace, bin_s: float = 60.0) -> tuple[np.ndarray, np.ndarray]:
    """Arrival rate per bin: (bin start times, requests per second)."""
    edges = np.arange(0.0, trace.duration_s + bin_s, bin_s)
    counts, _ = np.histogram(trace.t, bins=edges)
    return edges[:-1], counts / bin_s


def find_windows(
    trace: Trace,
    window_s: float = 300.0,
    burst_s: float = 10.0,
    context_s: float = 120.0,
    step_s: float | None = None,
) -> dict[str, Window]:
    """Off-peak, peak and sharpest-burst windows of ``trace`` (see :class:`Window`).

    Sliding windows start every ``step_s`` (default: a tenth of the window, and a tenth of
    ``burst_s`` for bursts) and lie entirely inside the trace.
    """
    if trace.n < 2:
        raise InputFileError(
            f"{trace.source or 'the trace'}: {trace.n} arrival(s); windows need at least two"
        )
    dur = trace.duration_s
    if window_s > dur:
        raise ConfigError(
            f"window_s={window_s:g} is longer than the trace ({dur:.1f} s)",
            fix=f"pick window_s below {dur:.0f}",
        )
    t = trace.t
    step = step_s or window_s / 10
    starts = np.arange(0.0, dur - window_s + 1e-9, step)
    counts = _counts(t, starts, window_s)
    # Off-peak is the quietest window that has traffic at all: an empty one is a gap in the
    # trace (or in the service), not a load level to replay. Ties: the earliest wins.
    busy = counts > 0
    quiet = np.where(busy, counts, np.iinfo(np.int64).max) if busy.any() else counts
    off = float(starts[int(np.argmin(quiet))])
    peak = float(starts[int(np.argmax(counts))])
    out = {
        "off_peak": _window(trace, "off_peak", off, window_s),
        "peak": _window(trace, "peak", peak, window_s),
    }
    bstep = step_s or burst_s / 10
    bstarts = np.arange(context_s, dur - burst_s + 1e-9, bstep)
    if bstarts.size:
        b = _counts(t, bstarts, burst_s) / burst_s
        # +1 arrival of smoothing: a jump out of silence is not infinitely sharp.
        base = (_counts(t, bstarts - context_s, context_s) + 1) / context_s
        mean = trace.n / dur
        score = np.where(b >= mean, b / base, -np.inf)
        if np.isfinite(score).any():
            i = int(np.argmax(score))
            out["burst"] = _window(
                trace, "burst", float(bstarts[i]), burst_s, baseline=float(base[i])
            )
    return out


def length_stats(x: np.ndarray) -> dict[str, float]:
    """Mean, p50, p90 and max of token lengths (empty: nothing to say)."""
    if not x.size:
        return {}
    return {
        "mean": round(float(x.mean()), 1),
        "p50": float(np.percentile(x, 50)),
        "p90": float(np.percentile(x, 90)),
        "max": int(x.max()),
    }
