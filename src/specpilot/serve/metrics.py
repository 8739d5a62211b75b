"""The server's metrics, fed and exposed: the scheduler's observer hooks, the gauges read at
scrape time (queue lengths, KV use, memory, the engine's load-time calibration) and the
exposition. The metrics themselves (names, help texts, labels, buckets) are declared in
``serve.metric_families`` and nowhere else.

A ``ServerMetrics`` owns its own ``CollectorRegistry`` (several apps may live in one process,
as in the tests) and implements the scheduler's observer hooks.

    >>> m = ServerMetrics(model_name="smollm2")
    >>> b"vllm:num_requests_running" in m.exposition()
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from specpilot.records import RoundRecord
from specpilot.serve.metric_families import MetricFamilies

if TYPE_CHECKING:
    from specpilot.engine.generate import Engine
    from specpilot.engine.scheduler import Scheduler
    from specpilot.engine.tickets import Ticket

CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics(MetricFamilies):
    """The server's metrics and the scheduler observer that feeds them."""

    def __init__(self, model_name: str) -> None:
        super().__init__(model_name)
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
