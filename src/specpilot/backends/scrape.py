"""Scraping an engine: one implementation for every engine, over a parser per engine.

An engine module declares a :class:`MetricsSource` (the paths to read and a parser from their
texts to normalised counters and typed memory); :func:`scrape` reads the paths, runs the
parser, adds the process tree's RSS and GPU memory when the engine runs here, and returns a
``MetricSnapshot``. Backends' ``scrape()`` methods and ``specpilot load URL`` both call it.

A snapshot labelled ``DURING`` (taken every second or two inside a phase) is the light read:
only the source's ``series`` paths (the gauges: KV use, the queue, slots), over one kept-alive
connection, and its ``raw`` stays empty: the normalised figures are what is kept of it.

    >>> src = MetricsSource("demo", ("/metrics",), lambda texts: Scraped({"n": 1.0}))
    >>> src.parse({"/metrics": "n 1"}).metrics
    {'n': 1.0}
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx

from specpilot.backends.facts import process_memory
from specpilot.backends.process import get_text
from specpilot.backends.protocol import BackendError
from specpilot.records import DURING, MetricSnapshot

MEMORY_FIELDS = (
    "rss_bytes",
    "target_weight_bytes",
    "draft_weight_bytes",
    "kv_allocated_bytes",
    "kv_used_bytes",
    "draft_kv_bytes",
    "gpu_memory_bytes",
)


@dataclass
class Scraped:
    """What a parser found: normalised counters, and memory by ``MetricSnapshot`` field name."""

    metrics: dict[str, float]
    memory: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.memory) - set(MEMORY_FIELDS)
        if unknown:
            raise ValueError(f"memory fields {sorted(unknown)}: one of {', '.join(MEMORY_FIELDS)}")


@dataclass(frozen=True)
class MetricsSource:
    """How one engine exposes its state: the paths to GET (the first is required), a parser
    from ``{path: text}`` of the paths that answered, and ``series``: the paths read inside a
    phase (``DURING``; the first required; empty: ``paths[0]`` alone)."""

    engine: str
    paths: tuple[str, ...]
    parse: Callable[[Mapping[str, str]], Scraped]
    series: tuple[str, ...] = ()

    def paths_for(self, label: str) -> tuple[str, ...]:
        return (self.series or self.paths[:1]) if label == DURING else self.paths


_client: httpx.Client | None = None
_client_lock = threading.Lock()


def _series_get(url: str, headers: Mapping[str, str] | None) -> str:
    """GET over one kept-alive client (httpx's Client is thread-safe): a new client per read
    costs more CPU than the read itself, and a series reads every second."""
    global _client
    with _client_lock:
        if _client is None:
            _client = httpx.Client(timeout=5.0)
        client = _client
    r = client.get(url, headers=dict(headers or {}))
    r.raise_for_status()
    return r.text


def max_model_len(models_json: str | None) -> float | None:
    """The first served model's ``max_model_len`` in a ``GET /v1/models`` answer (vLLM's and
    SGLang's model cards; None: absent).

    >>> max_model_len('{"data": [{"id": "m", "max_model_len": 1024}]}')
    1024.0
    """
    try:
        return float(json.loads(models_json or "")["data"][0]["max_model_len"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def scrape(
    source: MetricsSource | None,
    endpoint: str,
    *,
    pid: int | None = None,
    run_id: str = "",
    arm: str = "",
    phase: str = "",
    label: str = "",
    engine: str = "",
    headers: Mapping[str, str] | None = None,
) -> MetricSnapshot:
    """Read ``source.paths`` from ``endpoint`` now (``label`` ``DURING``: its ``series`` paths,
    no raw text kept); ``pid``: the engine's process, when local; ``headers``: sent with each
    read (an endpoint behind a gateway).

    Memory the engine reports itself wins over the process table (the builtin server knows its
    weights and KV cache; for others RSS and GPU memory come from ``psutil``/``nvidia-smi``).
    ``source`` None (an endpoint without metrics) gives a snapshot with empty metrics.
    """
    t = time.perf_counter()
    name = source.engine if source is not None else (engine or "unknown")
    during = label == DURING
    get = _series_get if during else lambda url, h: get_text(url, headers=h)
    texts: dict[str, str] = {}
    scraped = Scraped({})
    if source is not None:
        for i, path in enumerate(source.paths_for(label)):
            try:
                texts[path] = get(endpoint.rstrip("/") + path, headers)
            except Exception as exc:  # only the first path is required
                if i == 0:
                    raise BackendError(f"{name} {path} unreachable at {endpoint}: {exc}") from exc
        scraped = source.parse(texts)
    memory: dict[str, int] = {**process_memory(pid), **scraped.memory}
    raw = next(iter(texts.values())) if len(texts) == 1 else json.dumps(texts) if texts else ""
    raw = "" if during else raw
    return MetricSnapshot(
        run_id=run_id,
        arm=arm,
        phase=phase,
        label=label,
        t=t,
        engine=name,
        metrics=scraped.metrics,
        raw=raw,
        **{k: memory.get(k) for k in MEMORY_FIELDS},
    )
