"""SGLang: launch command, ``/get_server_info`` and ``/metrics``, per-request ``meta_info``.

Formats copied from SGLang's sources (the tests replay them):
- Launch: ``python -m sglang.launch_server --model-path T --speculative-algorithm STANDALONE
  --speculative-draft-model-path D --speculative-num-steps k --speculative-eagle-topk 1
  --speculative-num-draft-tokens k+1`` (a STANDALONE draft is an independent draft model).
- ``python/sglang/srt/managers/tokenizer_manager.py`` (``_calculate_spec_decoding_metrics``):
  ``meta_info`` of a native ``/generate`` response has ``spec_verify_ct`` (verification
  steps), ``spec_accept_token_num`` (accepted draft tokens), ``spec_draft_token_num``
  (= steps x (num_draft_tokens - 1)), ``spec_accept_length`` = completion_tokens /
  spec_verify_ct (bonus token *included*). Newer releases name them
  ``spec_num_correct_drafts`` / ``spec_num_proposed_drafts``.
- ``/get_server_info`` -> ``internal_states[0].avg_spec_accept_length`` (a running average since
  start, bonus included) and the gauge ``sglang:spec_accept_length``. Neither is a counter: a
  phase's acceptance comes from per-request ``meta_info``, not from differencing these.
- ``python/sglang/srt/metrics/collector.py`` (``SchedulerMetricsCollector``, with
  ``--enable-metrics``): gauges ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  ``sglang:token_usage`` (KV pool use, 0..1), ``sglang:max_total_num_tokens`` (the KV pool in
  tokens, sized from ``mem_fraction_static``) and the counter
  ``sglang:num_retracted_requests_total`` (requests put back in the queue when the pool runs
  out: SGLang's preemption). ``/get_server_info`` also says ``max_total_num_tokens``;
  ``GET /v1/models`` gives ``max_model_len`` (``srt/entrypoints/openai/protocol.py``
  ``ModelCard``), the context one request may hold.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from specpilot.backends import prom
from specpilot.backends.extras import check_keys, header, spec_summary
from specpilot.backends.facts import hardware_info, model_file, tokenizer_sha256
from specpilot.backends.protocol import (
    CONTEXT,
    KV_SEQUENCES,
    KV_TOKENS,
    KV_USE,
    PREEMPTIONS,
    RUNNING,
    WAITING,
    Manifest,
)
from specpilot.backends.scrape import MetricsSource, Scraped, max_model_len
from specpilot.backends.served import SubprocessLifecycle
from specpilot.records import ResponseExtras

# meta_info keys of a native /generate response (tokenizer_manager.py and the public field list
# of SGLang's own benchmark scripts); the spec_* ones are read, the others known and ignored.
META_KEYS = (
    "id",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "cached_tokens",
    "cached_tokens_details",
    "num_retractions",
    "queue_time",
    "e2e_latency",
    "decode_throughput",
    "weight_version",
    "forward_entry_time",
    "prefill_finished_time",
    "api_server_dispatch_finish_ts",
    "request_received_ts",
    "request_finished_ts",
    "response_sent_to_client_ts",
    "spec_accept_rate",
    "spec_accept_length",
    "spec_verify_ct",
    "spec_accept_token_num",
    "spec_draft_token_num",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "spec_accepted_drafts",
    "spec_proposed_drafts",
    "spec_accept_histogram",
    "spec_correct_drafts_histogram",
    "input_token_logprobs",
    "output_token_logprobs",
    "input_top_logprobs",
    "output_top_logprobs",
    "input_token_ids_logprobs",
    "output_token_ids_logprobs",
    "hidden_states",
)


def normalise_server_info(info: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(info.get("max_total_num_tokens"), int | float):
        out[KV_TOKENS] = float(info["max_total_num_tokens"])
    states = info.get("internal_states") or []
    if states and isinstance(states[0], dict):
        s0 = states[0]
        if s0.get("avg_spec_accept_length") is not None:
            out["spec_mean_acceptance_length_since_start"] = float(s0["avg_spec_accept_length"])
        if s0.get("last_gen_throughput") is not None:
            out["generation_throughput_tok_s"] = float(s0["last_gen_throughput"])
    return out


def normalise_metrics(text: str) -> dict[str, float]:
    s = prom.parse(text)
    out: dict[str, float] = {}
    for ours, theirs in (
        ("spec_mean_acceptance_length_gauge", "sglang:spec_accept_length"),
        ("spec_accept_rate_gauge", "sglang:spec_accept_rate"),
        (RUNNING, "sglang:num_running_reqs"),
        (WAITING, "sglang:num_queue_reqs"),
        (KV_USE, "sglang:token_usage"),
        (KV_TOKENS, "sglang:max_total_num_tokens"),
    ):
        v = prom.total(s, theirs)
        if v is not None:
            out[ours] = v
    for ours, theirs in (
        ("generation_tokens", "sglang:generation_tokens"),
        ("prompt_tokens", "sglang:prompt_tokens"),
        (PREEMPTIONS, "sglang:num_retracted_requests"),
    ):
        v = prom.total(s, theirs + "_total", theirs)
        if v is not None:
            out[ours] = v
    return out


def parse_metrics(texts: Mapping[str, str]) -> Scraped:
    """``/get_server_info`` (required at phase edges), ``/metrics`` (with ``--enable-metrics``;
    the one path read inside a phase) and ``/v1/models`` (the context): the KV pool admits
    ``max_total_num_tokens`` / ``max_model_len`` sequences of the longest context.

    Neither holds counters of speculative rounds: a phase's acceptance comes from the
    requests' ``meta_info``; these are gauges and running averages.
    """
    metrics: dict[str, float] = {}
    if "/get_server_info" in texts:
        metrics.update(normalise_server_info(json.loads(texts["/get_server_info"])))
    if "/metrics" in texts:
        metrics.update(normalise_metrics(texts["/metrics"]))
    context = max_model_len(texts.get("/v1/models"))
    if context is not None:
        metrics[CONTEXT] = context
        if metrics.get(KV_TOKENS):
            metrics[KV_SEQUENCES] = metrics[KV_TOKENS] / context
    return Scraped(metrics)


METRICS = MetricsSource(
    "sglang", ("/get_server_info", "/metrics", "/v1/models"), parse_metrics, ("/metrics",)
)


def response_extras(
    obj: Mapping[str, Any], headers: Mapping[str, str] | None = None, *, strict: bool = False
) -> ResponseExtras:
    """``meta_info`` of a native ``/generate`` response -> ``RequestRecord.spec``."""
    out = ResponseExtras(server_request_id=header(headers, "x-request-id") or obj.get("id"))
    mi = obj.get("meta_info")
    if not isinstance(mi, Mapping):
        return out
    unknown = check_keys(mi, META_KEYS, "sglang meta_info", strict)
    if "spec_verify_ct" not in mi:
        return out
    rounds = mi.get("spec_verify_ct")
    accepted = mi.get(
        "spec_accept_token_num", mi.get("spec_num_correct_drafts", mi.get("spec_accepted_drafts"))
    )
    proposed = mi.get(
        "spec_draft_token_num", mi.get("spec_num_proposed_drafts", mi.get("spec_proposed_drafts"))
    )
    if accepted is None and rounds and mi.get("completion_tokens") is not None:
        # spec_accept_length = completion_tokens / spec_verify_ct (bonus token included)
        accepted = mi["completion_tokens"] - rounds
    out.spec = spec_summary(
        "sglang",
        "meta_info",
        proposed=proposed,
        accepted=accepted,
        rounds=rounds,
        raw=mi,
        unknown=unknown,
    )
    return out


@dataclass
class SglangBackend(SubprocessLifecycle):
    model: str
    draft: str | None = None
    k: int = 3
    algorithm: str = "STANDALONE"
    host: str = "127.0.0.1"
    port: int = 0
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # more variables for the server
    name: str = "sglang"
    metrics: ClassVar[MetricsSource] = METRICS
    parse_extras = staticmethod(response_extras)

    def __post_init__(self) -> None:
        self.listen()

    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", self.model]
        argv += ["--host", self.host, "--port", str(self.port), "--enable-metrics"]
        if self.draft is not None:
            argv += [
                "--speculative-algorithm",
                self.algorithm,
                "--speculative-draft-model-path",
                self.draft,
                "--speculative-num-steps",
                str(self.k),
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                str(self.k + 1),
            ]
        return argv + list(self.extra_args)

    def describe(self) -> Manifest:
        try:
            from importlib.metadata import version

            ver = version("sglang")
        except Exception:
            ver = "unknown"
        spec = {
            "algorithm": self.algorithm,
            "num_steps": self.k,
            "eagle_topk": 1,
            "num_draft_tokens": self.k + 1,
        }
        return Manifest(
            engine="sglang",
            engine_version=ver,
            endpoint=self.endpoint,
            models=tuple(
                m for m in (model_file("target", self.model), model_file("draft", self.draft)) if m
            ),
            tokenizer_sha256=tokenizer_sha256(self.model),
            launch=tuple(self.command()),
            speculative=spec if self.draft else {},
            hardware=hardware_info(),
        )
