"""vLLM: launch command, ``/metrics`` counters and per-request ``metrics`` of a response.

Formats copied from vLLM's sources and docs (the tests replay them):

- ``vllm/v1/spec_decode/metrics.py`` (``SpecDecodingProm``): counters
  ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens`` and
  ``..._num_accepted_tokens_per_pos{position="0".."k-1"}``, labelled ``model_name``/``engine``;
  prometheus_client exposes them with a ``_total`` suffix. ``num_accepted_tokens`` counts
  draft tokens only; vLLM's mean acceptance length is ``1 + accepted / drafts`` (bonus
  included), which is ours.
- ``docs/features/speculative_decoding/acceptance_metrics.md``: with
  ``--per-request-spec-decode-metrics summary`` a response (the final usage chunk when
  streaming) carries ``metrics.speculative_decoding`` with ``num_spec_steps``,
  ``num_draft_tokens``, ``num_accepted_draft_tokens`` (bonus excluded), ``acceptance_histogram``,
  ``acceptance_histogram_by_draft_length``, ``mean_acceptance_length``, ``draft_acceptance_rate``,
  ``num_spec_tokens``; ``detailed`` adds ``per_step_accepted`` / ``per_step_drafted``. These are
  per-step counts without times, so they stay in the request's ``spec.raw`` (no RoundRecords).
- ``docs/features/per_request_metrics.md`` (``--enable-per-request-metrics``): ``metrics``
  also holds ``queue_time_ms`` (-> ``queue_s``), ``time_to_first_token_ms`` (scheduled to first
  token: -> ``prefill_s``), ``generation_time_ms`` (first to last token: -> ``decode_s``),
  ``mean_itl_ms``, ``tokens_per_second`` and ``output_token_metrics``.
- Launch: ``vllm serve MODEL --speculative-config '{"model": D, "num_speculative_tokens": k,
  "method": "draft_model"}'`` (``docs/features/speculative_decoding/draft_model.md``).

    >>> x = response_extras({"metrics": {"queue_time_ms": 12.0, "speculative_decoding": {
    ...     "num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 6}}})
    >>> x.queue_s, x.spec["committed"], x.spec["mean_acceptance_length"]
    (0.012, 10, 2.5)
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specpilot.backends import prom
from specpilot.backends.extras import check_keys, header, seconds, spec_summary
from specpilot.backends.facts import hardware_info, model_file, tokenizer_sha256
from specpilot.backends.process import ServerProcess, SubprocessLifecycle, free_port
from specpilot.backends.protocol import (
    SPEC_ACCEPTED,
    SPEC_COMMITTED,
    SPEC_POS,
    SPEC_PROPOSED,
    SPEC_ROUNDS,
    Manifest,
)
from specpilot.backends.scrape import MetricsSource, Scraped, scrape
from specpilot.records import MetricSnapshot, ResponseExtras

SPEC_KEYS = (
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "acceptance_histogram",
    "acceptance_histogram_by_draft_length",
    "num_spec_steps",
    "num_accepted_draft_tokens",
    "num_draft_tokens",
    "num_spec_tokens",
    "per_step_accepted",  # detailed
    "per_step_drafted",  # detailed
)
TIMING_KEYS = (
    "time_to_first_token_ms",
    "generation_time_ms",
    "queue_time_ms",
    "mean_itl_ms",
    "tokens_per_second",
    "output_token_metrics",
)


def normalise_metrics(text: str, prefix: str = "vllm:") -> dict[str, float]:
    """vLLM-style exposition text -> our normalised counter names (``backends.protocol``)."""
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


def parse_metrics(texts: Mapping[str, str]) -> Scraped:
    """vLLM's /metrics: counters only (GPU memory comes from nvidia-smi when vLLM runs here)."""
    return Scraped(normalise_metrics(texts["/metrics"]))


METRICS = MetricsSource("vllm", ("/metrics",), parse_metrics)


def spec_from(
    sd: Mapping[str, Any], engine: str, strict: bool, extra_known: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``metrics.speculative_decoding`` -> ``RequestRecord.spec`` (our definitions)."""
    where = f"{engine} metrics.speculative_decoding"
    unknown = check_keys(sd, SPEC_KEYS + extra_known, where, strict)
    return spec_summary(
        engine,
        "metrics.speculative_decoding",
        proposed=sd.get("num_draft_tokens"),
        accepted=sd.get("num_accepted_draft_tokens"),
        rounds=sd.get("num_spec_steps"),
        histogram=sd.get("acceptance_histogram"),
        raw=sd,
        unknown=unknown,
    )


def response_extras(
    obj: Mapping[str, Any], headers: Mapping[str, str] | None = None, *, strict: bool = False
) -> ResponseExtras:
    """The response's ``metrics`` (timings and ``speculative_decoding``) -> ``ResponseExtras``."""
    metrics = obj.get("metrics")
    out = ResponseExtras(server_request_id=header(headers, "x-request-id") or obj.get("id"))
    if not isinstance(metrics, Mapping):
        return out
    unknown = check_keys(metrics, (*TIMING_KEYS, "speculative_decoding"), "vllm metrics", strict)
    out.queue_s = seconds(metrics.get("queue_time_ms"))
    out.prefill_s = seconds(metrics.get("time_to_first_token_ms"))
    out.decode_s = seconds(metrics.get("generation_time_ms"))
    sd = metrics.get("speculative_decoding")
    if isinstance(sd, Mapping):
        out.spec = spec_from(sd, "vllm", strict)
        if unknown:
            out.spec["unknown_keys"] = unknown + out.spec.get("unknown_keys", [])
    return out


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
    # Per-request statistics in each response (recent vLLM; None / False for older releases,
    # which refuse the flags): speculative counts ("summary" | "detailed") and timings.
    per_request_metrics: str | None = "detailed"
    per_request_timings: bool = True
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
        if self.per_request_timings:
            argv += ["--enable-per-request-metrics"]
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
        return scrape(
            METRICS, self.endpoint, pid=self.pid, run_id=run_id, arm=arm, phase=phase, label=label
        )

    def response_extras(
        self, obj: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> ResponseExtras:
        return response_extras(obj, headers)
