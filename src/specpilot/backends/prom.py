"""A small parser for the Prometheus text exposition format (version 0.0.4), enough for the
counters and gauges engines expose; histograms come back as their ``_bucket/_sum/_count`` samples.

    >>> s = parse('vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 12.0\\n')
    >>> s[0].name, s[0].labels["engine"], s[0].value
    ('vllm:spec_decode_num_drafts_total', '0', 12.0)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Sample:
    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict, hash=False)


def _unescape(v: str) -> str:
    return v.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def _value(v: str) -> float:
    low = v.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(v)


def parse(text: str) -> list[Sample]:
    """Every sample line, in order; comments and malformed lines are skipped."""
    out: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(m.group(3) or "")}
        try:
            out.append(Sample(m.group(1), _value(m.group(4)), labels))
        except ValueError:
            continue
    return out


def total(samples: Iterable[Sample], *names: str) -> float | None:
    """Sum of all samples named any of ``names`` (over label sets, e.g. several engines)."""
    vals = [s.value for s in samples if s.name in names]
    return sum(vals) if vals else None


def by_label(samples: Iterable[Sample], label: str, *names: str) -> dict[str, float]:
    """Samples named any of ``names`` summed per value of ``label`` (e.g. position)."""
    out: dict[str, float] = {}
    for s in samples:
        if s.name in names and label in s.labels:
            out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
    return out
