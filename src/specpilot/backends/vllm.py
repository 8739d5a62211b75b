"""vLLM: launch command, ``/metrics`` counters and per-request speculative metrics.

Formats copied from vLLM's sources (the tests replay them):
- ``vllm/v1/spec_decode/metrics.py`` (``SpecDecodingProm``): counters
  ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens`` and
  ``..._num_accepted_tokens_per_pos{position="0".."k-1"}``, labelled ``model_name``/``engine``;
  prometheus_client exposes them with a ``_total`` suffix. ``num_accepted_tokens`` counts
  draft tokens only; vLLM's mean acceptance length is ``1 + accepted / drafts`` (bonus
  included), which is ours.
- ``docs/features/speculative_decoding/acceptance_metrics.md``: with
  ``--per-request-spec-decode-metrics summary`` a response (the final usage chunk when
  streaming) carries ``metrics.speculative_decoding`` with ``num_spec_steps``,
  ``num_draft_tokens``, ``num_accepted_draft_tokens`` (bonus excluded), ``acceptance_histogram``.
- Launch: ``vllm serve MODEL --speculative-config '{"model": D, "num_speculative_tokens": k,
  "method": "draft_model"}'`` (``docs/features/speculative_decoding/draft_model.md``).

Our own server (``specpilot serve``) exposes the same names, so ``builtin`` reuses these parsers.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any

from specpilot.backends import prom
from specpilot.backends.base import (
    SPEC_ACCEPTED,
    SPEC_COMMITTED,
    SPEC_POS,
    SPEC_PROPOSED,
    SPEC_ROUNDS,
    BackendError,
    Manifest,
    ServerProcess,
    SubprocessLifecycle,
    free_port,
    get_text,
    hardware_info,
    model_file,
    process_memory,
    snapshot,
    spec_summary,
    tokenizer_sha256,
)
from specpilot.records import MetricSnapshot


def normalise_metrics(text: str, prefix: str = "vllm:") -> dict[str, float]:
    """vLLM-style exposition text -> our normalised counter names (see ``backends.base``)."""
    s = prom.parse(text)

    def tot(name: str) -> float | None:
        return prom.total(s, prefix + name + "_total", prefix + name)

    out: dict[str, float] = {}
    drafts = tot("spec_decode_num_drafts")
    proposed = tot("spec_decode_num_draft_tokens")
    accepted = tot("spec_decode_num_accepted_tokens")
    if drafts is not None:
        out[SPEC_ROUNDS] = drafts
    if proposed is not None:
        out[SPEC_PROPOSED] = proposed
    if accepted is not None:
        out[SPEC_ACCEPTED] = accepted
        if drafts is not None:
            out[SPEC_COMMITTED] = accepted + drafts
    pos = prom.by_label(
        s,
        "position",
        prefix + "spec_decode_num_accepted_tokens_per_pos_total",
        prefix + "spec_decode_num_accepted_tokens_per_pos",
    )
    for p, n in pos.items():
        out[f"{SPEC_POS}{int(p) + 1}"] = n  # vLLM positions are 0-based: position 0 = a >= 1
    for ours, theirs in (
        ("generation_tokens", "generation_tokens"),
        ("prompt_tokens", "prompt_tokens"),
        ("requests_success", "request_success"),
    ):
        v = tot(theirs)
        if v is not None:
            out[ours] = v
    for ours, theirs in (
        ("requests_running", "num_requests_running"),
        ("requests_waiting", "num_requests_waiting"),
    ):
        v = prom.total(s, prefix + theirs)
        if v is not None:
            out[ours] = v
    for name in ("kv_cache_usage_perc", "gpu_cache_usage_perc"):
        v = prom.total(s, prefix + name)
        if v is not None:
            out["kv_cache_usage"] = v
            break
    return out


def response_extras(obj: dict[str, Any]) -> dict[str, Any]:
    """``metrics.speculative_decoding`` of a (final) response object -> ``RequestRecord.spec``."""
    metrics = obj.get("metrics")
    sd = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(sd, dict):
        return {}
    return {
        "spec": spec_summary(
            "vllm",
            "metrics.speculative_decoding",
            proposed=sd.get("num_draft_tokens"),
            accepted=sd.get("num_accepted_draft_tokens"),
            rounds=sd.get("num_spec_steps"),
            raw=sd,
        )
    }


@dataclass
class VllmBackend(SubprocessLifecycle):
    """``vllm serve`` as a subprocess (needs a GPU and vLLM installed; not run here).

    draft + k: draft-model speculation (``method`` "draft_model"); ``speculative_config``
    overrides everything for other methods (ngram, eagle...), as vLLM's own JSON.
    """

    model: str
    draft: str | None = None
    k: int = 3
    method: str = "draft_model"
    speculative_config: dict[str, Any] | None = None
    host: str = "127.0.0.1"
    port: int = 0
    served_model_name: str | None = None
    per_request_metrics: str | None = None  # "summary" | "detailed" (recent vLLM only)
    extra_args: list[str] = field(default_factory=list)
    executable: str | None = None
    name: str = "vllm"

    def __post_init__(self) -> None:
        self.port = self.port or free_port(self.host)
        self._server: ServerProcess | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def spec_config(self) -> dict[str, Any] | None:
        if self.speculative_config is not None:
            return self.speculative_config
        if self.draft is None:
            return None
        return {"model": self.draft, "num_speculative_tokens": self.k, "method": self.method}

    def command(self) -> list[str]:
        exe = self.executable or shutil.which("vllm")
        argv = (
            [exe, "serve"] if exe else [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
        )
        argv += [self.model, "--host", self.host, "--port", str(self.port)]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        sc = self.spec_config()
        if sc is not None:
            argv += ["--speculative-config", json.dumps(sc, sort_keys=True)]
        if self.per_request_metrics:
            argv += ["--per-request-spec-decode-metrics", self.per_request_metrics]
        return argv + list(self.extra_args)

    def version(self) -> str:
        try:
            from importlib.metadata import version

            return version("vllm")
        except Exception:
            return "unknown"

    def describe(self) -> Manifest:
        models = tuple(
            m for m in (model_file("target", self.model), model_file("draft", self.draft)) if m
        )
        return Manifest(
            engine="vllm",
            engine_version=self.version(),
            endpoint=self.endpoint,
            models=models,
            tokenizer_sha256=tokenizer_sha256(self.model),
            launch=tuple(self.command()),
            speculative=self.spec_config() or {},
            hardware=hardware_info(),
        )

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot:
        try:
            text = get_text(self.endpoint + "/metrics")
        except Exception as exc:
            raise BackendError(f"vllm /metrics unreachable at {self.endpoint}: {exc}") from exc
        metrics = normalise_metrics(text)
        metrics.update(process_memory(self._server.pid if self._server else None))
        return snapshot("vllm", metrics, text, run_id, arm, phase, label)

    def response_extras(self, obj: dict[str, Any]) -> dict[str, Any]:
        return response_extras(obj)
