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

A ``ServerMetrics`` owns its own ``CollectorRegistry`` (several apps may live in one process,
as in the tests) and implements the scheduler's observer hooks.

    >>> m = ServerMetrics(model_name="smollm2")
    >>> b"vllm:num_requests_running" in m.exposition()
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from specpilot.records import RoundRecord

if TYPE_CHECKING:
    from specpilot.engine.generate import Engine
    from specpilot.engine.scheduler import Scheduler, Ticket

CONTENT_TYPE = CONTENT_TYPE_LATEST

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


class ServerMetrics:
    """The server's metrics and the scheduler observer that feeds them."""

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
        self._calibration_key: str | None = None

    # ------------------------------------------------------------------ helpers
    def request_outcome(self, outcome: str) -> None:
        self.requests_total.labels(self.model_name, outcome).inc()

    def succeeded(self, finish_reason: str) -> None:
        """Called by the HTTP layer, which knows whether the output became tool calls."""
        self.request_success.labels(self.model_name, finish_reason).inc()

    def strategy(self, table: dict[str, int]) -> None:
        self.strategy_k.clear()
        for scope, k in table.items():
            self.strategy_k.labels(self.model_name, scope).set(k)

    def switched(self, seconds: float) -> None:
        self.strategy_switches.labels(self.model_name).inc()
        self.strategy_switch_seconds.labels(self.model_name).observe(seconds)

    def refresh(self, engine: Engine | None, scheduler: Scheduler | None, ready: bool) -> None:
        """Gauges read at scrape time (queue lengths, KV use, memory)."""
        m = self.model_name
        self.engine_up.labels(m).set(1.0 if ready else 0.0)
        if scheduler is not None:
            running, waiting = scheduler.counts()
            self.num_requests_running.labels(m).set(running)
            self.num_requests_waiting.labels(m).set(waiting)
            tokens = scheduler.kv_tokens_in_use()
            self.kv_tokens.labels(m).set(tokens)
        if engine is not None:
            in_use = engine.max_slots - len(engine.free_slots)
            self.kv_slots.labels(m, "total").set(engine.max_slots)
            self.kv_slots.labels(m, "in_use").set(in_use)
            if scheduler is not None:
                cap = engine.max_slots * engine.max_seq_len
                self.kv_cache_usage.labels(m).set(
                    scheduler.kv_tokens_in_use() / cap if cap else 0.0
                )
            self.calibration(getattr(engine, "calibration", None))
            mem = engine.memory()
            for part, v in (
                ("target_weights", mem.target_weight_bytes),
                ("draft_weights", mem.draft_weight_bytes),
                ("target_kv_allocated", mem.target_kv_bytes_allocated),
                ("draft_kv_allocated", mem.draft_kv_bytes_allocated),
                ("process_rss", mem.rss_bytes),
                ("process_peak_rss", mem.peak_rss_bytes),
            ):
                self.memory.labels(m, part).set(v)

    def calibration(self, cal: dict[str, Any] | None) -> None:
        """Gauges from ``Engine.calibration`` (set once per calibration)."""
        if not cal or cal.get("key", "") + str(cal.get("mode")) == self._calibration_key:
            return
        self._calibration_key = cal.get("key", "") + str(cal.get("mode"))
        m, mode = self.model_name, str(cal.get("mode"))
        kind = str(cal.get("hardware", {}).get("kind", "unknown"))
        for part in (self.weight_format, self.calib_forward, self.calib_ratio):
            part.clear()
        for role in ("target", "draft"):
            if cal.get(role):
                self.weight_format.labels(m, role, cal[role]["chosen"], mode, kind).set(1)
        target = cal["target"]
        chosen = next((f for f in target["formats"] if f["format"] == target["chosen"]), None)
        for row in chosen["curve"] if chosen else []:
            self.calib_forward.labels(m, str(row["batch"]), str(row["tokens"])).set(row["seconds"])
        for batch, curve in cal.get("verify_ratio", {}).items():
            for tokens, ratio in curve.items():
                self.calib_ratio.labels(m, batch, tokens).set(ratio)
        self.calib_seconds.labels(m).set(0.0 if cal.get("cached") else cal.get("seconds", 0.0))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # ------------------------------------------------------------------ observer hooks
    def prefilled(self, tickets: Sequence[Ticket], seconds: float) -> None:
        m = self.model_name
        self.prefill_seconds.labels(m).inc(seconds)
        for t in tickets:
            self.prompt_tokens.labels(m).inc(len(t.prompt_ids))
            self.generation_tokens.labels(m).inc(len(t.state.output_ids) if t.state else 0)
            self.prefill_time.labels(m).observe(seconds)
            if t.queue_s is not None:
                self.queue_time.labels(m).observe(t.queue_s)
                self.queue_seconds.labels(m).inc(t.queue_s)
            if t.first_token_t is not None:
                self.ttft.labels(m).observe(t.first_token_t - t.submitted_t)

    def round_done(self, records: Sequence[RoundRecord], seconds: float) -> None:
        m = self.model_name
        first = records[0]
        self.rounds_total.labels(m).inc()
        self.round_hist.labels(m).observe(seconds)
        self.batch_size.labels(m).observe(len(records))
        # Every row carries the whole round's split: count it once per round.
        self.round_seconds.labels(m, "draft").inc(first.draft_s)
        self.round_seconds.labels(m, "verify").inc(first.verify_s)
        self.round_seconds.labels(m, "overhead").inc(first.overhead_s)
        for rec in records:
            mode = "speculative" if rec.proposed > 0 else "plain"
            self.committed_tokens.labels(m, mode).inc(rec.committed)
            self.generation_tokens.labels(m).inc(rec.committed)
            if rec.committed:
                gap = seconds / rec.committed
                for _ in range(rec.committed):
                    self.itl.labels(m).observe(gap)
            if rec.proposed > 0:
                self.spec_drafts.labels(m).inc()
                self.spec_draft_tokens.labels(m).inc(rec.proposed)
                self.spec_accepted_tokens.labels(m).inc(rec.accepted)
                for pos in range(rec.accepted):
                    self.spec_accepted_per_pos.labels(m, str(pos)).inc()

    def finished(self, ticket: Ticket) -> None:
        m = self.model_name
        self.request_outcome(ticket.status)
        if ticket.finished_t is not None:
            self.e2e.labels(m).observe(ticket.finished_t - ticket.submitted_t)
        if ticket.admitted_t is None and ticket.queue_s is not None:  # left from the queue
            self.queue_time.labels(m).observe(ticket.queue_s)
            self.queue_seconds.labels(m).inc(ticket.queue_s)
        if ticket.decode_s is not None:
            self.decode_time.labels(m).observe(ticket.decode_s)
        self.prompt_tokens_hist.labels(m).observe(len(ticket.prompt_ids))
        if ticket.state is not None:
            self.generation_tokens_hist.labels(m).observe(len(ticket.state.output_ids))
        if ticket.cancel_requested_t is not None or ticket.status in ("cancelled", "timeout"):
            self.cancel_rounds.labels(m).observe(ticket.rounds_after_cancel)
            start = ticket.cancel_requested_t
            if start is None:  # server-side timeout: detected on the scheduler thread
                start = ticket.finished_t
            if ticket.finished_t is not None and start is not None:
                self.cancel_latency.labels(m).observe(max(0.0, ticket.finished_t - start))
