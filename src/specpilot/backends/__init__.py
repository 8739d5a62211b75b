"""Engine backends behind one Protocol: start, stop, kill, endpoint, describe, scrape.

One small module per engine: ``builtin`` (``specpilot serve`` as a subprocess), ``llamacpp``
(xllamacpp, real, runs here), ``vllm`` and ``sglang`` (launch commands and parsers; need a
GPU), ``openai`` (any endpoint; delivery metrics only). Shared pieces: ``protocol`` (the
Protocol, manifest, normalised names), ``facts`` (hashes, hardware, memory), ``process``
(subprocess lifecycle), ``scrape`` (one scraper over a parser per engine), ``extras`` (what
response parsers share). ``response_extras`` turns an engine's per-response stats into a
``ResponseExtras``; it is what the load generator gets (it never imports an engine).

    >>> from specpilot.backends import response_extras_for
    >>> parse = response_extras_for("llamacpp", strict=True)
    >>> parse({"timings": {"draft_n": 8, "draft_n_accepted": 6}}, {}).spec["accepted"]
    6
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

from specpilot.backends.extras import UnknownFieldError
from specpilot.backends.facts import hardware_facts, hardware_info, model_file
from specpilot.backends.protocol import (
    SPEC_ACCEPTED,
    SPEC_COMMITTED,
    SPEC_POS,
    SPEC_PROPOSED,
    SPEC_ROUNDS,
    START_TIMEOUT_S,
    Backend,
    BackendError,
    Manifest,
    ModelFile,
)
from specpilot.backends.scrape import MetricsSource, scrape
from specpilot.errors import ConfigError
from specpilot.records import ENGINES, MetricSnapshot, ResponseExtras

ResponseParser = Callable[[Mapping[str, Any], Mapping[str, str] | None], ResponseExtras]


def _module(engine: str) -> Any:
    if engine not in ENGINES:
        raise ConfigError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    return importlib.import_module(f"specpilot.backends.{engine}")


def response_extras_for(engine: str, *, strict: bool = False) -> ResponseParser:
    """The per-response parser of an engine (what ``LoadConfig``'s ``response_extras`` takes).

    ``strict``: an unknown key in the engine's payload raises ``UnknownFieldError`` (tests).
    """
    fn = _module(engine).response_extras
    parser: ResponseParser = functools.partial(fn, strict=strict)
    return parser


def metrics_source(engine: str) -> MetricsSource | None:
    """What ``scrape`` reads for an engine (None: ``openai``, which exposes nothing)."""
    source: MetricsSource | None = getattr(_module(engine), "METRICS", None)
    return source


def scrape_endpoint(
    engine: str,
    url: str,
    run_id: str = "",
    arm: str = "",
    phase: str = "",
    label: str = "",
    *,
    headers: Mapping[str, str] | None = None,
) -> MetricSnapshot:
    """Scrape an engine someone else started (``specpilot load URL``): counters, no process;
    ``headers``: the arm's credentials, sent with each scrape."""
    return scrape(
        metrics_source(engine),
        url,
        run_id=run_id,
        arm=arm,
        phase=phase,
        label=label,
        engine=engine,
        headers=headers,
    )


__all__ = [
    "ENGINES",
    "SPEC_ACCEPTED",
    "SPEC_COMMITTED",
    "SPEC_POS",
    "SPEC_PROPOSED",
    "SPEC_ROUNDS",
    "START_TIMEOUT_S",
    "Backend",
    "BackendError",
    "Manifest",
    "ModelFile",
    "UnknownFieldError",
    "hardware_facts",
    "hardware_info",
    "metrics_source",
    "model_file",
    "response_extras_for",
    "scrape_endpoint",
]
