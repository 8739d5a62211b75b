"""Shared pieces of the per-engine response parsers (``response_extras``).

Each engine's parser names every key it knows in the engine's payload. A key it does not know
raises :class:`UnknownFieldError` with ``strict=True`` (the tests parse strictly, so a changed
engine format fails a test) and is otherwise logged once and kept: the summary's
``unknown_keys`` lists it and ``raw`` holds the payload as received. Nothing vanishes.

    >>> s = spec_summary("vllm", "metrics.speculative_decoding", proposed=129, accepted=10, rounds=43)
    >>> s["committed"], round(s["mean_acceptance_length"], 4), round(s["acceptance_rate"], 4)
    (53, 1.2326, 0.0775)
    >>> strategy_header("k=3; scope=default; version=7")
    (3, 'default', 7)
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from specpilot.definitions import acceptance_rate_from, mean_acceptance_length_from

logger = logging.getLogger("specpilot.backends")
_logged: set[tuple[str, str]] = set()


class UnknownFieldError(ValueError):
    """An engine payload carried a key its parser does not know (strict parsing)."""


def check_keys(
    obj: Mapping[str, Any], known: Collection[str], where: str, strict: bool
) -> list[str]:
    """The keys of ``obj`` not in ``known`` (sorted); raise on any with ``strict``."""
    unknown = sorted(set(obj) - set(known))
    if unknown and strict:
        raise UnknownFieldError(
            f"{where}: unknown keys {', '.join(unknown)}: teach the parser in specpilot.backends "
            "what they mean (or list them as known and ignored)"
        )
    for key in unknown:
        if (where, key) not in _logged:
            _logged.add((where, key))
            logger.warning("%s: unknown key %r kept in the request's spec.raw", where, key)
    return [f"{where}.{k}" for k in unknown]


def spec_summary(
    engine: str,
    source: str,
    *,
    proposed: float | None,
    accepted: float | None,
    rounds: float | None,
    histogram: list[int] | None = None,
    raw: Mapping[str, Any] | None = None,
    unknown: list[str] | None = None,
) -> dict[str, Any]:
    """A per-request speculative summary in DESIGN.md's definitions (``RequestRecord.spec``).

    ``rounds``: verification steps that carried a draft; ``accepted`` excludes the bonus token;
    ``committed`` = accepted + rounds (one bonus/correction token per step);
    ``mean_acceptance_length`` = committed / rounds; ``acceptance_rate`` = accepted / proposed;
    ``acceptance_histogram[j]``: steps that accepted exactly j drafts.
    """
    out: dict[str, Any] = {
        "engine": engine,
        "source": source,
        "rounds": rounds,
        "proposed": proposed,
        "accepted": accepted,
        "committed": accepted + rounds if accepted is not None and rounds is not None else None,
        "acceptance_rate": (
            acceptance_rate_from(accepted, proposed) if accepted is not None and proposed else None
        ),
        "mean_acceptance_length": (
            mean_acceptance_length_from(accepted + rounds, rounds)
            if accepted is not None and rounds
            else None
        ),
        "acceptance_histogram": list(histogram) if histogram is not None else None,
    }
    if unknown:
        out["unknown_keys"] = list(unknown)
    if raw is not None:
        out["raw"] = dict(raw)
    return out


def header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """A response header by case-insensitive name."""
    if not headers:
        return None
    low = name.lower()
    for k, v in headers.items():
        if k.lower() == low:
            return v
    return None


def strategy_header(value: str | None) -> tuple[int | None, str | None, int | None]:
    """``X-Specpilot-Strategy: k=3; scope=default; version=0`` -> (k, scope, version)."""
    if not value:
        return None, None, None
    parts = dict(p.strip().partition("=")[::2] for p in value.split(";") if "=" in p)
    k = parts.get("k")
    version = parts.get("version")
    return (
        int(k) if k is not None and k.strip().lstrip("-").isdigit() else None,
        parts.get("scope") or None,
        int(version) if version is not None and version.strip().isdigit() else None,
    )


def seconds(ms: Any) -> float | None:
    """Milliseconds (engine JSON) -> seconds; None stays None."""
    return None if ms is None else float(ms) / 1e3
