"""Prometheus text exposition -> samples, through ``prometheus_client``'s own parser.

The parser is ``prometheus_client.parser.text_string_to_metric_families`` (the reference
implementation, shipped with the client the server uses): escaped labels, ``NaN``/``+Inf``,
timestamps and ``_total``/``_created`` suffixes are handled there. A text it cannot parse is an
error naming the engine's endpoint, never a silently shorter list.

    >>> s = parse('vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 12.0\\n')
    >>> s[0].name, s[0].labels["engine"], s[0].value
    ('vllm:spec_decode_num_drafts_total', '0', 12.0)
    >>> total(s, "vllm:spec_decode_num_drafts_total")
    12.0
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


class ExpositionError(ValueError):
    """Text that is not the Prometheus exposition format."""


@dataclass(frozen=True)
class Sample:
    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict, hash=False)


def parse(text: str, source: str = "/metrics") -> list[Sample]:
    """Every sample, in order (``_created`` series included: filter by name)."""
    try:
        return [
            Sample(s.name, float(s.value), dict(s.labels))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except ValueError as exc:
        raise ExpositionError(f"{source}: not Prometheus text format: {exc}") from exc


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
