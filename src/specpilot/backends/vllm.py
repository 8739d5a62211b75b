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
  ``num_spec_tokens``; ``detailed`` adds ``per_step_accepted`` / ``per_step_drafted``: per-step
  counts without times, which become round records with derived times (``rounds_from``).
- ``docs/features/per_request_metrics.md`` (``--enable-per-request-metrics``): ``metrics``
  also holds ``queue_time_ms`` (-> ``queue_s``), ``time_to_first_token_ms`` (scheduled to first
  token: -> ``prefill_s``), ``generation_time_ms`` (first to last token: -> ``decode_s``),
  ``mean_itl_ms``, ``tokens_per_second`` and ``output_token_metrics``.
- ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``): gauges ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (0..1; ``gpu_cache_usage_perc``
  before 0.9), the counter ``vllm:num_preemptions`` (``_total``), and ``vllm:cache_config_info``
  whose labels are ``CacheConfig.metrics_info()`` (``vllm/config/cache.py``): ``num_gpu_blocks``,
  ``block_size`` and, in recent releases, ``kv_cache_size_tokens`` and
  ``kv_cache_max_concurrency`` ("maximum concurrency at max_model_len tokens", what vLLM logs
  at start). ``GET /v1/models`` gives ``max_model_len``
  (``vllm/entrypoints/openai/models/serving.py``).
- Launch: ``vllm serve MODEL --speculative-config '{"model": D, "num_speculative_tokens": k,
  "method": "draft_model"}'`` (``docs/features/speculative_decoding/draft_model.md``).

    >>> x = response_extras({"metrics": {"queue_time_ms": 12.0, "speculative_decoding": {
    ...     "num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 6}}})
    >>> x.queue_s, x.spec["committed"], x.spec["mean_acceptance_length"]
    (0.012, 10, 2.5)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from specpilot.backends import prom
from specpilot.backends.extras import check_keys, header, seconds, spec_summary
from specpilot.backends.facts import hardware_info, model_file, tokenizer_sha256
from specpilot.backends.process import ServerProcess
from specpilot.backends.protocol import (
    CONTEXT,
    KV_SEQUENCES,
    KV_TOKENS,
    KV_USE,
    PREEMPTIONS,
    SPEC_ACCEPTED,
    SPEC_COMMITTED,
    SPEC_POS,
    SPEC_PROPOSED,
    SPEC_ROUNDS,
    START_TIMEOUT_S,
    Manifest,
)
from specpilot.backends.scrape import MetricsSource, Scraped, max_model_len
from specpilot.backends.served import SubprocessLifecycle
from specpilot.backends.vllm_sizes import DTYPE_BYTES, hf_config, kv_bytes_per_token, weight_bytes
from specpilot.records import MetricSnapshot, ResponseExtras, RoundRecord

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
        (PREEMPTIONS, "num_preemptions"),
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
            out[KV_USE] = v
            break
    return out


def admissible(labels: Mapping[str, str], context: float | None) -> dict[str, float]:
    """From ``vllm:cache_config_info``'s labels: the KV cache in tokens (``num_gpu_blocks`` x
    ``block_size``; on the CPU backend "gpu" blocks are the CPU cache's) and the sequences of
    ``context`` tokens it admits: vLLM's own ``kv_cache_max_concurrency`` where it publishes
    it, else blocks x block size / ``context`` (max_model_len, from ``/v1/models``).

        >>> admissible({"num_gpu_blocks": "182", "block_size": "128"}, 1024.0)
        {'kv_capacity_tokens': 23296.0, 'kv_admissible_sequences': 22.75}
    """
    out: dict[str, float] = {}
    with contextlib.suppress(KeyError, ValueError):
        out[KV_TOKENS] = float(int(labels["num_gpu_blocks"]) * int(labels["block_size"]))
    with contextlib.suppress(KeyError, ValueError):
        out[KV_SEQUENCES] = float(labels["kv_cache_max_concurrency"])  # "None": not yet known
    if KV_SEQUENCES not in out and KV_TOKENS in out and context:
        out[KV_SEQUENCES] = out[KV_TOKENS] / context
    return out


def parse_metrics(texts: Mapping[str, str]) -> Scraped:
    """vLLM's /metrics: counters, gauges, and the KV cache's size and admissible sequences
    (``admissible``, summed over engine cores; ``/v1/models`` when read gives the context).
    Bytes need the model's shape: ``VllmBackend.scrape``."""
    text = texts["/metrics"]
    out = normalise_metrics(text)
    context = max_model_len(texts.get("/v1/models"))
    if context is not None:
        out[CONTEXT] = context
    for sample in prom.parse(text):  # one per engine core (data parallel): their sum
        if sample.name == "vllm:cache_config_info":
            for k, v in admissible(sample.labels, context).items():
                out[k] = out.get(k, 0.0) + v
    return Scraped(out)


METRICS = MetricsSource("vllm", ("/metrics", "/v1/models"), parse_metrics, ("/metrics",))


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


def rounds_from(
    sd: Mapping[str, Any], output_tokens: int | None, decode_s: float | None
) -> list[RoundRecord]:
    """``per_step_accepted`` / ``per_step_drafted`` (``detailed``) -> one ``RoundRecord`` per
    speculative step: proposed = drafted, accepted, committed = accepted + 1 (the bonus or
    correction token). The first output token comes from the prefill, so the rounds commit at
    most output tokens - 1; a round past that is cut (``truncated`` "length").

    vLLM exports no per-round times: each round gets committed x the request's decode time per
    token (generation time / tokens after the first) as ``verify_s``, so the draft / verify
    split of a vLLM round is not known (``draft_s`` 0); the report says so.

        >>> [(r.proposed, r.accepted, r.committed) for r in rounds_from(
        ...     {"per_step_accepted": [2, 0, 3], "per_step_drafted": [3, 3, 3]}, 6, 0.5)]
        [(3, 2, 3), (3, 0, 1), (3, 3, 1)]
    """
    acc, drafted = sd.get("per_step_accepted"), sd.get("per_step_drafted")
    if not isinstance(acc, list) or not isinstance(drafted, list) or len(acc) != len(drafted):
        return []
    per_token = None
    if decode_s is not None and output_tokens and output_tokens > 1:
        per_token = decode_s / (output_tokens - 1)
    left = output_tokens - 1 if output_tokens is not None else None
    out = []
    for i, (a, d) in enumerate(zip(acc, drafted, strict=True)):
        committed, cut = int(a) + 1, None
        if left is not None:
            if left <= 0:
                break
            if committed > left:
                committed, cut = left, "length"
            left -= committed
        out.append(
            RoundRecord(
                request_id="",
                round_index=i,
                proposed=int(d),
                accepted=int(a),
                committed=committed,
                draft_s=0.0,
                verify_s=committed * per_token if per_token is not None else 0.0,
                overhead_s=0.0,
                truncated=cut,
            )
        )
    return out


def response_extras(
    obj: Mapping[str, Any], headers: Mapping[str, str] | None = None, *, strict: bool = False
) -> ResponseExtras:
    """The response's ``metrics`` (timings and ``speculative_decoding``) -> ``ResponseExtras``;
    ``detailed`` per-step counts become round records."""
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
        usage = obj.get("usage")
        n = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
        out.rounds = rounds_from(sd, int(n) if isinstance(n, int) else None, out.decode_s)
    return out


@dataclass
class VllmBackend(SubprocessLifecycle):
    """``vllm serve`` as a subprocess: on a GPU, or on this CPU from the venv that
    ``specpilot engines install vllm`` made (its executable and launch environment).

    draft + k: draft-model speculation (``method`` "draft_model"); ``speculative_config``
    overrides everything for other methods (ngram, suffix, eagle...), as vLLM's own JSON.
    ``kv_space_gib`` / ``threads_bind``: the CPU backend's ``VLLM_CPU_KVCACHE_SPACE`` and
    ``VLLM_CPU_OMP_THREADS_BIND``; ``env``: more variables for the server.
    """

    model: str
    draft: str | None = None
    k: int = 3
    method: str = "draft_model"
    speculative_config: dict[str, Any] | None = None
    host: str = "127.0.0.1"
    port: int = 0
    served_model_name: str | None = None
    dtype: str | None = None
    enforce_eager: bool = False
    # Per-request statistics in each response (recent vLLM; None / False for older releases,
    # which refuse the flags): speculative counts ("summary" | "detailed") and timings.
    per_request_metrics: str | None = "detailed"
    per_request_timings: bool = True
    extra_args: list[str] = field(default_factory=list)
    executable: str | None = None
    venv: str | None = None
    kv_space_gib: int | None = None  # VLLM_CPU_KVCACHE_SPACE takes whole GiB
    threads_bind: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    name: str = "vllm"
    metrics: ClassVar[MetricsSource] = METRICS
    parse_extras = staticmethod(response_extras)

    def __post_init__(self) -> None:
        self.listen()
        self._served_version: str | None = None
        from specpilot.backends.vllm_install import default_venv, installed

        self._install = installed(Path(self.venv) if self.venv else default_venv())

    def spec_config(self) -> dict[str, Any] | None:
        if self.speculative_config is not None:
            return self.speculative_config
        if self.draft is None:
            return None
        return {"model": self.draft, "num_speculative_tokens": self.k, "method": self.method}

    def command(self) -> list[str]:
        exe = self.executable or (self._install.executable if self._install else None)
        exe = exe or shutil.which("vllm")
        argv = (
            [exe, "serve"] if exe else [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
        )
        argv += [self.model, "--host", self.host, "--port", str(self.port)]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        if self.dtype:
            argv += ["--dtype", self.dtype]
        if self.enforce_eager:
            argv += ["--enforce-eager"]
        sc = self.spec_config()
        if sc is not None:
            argv += ["--speculative-config", json.dumps(sc, sort_keys=True)]
            if self.per_request_metrics:
                argv += ["--per-request-spec-decode-metrics", self.per_request_metrics]
        if self.per_request_timings:
            argv += ["--enable-per-request-metrics"]
        return argv + list(self.extra_args)

    def launch_env(self) -> dict[str, str]:
        """The variables the server gets beyond ours: the install's, the CPU sizes, ``env``."""
        out = dict(self._install.env) if self._install else {}
        out.setdefault("HF_HUB_OFFLINE", "1")  # never download weights at run time
        if self.kv_space_gib is not None:
            out["VLLM_CPU_KVCACHE_SPACE"] = str(int(self.kv_space_gib))
        if self.threads_bind is not None:
            out["VLLM_CPU_OMP_THREADS_BIND"] = self.threads_bind
        out.update(self.env)
        return out

    def start(self, timeout_s: float | None = None) -> None:
        import os

        # vLLM cannot watch its starter itself: the guard ends it if the pilot dies
        guarded = [sys.executable, "-m", "specpilot.backends.guard", str(os.getpid()), "--"]
        self._server = ServerProcess(guarded + self.command(), self.endpoint, env=self.launch_env())
        self._server.start(START_TIMEOUT_S if timeout_s is None else timeout_s)
        with contextlib.suppress(Exception):
            import httpx

            self._served_version = str(
                httpx.get(self.endpoint + "/version", timeout=5).json()["version"]
            )

    def version(self) -> str:
        """What the running server says (``GET /version``), else the install's, else unknown."""
        if self._served_version:
            return self._served_version
        if self._install is not None:
            return self._install.version
        return "unknown"

    def _dtype_bytes(self) -> int:
        want = self.dtype or str(hf_config(self.model).get("dtype") or "bfloat16")
        return DTYPE_BYTES.get(want, 2)

    def describe(self) -> Manifest:
        models = tuple(
            m for m in (model_file("target", self.model), model_file("draft", self.draft)) if m
        )
        notes = []
        if self._install is not None:
            notes.append(
                f"vLLM {self._install.version} ({self._install.device}) from "
                f"{self._install.venv}; install fixes: {'; '.join(self._install.fixes) or 'none'}"
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
            notes=tuple(notes),
        )

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot:
        """Counters, RSS of the server's process tree, and memory derived from the model's
        shape: KV bytes = the cache's tokens (``cache_config_info``) x K/V bytes per token
        (target and draft layers share vLLM's cache), weights from the safetensors sizes."""
        snap = super().scrape(run_id, arm, phase, label)
        tokens = snap.metrics.get("kv_capacity_tokens")
        b = self._dtype_bytes()
        per_target = kv_bytes_per_token(hf_config(self.model), b)
        per_draft = kv_bytes_per_token(hf_config(self.draft), b) if self.draft else 0
        update: dict[str, Any] = {
            "target_weight_bytes": snap.target_weight_bytes or weight_bytes(self.model, b),
        }
        if self.draft:
            update["draft_weight_bytes"] = snap.draft_weight_bytes or weight_bytes(self.draft, b)
        if tokens and per_target:
            update["kv_allocated_bytes"] = int(tokens * (per_target + per_draft))
            if per_draft:
                update["draft_kv_bytes"] = int(tokens * per_draft)
        return dataclasses.replace(snap, **{k: v for k, v in update.items() if v is not None})
