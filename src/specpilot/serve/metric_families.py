"""Every Prometheus metric the server exports, declared here and nowhere else.

Two families:

- vLLM-compatible names (``vllm:...``), so the scraper that reads a vLLM server reads us too.
  Counters follow prometheus_client's exposition: ``vllm:spec_decode_num_drafts`` is exposed as
  ``vllm:spec_decode_num_drafts_total``, as vLLM does. Definitions as in vLLM: a *draft* is one
  speculative round of one request, *draft tokens* its proposed tokens (k), *accepted tokens*
  the drafts the target kept (the bonus/correction token excluded); per-position counter
  ``position=i`` counts rounds that accepted at least i+1 drafts.
- specpilot's own (``specpilot_...``), each with a unit suffix: the round time split, committed
  tokens (bonus token included), queue/prefill/decode time, memory by part, KV slots, strategy
  per scope, cancellations and how many rounds a cancelled request stayed in the batch; and the
  engine's load-time calibration (``engine.calibration``): the weight format of target and
  draft, the chosen format's measured forward time and verify-cost ratio per (batch, tokens).

``MetricFamilies`` declares them on its own ``CollectorRegistry`` (several apps may live in one
process, as in the tests); ``serve.metrics.ServerMetrics`` feeds them and exposes them.

    >>> from prometheus_client import generate_latest
    >>> b"specpilot_kv_slots" in generate_latest(MetricFamilies(model_name="m").registry)
    True
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# Buckets in seconds, sized for a CPU engine (ms per token) up to a GPU one (sub-ms).
_LATENCY = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_REQUEST = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)
_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class MetricFamilies:
    """Every metric of one server, declared on its own registry (``registry``), none fed yet."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        disable_created_metrics()  # no *_created series (as vLLM): scrapers diff *_total only
        r = self.registry = CollectorRegistry(auto_describe=True)
        lbl = ["model_name"]

        # --- vLLM-compatible ------------------------------------------------------------
        self.num_requests_running = Gauge(
            "vllm:num_requests_running",
            "Requests in the decode batch (holding a KV slot).",
            lbl,
            registry=r,
        )
        self.num_requests_waiting = Gauge(
            "vllm:num_requests_waiting",
            "Requests admitted to the queue, waiting for a KV slot.",
            lbl,
            registry=r,
        )
        self.kv_cache_usage = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV cache usage, 1 = full: target-cache tokens in use / (slots x max_seq_len).",
            lbl,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed.", lbl, registry=r
        )
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Output tokens generated (committed).", lbl, registry=r
        )
        self.request_success = Counter(
            "vllm:request_success",
            "Requests that finished normally, by finish reason (stop | length | tool_calls).",
            [*lbl, "finished_reason"],
            registry=r,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Server-side time from request arrival to the first output token (queue + prefill).",
            lbl,
            buckets=_LATENCY,
            registry=r,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Gap between successive token emissions divided over the tokens emitted (one observation per token).",
            lbl,
            buckets=_LATENCY,
            registry=r,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Server-side time from arrival to the end of the request.",
            lbl,
            buckets=_REQUEST,
            registry=r,
        )
        self.queue_time = Histogram(
            "vllm:request_queue_time_seconds",
            "Time spent waiting for a KV slot.",
            lbl,
            buckets=_REQUEST,
            registry=r,
        )
        self.prefill_time = Histogram(
            "vllm:request_prefill_time_seconds",
            "Prefill forward time (target + draft) of the request's batch.",
            lbl,
            buckets=_LATENCY,
            registry=r,
        )
        self.decode_time = Histogram(
            "vllm:request_decode_time_seconds",
            "First token to last token.",
            lbl,
            buckets=_REQUEST,
            registry=r,
        )
        self.prompt_tokens_hist = Histogram(
            "vllm:request_prompt_tokens",
            "Prompt length per request.",
            lbl,
            buckets=_TOKENS,
            registry=r,
        )
        self.generation_tokens_hist = Histogram(
            "vllm:request_generation_tokens",
            "Output length per request.",
            lbl,
            buckets=_TOKENS,
            registry=r,
        )
        self.spec_drafts = Counter(
            "vllm:spec_decode_num_drafts",
            "Speculative rounds (one per request per round with k > 0).",
            lbl,
            registry=r,
        )
        self.spec_draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens",
            "Draft tokens proposed (sum of k).",
            lbl,
            registry=r,
        )
        self.spec_accepted_tokens = Counter(
            "vllm:spec_decode_num_accepted_tokens",
            "Draft tokens accepted by the target (bonus/correction token excluded).",
            lbl,
            registry=r,
        )
        self.spec_accepted_per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Rounds whose draft at this position (0-based) was accepted.",
            [*lbl, "position"],
            registry=r,
        )

        # --- specpilot's own ---------------------------------------------------------------
        self.requests_total = Counter(
            "specpilot_requests",
            "Requests by outcome: finished | cancelled | timeout | queue_timeout | error | rejected_queue_full | rejected_draining | invalid.",
            [*lbl, "outcome"],
            registry=r,
        )
        self.rounds_total = Counter(
            "specpilot_decode_rounds", "Batched decode rounds run by the engine.", lbl, registry=r
        )
        self.round_seconds = Counter(
            "specpilot_round_seconds",
            "Decode round wall time by part (draft | verify | overhead), counted once per batched round.",
            [*lbl, "part"],
            registry=r,
        )
        self.round_hist = Histogram(
            "specpilot_round_duration_seconds",
            "Wall time of one batched decode round.",
            lbl,
            buckets=_LATENCY,
            registry=r,
        )
        self.batch_size = Histogram(
            "specpilot_batch_size_requests",
            "Rows in a decode round.",
            lbl,
            buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64),
            registry=r,
        )
        self.committed_tokens = Counter(
            "specpilot_committed_tokens",
            "Tokens appended by decode rounds (bonus/correction token included), by mode (plain | speculative).",
            [*lbl, "mode"],
            registry=r,
        )
        self.prefill_seconds = Counter(
            "specpilot_prefill_seconds", "Wall time of batched prefills.", lbl, registry=r
        )
        self.queue_seconds = Counter(
            "specpilot_queue_seconds",
            "Summed queue time of requests that left the queue.",
            lbl,
            registry=r,
        )
        self.memory = Gauge(
            "specpilot_memory_bytes",
            "Memory by part: target_weights | draft_weights | target_kv_allocated | draft_kv_allocated | process_rss | process_peak_rss.",
            [*lbl, "part"],
            registry=r,
        )
        self.kv_slots = Gauge(
            "specpilot_kv_slots",
            "KV cache slots by state (total | in_use).",
            [*lbl, "state"],
            registry=r,
        )
        self.kv_tokens = Gauge(
            "specpilot_kv_tokens_in_use", "Tokens held in the target's KV cache.", lbl, registry=r
        )
        self.strategy_k = Gauge(
            "specpilot_strategy_draft_tokens",
            "Speculative strategy in force per scope: draft tokens per round (0 = off).",
            [*lbl, "scope"],
            registry=r,
        )
        self.strategy_switches = Counter(
            "specpilot_strategy_switches",
            "Strategy changes applied (admin endpoint or reload).",
            lbl,
            registry=r,
        )
        self.strategy_switch_seconds = Histogram(
            "specpilot_strategy_switch_seconds",
            "From receipt of a switch (admin request or reload) to the new strategy being in force for new requests.",
            lbl,
            buckets=(1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0),
            registry=r,
        )
        self.cancel_rounds = Histogram(
            "specpilot_cancel_rounds",
            "Decode rounds that ended after a request was cancelled and before it left the batch.",
            lbl,
            buckets=(0, 1, 2, 4, 8),
            registry=r,
        )
        self.cancel_latency = Histogram(
            "specpilot_cancel_latency_seconds",
            "From cancellation (disconnect or timeout) to the request's KV slot being freed.",
            lbl,
            buckets=_LATENCY,
            registry=r,
        )
        self.engine_up = Gauge(
            "specpilot_engine_ready",
            "1 when the engine is loaded and accepting requests.",
            lbl,
            registry=r,
        )
        self.weight_format = Gauge(
            "specpilot_weight_format_info",
            "1 for the weight format in use per model role (target | draft), with the calibration mode (measured | fixed | skipped) and the machine kind.",
            [*lbl, "role", "format", "mode", "hardware"],
            registry=r,
        )
        self.calib_forward = Gauge(
            "specpilot_calibration_forward_seconds",
            "Median target forward time at load-time calibration, chosen format, by batch rows and new tokens.",
            [*lbl, "batch", "tokens"],
            registry=r,
        )
        self.calib_ratio = Gauge(
            "specpilot_calibration_verify_cost_ratio",
            "Verify-cost curve v(n): forward time for n new tokens / for 1, chosen format, per batch.",
            [*lbl, "batch", "tokens"],
            registry=r,
        )
        self.calib_seconds = Gauge(
            "specpilot_calibration_duration_seconds",
            "Wall time the load-time calibration took (0 when read from the cache).",
            lbl,
            registry=r,
        )
