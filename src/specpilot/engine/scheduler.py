"""Admission, queueing, iteration-level (continuous) batching and cancellation over an Engine.

One thread owns the engine. Each iteration of its loop:

1. applies cancellations and timeouts: a cancelled or timed-out running request leaves the
   batch before the next round and its KV slot is released at once; a queued one is dropped;
2. admits queued requests while a KV slot is free and ``max_running`` allows, and prefills the
   newly admitted ones together (one batched forward);
3. runs one decode round (``Engine.step``) over the running requests (at most
   ``max_batch_size`` rows; when more are running they take turns), plain and speculative rows
   mixed, then reports progress to each request's callback and releases finished ones.

A request therefore joins or leaves the batch at round boundaries (Orca-style iteration-level
scheduling). The strategy (k) of a request is fixed when it is submitted, so a request in
flight finishes with the strategy it started with.

Admission control happens in ``submit`` (caller's thread): invalid requests raise ValueError
naming the field, a full queue raises ``QueueFull`` (with a retry hint), a draining or stopped
scheduler raises ``Draining``. A queued request that waits longer than ``queue_timeout_s``
ends with status ``queue_timeout``.

    >>> sched = Scheduler(engine, SchedulerConfig(max_queued=8))               # doctest: +SKIP
    >>> sched.start()                                                          # doctest: +SKIP
    >>> t = sched.submit(ids, SamplingParams(max_tokens=32), k=4)              # doctest: +SKIP
    >>> t.wait(); t.status, t.state.text                                       # doctest: +SKIP

No HTTP here: the server turns callbacks into SSE chunks and metrics.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from specpilot.engine.generate import Engine, TokenLogprob
from specpilot.engine.sampling import SamplingParams
from specpilot.engine.tickets import (
    CANCELLED,
    ERROR,
    FINISHED,
    QUEUE_TIMEOUT,
    RUNNING,
    TIMEOUT,
    Ticket,
    TicketEvent,
)
from specpilot.errors import ConfigError
from specpilot.records import RoundRecord

_ids = itertools.count()


class QueueFull(Exception):
    """The waiting queue is at ``max_queued``; retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Draining(Exception):
    """The scheduler accepts no new requests (draining or stopped)."""


@dataclass(frozen=True)
class SchedulerConfig:
    max_running: int | None = None  # None: the engine's KV slots
    max_queued: int = 64
    queue_timeout_s: float | None = 60.0
    request_timeout_s: float | None = None  # submit -> finish, server side
    max_batch_size: int | None = None  # rows per decode round; None: all running
    idle_poll_s: float = 0.05

    def validate(self, engine_slots: int) -> None:
        if self.max_running is not None and not 1 <= self.max_running <= engine_slots:
            raise ConfigError(
                f"max_running must be in [1, {engine_slots}] (the engine's KV slots), got {self.max_running}"
            )
        if self.max_queued < 0:
            raise ConfigError(f"max_queued must be >= 0, got {self.max_queued}")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        for name in ("queue_timeout_s", "request_timeout_s"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ConfigError(f"{name} must be > 0 (or None), got {v}")


class SchedulerObserver(Protocol):
    """Hooks for instrumentation (the server's metrics); called on the scheduler thread."""

    def prefilled(self, tickets: Sequence[Ticket], seconds: float) -> None: ...

    def round_done(self, records: Sequence[RoundRecord], seconds: float) -> None: ...

    def finished(self, ticket: Ticket) -> None: ...


class Scheduler:
    """Continuous batching over one Engine, on one background thread."""

    def __init__(
        self,
        engine: Engine,
        config: SchedulerConfig | None = None,
        observer: SchedulerObserver | None = None,
    ) -> None:
        self.engine = engine
        self.config = config or SchedulerConfig()
        self.config.validate(engine.max_slots)
        self.max_running = self.config.max_running or engine.max_slots
        self.observer = observer
        self._lock = threading.Condition()
        self._waiting: deque[Ticket] = deque()
        self._running: list[Ticket] = []
        self._cancels: dict[str, str] = {}
        self._tickets: dict[str, Ticket] = {}
        self._accepting = True
        self._stop = False
        self._thread: threading.Thread | None = None
        self.rounds_total = 0
        self._round_s_ewma = 0.0
        self.last_error: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="specpilot-scheduler", daemon=True
            )
            self._thread.start()

    def drain(self) -> None:
        """Refuse new requests; the queued and running ones finish."""
        with self._lock:
            self._accepting = False
            self._lock.notify_all()

    def resume(self) -> None:
        with self._lock:
            if not self._stop:
                self._accepting = True

    def stop(self, timeout: float | None = None, cancel: bool = False) -> None:
        """Drain (or cancel everything when ``cancel``) and join the thread."""
        with self._lock:
            self._accepting = False
            if cancel:
                for t in [*self._waiting, *self._running]:
                    self._cancels.setdefault(t.request_id, CANCELLED)
            self._stop = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def accepting(self) -> bool:
        return self._accepting

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ requests
    def submit(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        k: int = 0,
        *,
        request_id: str | None = None,
        logprobs: int | None = None,
        timeout_s: float | None = None,
        on_event: Callable[[Ticket, TicketEvent], None] | None = None,
    ) -> Ticket:
        """Validate and queue. Raises ValueError, QueueFull or Draining (nothing queued then)."""
        self.engine.validate(prompt_ids, params, k)
        if logprobs is not None and logprobs < 0:
            raise ConfigError(f"logprobs must be >= 0, got {logprobs}")
        now = time.perf_counter()
        t = Ticket(
            request_id=request_id or f"sched-{next(_ids)}",
            prompt_ids=[int(i) for i in prompt_ids],
            params=params,
            k=k,
            logprobs=logprobs,
            timeout_s=timeout_s if timeout_s is not None else self.config.request_timeout_s,
            on_event=on_event,
            submitted_t=now,
        )
        with self._lock:
            if not self._accepting:
                raise Draining("the server is draining and accepts no new requests")
            free = self.max_running - len(self._running)
            if len(self._waiting) >= self.config.max_queued + max(free, 0):
                raise QueueFull(
                    f"the request queue is full ({self.config.max_queued} waiting)",
                    self._retry_hint(),
                )
            if t.request_id in self._tickets:
                raise ConfigError(f"request_id {t.request_id!r} is already in flight")
            self._tickets[t.request_id] = t
            self._waiting.append(t)
            self._lock.notify_all()
        return t

    def cancel(self, request_id: str, reason: str = CANCELLED) -> bool:
        """Ask for removal before the next round; False when the request is unknown or done."""
        with self._lock:
            t = self._tickets.get(request_id)
            if t is None or t.done:
                return False
            if t.cancel_requested_t is None:
                t.cancel_requested_t = time.perf_counter()
            self._cancels.setdefault(request_id, reason)
            self._lock.notify_all()
            return True

    def counts(self) -> tuple[int, int]:
        """(running, waiting)."""
        with self._lock:
            return len(self._running), len(self._waiting)

    def kv_tokens_in_use(self) -> int:
        return sum(t.state.target_len for t in list(self._running) if t.state is not None)

    def _retry_hint(self) -> float:
        # Roughly one queue's worth of rounds at the recent round time; at least one second.
        est = self._round_s_ewma * 32 * max(1, len(self._waiting)) / max(1, self.max_running)
        return max(1.0, min(60.0, est))

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while True:
            with self._lock:
                if not (self._waiting or self._running or self._cancels):
                    if self._stop:
                        break
                    self._lock.wait(self.config.idle_poll_s)
                    continue
                cancels, self._cancels = self._cancels, {}
            try:
                self._reap(cancels)
                self._admit()
                if self._running:
                    self._round()
            except Exception as exc:  # keep serving: fail what was in the batch, free its slots
                self.last_error = f"{type(exc).__name__}: {exc}"
                for t in list(self._running):
                    self._end(t, ERROR, self.last_error)

    def _reap(self, cancels: dict[str, str]) -> None:
        now = time.perf_counter()
        qt = self.config.queue_timeout_s
        with self._lock:
            waiting = list(self._waiting)
        for t in waiting:
            reason = cancels.pop(t.request_id, None)
            if reason is None and t.timeout_s is not None and now - t.submitted_t > t.timeout_s:
                reason = TIMEOUT
            if reason is None and qt is not None and now - t.submitted_t > qt:
                reason = QUEUE_TIMEOUT
            if reason is not None:
                self._end(t, reason)
        for t in list(self._running):
            reason = cancels.pop(t.request_id, None)
            if reason is None and t.timeout_s is not None and now - t.submitted_t > t.timeout_s:
                reason = TIMEOUT
            if reason is not None:
                self._end(t, reason)

    def _admit(self) -> None:
        new: list[Ticket] = []
        with self._lock:
            while (
                self._waiting
                and len(self._running) + len(new) < self.max_running
                and self.engine.free_slots
            ):
                new.append(self._waiting.popleft())
        if not new:
            return
        now = time.perf_counter()
        ok: list[Ticket] = []
        for t in new:
            try:
                t.state = self.engine.new_request(t.prompt_ids, t.params, t.k, t.request_id)
            except (ValueError, RuntimeError) as exc:
                self._end(t, ERROR, str(exc))
                continue
            t.state.logprobs = t.logprobs
            t.admitted_t, t.status = now, RUNNING
            ok.append(t)
        with self._lock:
            self._running.extend(ok)
        cap = self.config.max_batch_size or len(ok) or 1
        for i in range(0, len(ok), cap):
            group = ok[i : i + cap]
            t0 = time.perf_counter()
            self.engine.prefill([t.state for t in group if t.state is not None])
            t1 = time.perf_counter()
            for t in group:
                t.first_token_t = t1
            if self.observer is not None:
                self.observer.prefilled(group, t1 - t0)
            for t in group:
                self._emit(t)

    def _round(self) -> None:
        with self._lock:
            batch = self._running[: self.config.max_batch_size or len(self._running)]
        t0 = time.perf_counter()
        records = self.engine.step([t.state for t in batch if t.state is not None])
        dt = time.perf_counter() - t0
        self.rounds_total += 1
        self._round_s_ewma = dt if self._round_s_ewma == 0 else 0.9 * self._round_s_ewma + 0.1 * dt
        if self.observer is not None and records:
            self.observer.round_done(records, dt)
        with self._lock:
            if len(batch) < len(self._running):  # take turns when capped
                rest = [t for t in self._running if t not in batch]
                self._running[:] = rest + batch
            for t in batch:
                if t.cancel_requested_t is not None:
                    t.rounds_after_cancel += 1
        for t in batch:
            self._emit(t)

    def _emit(self, t: Ticket) -> None:
        """Send progress; a request whose state says done is finished and released."""
        st = t.state
        assert st is not None
        if st.done:
            self._end(t, FINISHED)
            return
        self._send(t, done=False)

    def _send(self, t: Ticket, done: bool) -> None:
        st = t.state
        ids: tuple[int, ...] = ()
        lps: tuple[TokenLogprob, ...] = ()
        text, n = "", 0
        if st is not None:
            out = st.output_ids
            n = len(out)
            ids = tuple(out[t._sent_ids :])
            lps = tuple(st.token_logprobs[t._sent_logprobs :])
            t._sent_ids, t._sent_logprobs = n, len(st.token_logprobs)
            text = st.text
        ev = TicketEvent(text, n, ids, lps, done, t.status, t.finish_reason)
        if t.on_event is not None:
            try:
                t.on_event(t, ev)
            except Exception as exc:  # a broken consumer must not stop the loop
                self.last_error = f"on_event: {type(exc).__name__}: {exc}"

    def _end(self, t: Ticket, status: str, error: str | None = None) -> None:
        with self._lock:
            if t.done:
                return
            if t in self._running:
                self._running.remove(t)
            if t in self._waiting:
                self._waiting.remove(t)
            self._tickets.pop(t.request_id, None)
            t.status, t.error = status, error
            t.finished_t = time.perf_counter()
            if t.cancel_reason is None and status != FINISHED:
                t.cancel_reason = status
        if t.state is not None:
            finish = t.state.finish_reason
            self.engine.release(t.state)  # frees the KV slot; sets "cancelled" if unfinished
            if status == FINISHED:
                t.state.finish_reason = finish
        if self.observer is not None:
            self.observer.finished(t)
        self._send(t, done=True)
        t._done.set()
