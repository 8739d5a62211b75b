"""What every backend is: the Protocol, its error, the frozen manifest, the normalised names.

A backend starts, stops, kills, describes and scrapes one engine; the load generator sees only
its ``endpoint`` and its per-response parser (``response_extras``).

Normalised counter names (``MetricSnapshot.metrics``) follow DESIGN.md's definitions, whatever
the engine's own convention:

- ``spec_rounds``: verification steps that carried a draft (vLLM ``num_drafts``, llama.cpp
  ``num_drafts``, SGLang ``spec_verify_ct``).
- ``spec_proposed_tokens``: draft tokens proposed (sum of k).
- ``spec_accepted_tokens``: draft tokens accepted, the bonus/correction token *excluded*.
- ``spec_committed_tokens``: tokens those rounds appended = accepted + rounds (bonus included).
- ``spec_accepted_pos_{i}`` (i from 1): rounds that accepted at least i drafts, so
  P(a >= i) = spec_accepted_pos_i / spec_rounds.
- ``generation_tokens``, ``prompt_tokens``, ``requests_running``, ``requests_waiting``,
  ``kv_cache_usage`` (0..1).
- ``preemptions``: a counter of requests the engine evicted from its running batch for want of
  KV cache (vLLM ``vllm:num_preemptions``, SGLang ``sglang:num_retracted_requests_total``).
- ``kv_capacity_tokens``: the KV cache's size in tokens; ``context_tokens``: the longest
  sequence one request may hold (vLLM/SGLang ``max_model_len``, llama.cpp a slot's ``n_ctx``).
- ``kv_admissible_sequences``: sequences of ``context_tokens`` the KV cache admits at once, as
  the engine sized it from its memory (vLLM ``kv_cache_max_concurrency``, else KV blocks x
  block size / max_model_len; SGLang ``max_total_num_tokens`` / max_model_len): a draft that
  takes memory lowers it.
- ``slots_total``, ``slots_busy``: sequences an engine with fixed slots holds (a setting:
  llama.cpp ``-np``, the builtin server's ``max_slots``) and how many are in use.

    >>> from specpilot.backends.protocol import Backend
    >>> from specpilot.backends.openai import OpenAIBackend
    >>> isinstance(OpenAIBackend("https://api.example.com/v1"), Backend)
    True
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from specpilot.errors import EngineStartError
from specpilot.records import MetricSnapshot, ResponseExtras

SPEC_ROUNDS = "spec_rounds"
SPEC_PROPOSED = "spec_proposed_tokens"
SPEC_ACCEPTED = "spec_accepted_tokens"
SPEC_COMMITTED = "spec_committed_tokens"
SPEC_POS = "spec_accepted_pos_"  # + str(i), i >= 1
KV_USE = "kv_cache_usage"
RUNNING = "requests_running"
WAITING = "requests_waiting"
PREEMPTIONS = "preemptions"
KV_TOKENS = "kv_capacity_tokens"
CONTEXT = "context_tokens"
KV_SEQUENCES = "kv_admissible_sequences"
SLOTS = "slots_total"
SLOTS_BUSY = "slots_busy"

# One default for every engine: how long starting (loading the model) may take before the
# backend gives up. A server that exits early fails at once; this bounds a hang. A large model
# on a GPU engine (weights, CUDA graphs) can take minutes: pass more to ``start()`` if needed.
START_TIMEOUT_S = 600.0


class BackendError(EngineStartError):
    """An engine that would not start, answer or stop; the message says why and where to look."""


@dataclass(frozen=True)
class ModelFile:
    role: str  # "target" | "draft"
    path: str
    sha256: str | None
    bytes: int | None


@dataclass(frozen=True)
class Manifest:
    """The frozen description of one arm's engine (R6: freeze and record everything)."""

    engine: str
    engine_version: str
    endpoint: str
    models: tuple[ModelFile, ...]
    tokenizer_sha256: str | None
    launch: tuple[str, ...]  # the command line, or its llama-server equivalent
    speculative: dict[str, Any]
    hardware: dict[str, Any]
    notes: tuple[str, ...] = ()
    created_unix: float = field(default_factory=time.time)
    started_by_specpilot: bool = True  # False: an endpoint given by URL (someone else runs it)
    # the engine's own load-time measurement where it exposes one (the builtin server: the
    # weight format chosen per role, its forward times and verify-cost ratios by batch and
    # tokens); the store turns it into the verify-cost curve's "calibration" points
    calibration: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(json.loads(json.dumps(asdict(self), default=str)))


def request_headers(backend: object) -> Mapping[str, str]:
    """The headers every request to a backend's endpoint carries: an endpoint given by URL
    its credentials (``OpenAIBackend.headers``), an engine specpilot starts none.

    >>> from specpilot.backends.openai import OpenAIBackend
    >>> dict(request_headers(OpenAIBackend("http://h", headers={"X-A": "1"}))), request_headers(1)
    ({'X-A': '1'}, {})
    """
    got = getattr(backend, "headers", None)
    return got if isinstance(got, Mapping) else {}


@runtime_checkable
class Backend(Protocol):
    """Start, stop, kill, describe and scrape one engine.

    ``start(timeout_s=None)`` waits up to ``START_TIMEOUT_S`` (or ``timeout_s``) for /health;
    ``kill()`` ends the engine as a crash would (SIGKILL), for failure drills; ``scrape`` returns
    counters and memory at one moment; ``response_extras(obj, headers)`` parses what one response
    says beyond the OpenAI format (see :class:`specpilot.records.ResponseExtras`).
    """

    name: str

    @property
    def endpoint(self) -> str: ...

    def start(self, timeout_s: float | None = None) -> None: ...

    def stop(self) -> None: ...

    def kill(self) -> None: ...

    def describe(self) -> Manifest: ...

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot: ...

    def response_extras(
        self, obj: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> ResponseExtras: ...
