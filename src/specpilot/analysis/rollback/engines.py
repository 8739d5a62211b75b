"""Where each engine's ``/metrics`` keeps what a rollback rule reads, with the file that
declares the names (checked against each project's source).

A rule compares the engine's own figure with the SLO's threshold, so it must say how that
figure differs from specpilot's definition (``definitions.SLO_QUANTITIES``): the engines time
from arrival at the server, not from the client's send, and they cut inter-token time
differently. ``notes`` says so per quantity; the rule's annotation carries it.

    >>> ENGINES["sglang"].histogram("itl")
    'sglang:inter_token_latency_seconds'
    >>> ENGINES["llamacpp"].histogram("ttft") is None, ENGINES["llamacpp"].mean("tpot") is not None
    (True, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineMetrics:
    """One engine's metric names: latency histograms (seconds; rules read ``<name>_bucket``),
    a KV-usage gauge (1 = full), and for an engine without histograms the counters whose
    ratio is a mean time per generated token."""

    engine: str
    source: str  # the engine's file that declares these names
    histograms: Mapping[str, str] = field(default_factory=dict)  # quantity -> histogram
    kv_usage: str | None = None
    # no KV gauge: a gauge of requests waiting for a slot (> 0: every slot is taken)
    waiting: str | None = None
    decode_seconds: str | None = None  # counter: seconds spent generating
    decode_tokens: str | None = None  # counter: tokens generated
    labelled: bool = True  # False: the engine's series carry no labels of their own
    notes: Mapping[str, str] = field(default_factory=dict)  # quantity -> how it differs

    def histogram(self, quantity: str) -> str | None:
        return self.histograms.get(quantity)

    def mean(self, quantity: str, sel: str = "", window: str = "5m") -> str | None:
        """PromQL for the window's mean seconds per generated token, where the engine has no
        histogram of ``quantity`` (tpot, itl) but the two counters; else None."""
        if quantity not in ("tpot", "itl") or self.histogram(quantity) or not self.decode_tokens:
            return None
        return (
            f"sum(rate({self.decode_seconds}{{{sel}}}[{window}])) / "
            f"sum(rate({self.decode_tokens}{{{sel}}}[{window}]))"
        )


# vLLM V1: vllm/v1/metrics/loggers.py (PrometheusStatLogger); what they observe:
# vllm/v1/metrics/stats.py (IterationStats.update_from_output, update_from_finished_request).
# vllm:time_per_output_token_seconds was renamed vllm:inter_token_latency_seconds in 0.11 (the
# old name only behind --show-hidden-metrics-for-version); the per-request TPOT is
# vllm:request_time_per_output_token_seconds.
VLLM = EngineMetrics(
    "vllm",
    "vllm/v1/metrics/loggers.py",
    histograms={
        "ttft": "vllm:time_to_first_token_seconds",
        "tpot": "vllm:request_time_per_output_token_seconds",
        "itl": "vllm:inter_token_latency_seconds",
        "e2e": "vllm:e2e_request_latency_seconds",
    },
    kv_usage="vllm:kv_cache_usage_perc",
    notes={
        "tpot": "vLLM's per-request decode time / (tokens - 1), at the server",
        "itl": "vLLM observes one gap per engine step, however many tokens the step emits: "
        "with speculation it is specpilot's per-chunk gap, at least the per-token ITL, so "
        "this rule fires no later than a per-token one would",
    },
)

# SGLang: python/sglang/srt/metrics/collector.py (TokenizerMetricsCollector for latencies,
# SchedulerMetricsCollector for sglang:token_usage, the KV token pool in use, 1 = full).
SGLANG = EngineMetrics(
    "sglang",
    "python/sglang/srt/metrics/collector.py",
    histograms={
        "ttft": "sglang:time_to_first_token_seconds",
        "tpot": "sglang:inter_token_latency_seconds",
        "itl": "sglang:inter_token_latency_seconds",
        "e2e": "sglang:e2e_request_latency_seconds",
    },
    kv_usage="sglang:token_usage",
    notes={
        "tpot": "SGLang has no per-request TPOT histogram: the rule reads its per-token ITL "
        "(a gap divided over the tokens it brought, counted once per token)",
        "itl": "SGLang divides each gap over the tokens it brought, as specpilot's ITL does",
    },
)

# llama.cpp server: tools/server/server-task.cpp (server_task_result_metrics::to_metrics,
# which the /metrics route of tools/server/server-context.cpp renders). Counters and gauges
# only: no latency histogram, no labels (a selector can only match the scrape's target labels,
# e.g. job), and no KV-usage gauge any more (llamacpp:kv_cache_usage_ratio is gone).
# tokens_predicted_seconds_total adds each finished request's generation time (first token
# to last), tokens_predicted_total its generated tokens.
LLAMACPP = EngineMetrics(
    "llamacpp",
    "tools/server/server-task.cpp",
    waiting="llamacpp:requests_deferred",
    decode_seconds="llamacpp:tokens_predicted_seconds_total",
    decode_tokens="llamacpp:tokens_predicted_total",
    labelled=False,
    notes={
        "tpot": "llama.cpp exports no latency histogram: the rule reads the window's mean "
        "generation seconds per generated token (tokens_predicted_seconds_total / "
        "tokens_predicted_total over the requests finished in it), a mean, not the "
        "percentile; a breach only the tail shows passes unseen",
        "itl": "llama.cpp exports no latency histogram: the rule reads the window's mean "
        "generation seconds per generated token, a mean, not the percentile",
        "ttft": "llama.cpp exports no TTFT: no rule (llamacpp:requests_deferred > 0, the "
        "queue that grows TTFT under load, is watched as slot pressure)",
        "e2e": "llama.cpp exports no request latency: no rule",
    },
)

# specpilot's own server: serve/metric_families.py (vLLM's names for what it exports; its
# ITL is divided over the tokens of each emission; no per-request TPOT histogram).
BUILTIN = EngineMetrics(
    "builtin",
    "specpilot/serve/metric_families.py",
    histograms={
        "ttft": "vllm:time_to_first_token_seconds",
        "tpot": "vllm:inter_token_latency_seconds",
        "itl": "vllm:inter_token_latency_seconds",
        "e2e": "vllm:e2e_request_latency_seconds",
    },
    kv_usage="vllm:kv_cache_usage_perc",
    notes={
        "tpot": "specpilot's server has no per-request TPOT histogram: the rule reads its "
        "per-token ITL",
    },
)

# a managed API (``openai``): no /metrics of the engine; only the application's own checks
MANAGED = EngineMetrics("openai", "none: a managed API exposes no engine metrics")

ENGINES: dict[str, EngineMetrics] = {
    m.engine: m for m in (VLLM, SGLANG, LLAMACPP, BUILTIN, MANAGED)
}


def metrics_of(engine: str) -> EngineMetrics:
    """The engine's names; an engine not listed has none (only application rules)."""
    return ENGINES.get(engine, EngineMetrics(engine, "none: no metric names known"))


__all__: Sequence[str] = ["ENGINES", "EngineMetrics", "metrics_of"]
