"""One request's life in the scheduler (``engine.scheduler``): the ``Ticket`` that follows it
from queue to end, its statuses, and the ``TicketEvent`` snapshots its callback receives after
prefill, after each round and at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from specpilot.engine.requests import RequestState, TokenLogprob
from specpilot.engine.sampling import SamplingParams
from specpilot.records import RoundRecord

# Ticket statuses. "finished" is the only successful one; finish_reason says why it ended.
QUEUED, RUNNING, FINISHED = "queued", "running", "finished"
CANCELLED, TIMEOUT, QUEUE_TIMEOUT, ERROR = "cancelled", "timeout", "queue_timeout", "error"
TERMINAL = frozenset({FINISHED, CANCELLED, TIMEOUT, QUEUE_TIMEOUT, ERROR})


@dataclass(frozen=True)
class TicketEvent:
    """A snapshot sent to the request's callback after prefill, each round, and at the end.

    ``text`` is the whole decoded output so far (stop strings already cut); ``new_ids`` and
    ``new_logprobs`` are what this event added. ``done`` is set exactly once, on the last event.
    """

    text: str
    output_tokens: int
    new_ids: tuple[int, ...]
    new_logprobs: tuple[TokenLogprob, ...]
    done: bool
    status: str
    finish_reason: str | None


@dataclass
class Ticket:
    """One submitted request, from queue to end; times on ``time.perf_counter``."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    k: int
    logprobs: int | None
    timeout_s: float | None
    on_event: Callable[[Ticket, TicketEvent], None] | None
    submitted_t: float
    status: str = QUEUED
    error: str | None = None
    admitted_t: float | None = None
    first_token_t: float | None = None
    finished_t: float | None = None
    cancel_requested_t: float | None = None
    cancel_reason: str | None = None
    rounds_after_cancel: int = 0  # rounds that ended after cancel() was called (<= 1 expected)
    state: RequestState | None = None
    _sent_ids: int = 0
    _sent_logprobs: int = 0
    _done: threading.Event = field(default_factory=threading.Event)

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def finish_reason(self) -> str | None:
        return self.state.finish_reason if self.state is not None else None

    @property
    def queue_s(self) -> float | None:
        end = self.admitted_t if self.admitted_t is not None else self.finished_t
        return None if end is None else end - self.submitted_t

    @property
    def prefill_s(self) -> float | None:
        p = self.state.prefill if self.state is not None else None
        return None if p is None else p.target_s + p.draft_s

    @property
    def decode_s(self) -> float | None:
        if self.first_token_t is None or self.finished_t is None:
            return None
        return self.finished_t - self.first_token_t

    @property
    def rounds(self) -> list[RoundRecord]:
        return self.state.rounds if self.state is not None else []

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)
