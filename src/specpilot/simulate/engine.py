"""A discrete-event model of serving replicas with iteration-level (continuous) batching.

One replica holds up to ``slots`` requests. Time advances in engine steps: every running
request advances one decode step (a plain token, or one speculative round: its committed
tokens drawn from the measured acceptance, see ``simulate.costs``), and requests admitted at a
step boundary are prefilled in the next step (their first token comes at its end: TTFT). A
step lasts ``step_s(b)`` for b requests decoding plus the prefill time of the ones joining.
Between arrivals and completions the batch does not change, so the loop jumps from event to
event (O(requests) events, not O(tokens)): 1M requests take seconds, not hours.

Each request needs a number of decode steps fixed at arrival (``steps``): output tokens - 1
for plain decoding, the rounds its draws take to commit them for speculation (acceptance does
not depend on the batch, so drawing up front is exact). Requests queue when every slot is
busy (FIFO) and leave as ``timeout`` when the queue held them past ``queue_timeout_s``. N
replicas sit behind a router: ``round_robin`` or ``least_loaded`` (fewest running + queued at
the arrival, ties to the lowest index). Deterministic: no randomness inside.

    >>> import numpy as np
    >>> r = simulate(np.array([0.0, 0.0, 0.0]), np.array([10, 10, 10]), np.array([3, 3, 3]),
    ...              step_s=lambda b: 0.1, prefill_s=lambda n: 0.05, slots=2)
    >>> np.round(r.ttft, 3).tolist(), np.round(r.e2e, 3).tolist()
    ([0.1, 0.1, 0.45], [0.4, 0.4, 0.75])
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

ROUTERS = ("round_robin", "least_loaded")


@dataclass
class SimResult:
    """Per request (in the order given): ``ttft`` and ``e2e`` seconds from arrival (inf when
    not served), ``status`` ok | timeout, ``replica``; per replica the time integral of
    requests present (``area``: Little's law) and the simulated span."""

    ttft: np.ndarray
    e2e: np.ndarray
    status: np.ndarray
    replica: np.ndarray
    area: list[float] = field(default_factory=list)
    span_s: float = 0.0

    @property
    def ok(self) -> np.ndarray:
        return np.asarray(self.status == "ok")


class _Replica:
    __slots__ = (
        "area",
        "done",
        "joining",
        "last",
        "n",
        "nrun",
        "queue",
        "qwatch",
        "running",
        "steps",
        "t",
        "watch",
    )

    def __init__(self) -> None:
        self.t = 0.0  # time of the last step boundary
        self.steps = 0  # decode steps completed
        self.running: list[tuple[int, int]] = []  # heap of (finish step, request); lazy deletes
        self.nrun = 0  # requests decoding (the heap also holds aborted ones)
        self.watch: list[tuple[float, int]] = []  # heap of (abort time, request) admitted
        self.joining: list[int] = []  # admitted at the last boundary: prefilled by the next step
        self.queue: deque[int] = deque()
        self.qwatch: list[tuple[float, int]] = []  # heap of (give-up time, request) queued
        self.area = 0.0
        self.last = 0.0  # last time the area was updated
        self.n = 0  # requests present (running + joining + queued)
        self.done = 0

    def account(self, t: float) -> None:
        """Add the requests present since the last update to the time integral, up to ``t``."""
        self.area += self.n * (t - self.last)
        self.last = t


_QUEUED, _JOINING, _RUNNING, _GONE = 0, 1, 2, 3


def simulate(
    arrival_t: np.ndarray,
    prompt_tokens: np.ndarray,
    steps: np.ndarray,
    *,
    step_s: Callable[[int], float],
    prefill_s: Callable[[int], float],
    slots: int,
    replicas: int = 1,
    router: str = "round_robin",
    queue_timeout_s: float = float("inf"),
    overhead_s: float = 0.0,
    abort_s: np.ndarray | None = None,
) -> SimResult:
    """Serve requests arriving at ``arrival_t`` (sorted), each with ``prompt_tokens`` and
    ``steps`` decode steps after its prefill; ``overhead_s`` is added to every served request
    (client and HTTP time outside the engine).

    ``abort_s`` (per request, seconds from arrival; inf or NaN: never): the client gives up
    then (a deadline the load generator enforces) and the request leaves as ``timeout``: from
    the queue at that moment, from the batch at the next step boundary (the engine applies
    cancellations between rounds), freeing its slot."""
    if router not in ROUTERS:
        raise ValueError(f"router {router!r}: one of {', '.join(ROUTERS)}")
    if slots < 1 or replicas < 1:
        raise ValueError(f"slots ({slots}) and replicas ({replicas}) must be >= 1")
    sim = _Sim(
        arrival_t,
        prompt_tokens,
        steps,
        step_s=step_s,
        prefill_s=prefill_s,
        slots=slots,
        replicas=replicas,
        router=router,
        queue_timeout_s=queue_timeout_s,
        overhead_s=overhead_s,
        abort_s=abort_s,
    )
    for i, t in enumerate(sim.arr):
        sim.arrive(i, sim.route(i, t), t)
    sim.drain()
    return sim.result()


class _Sim:
    """One run of ``simulate``: the requests' fates (per-request arrays and lists) and the
    replicas, with the event steps the arrival loop drives (all times in seconds)."""

    def __init__(
        self,
        arrival_t: np.ndarray,
        prompt_tokens: np.ndarray,
        steps: np.ndarray,
        *,
        step_s: Callable[[int], float],
        prefill_s: Callable[[int], float],
        slots: int,
        replicas: int,
        router: str,
        queue_timeout_s: float,
        overhead_s: float,
        abort_s: np.ndarray | None,
    ) -> None:
        n = len(arrival_t)
        self.step_s = step_s
        self.slots = slots
        self.router = router
        self.queue_timeout_s = queue_timeout_s
        self.overhead_s = overhead_s
        self.ttft = np.full(n, np.inf)
        self.e2e = np.full(n, np.inf)
        self.status = np.full(n, "ok", dtype=object)
        self.where = np.zeros(n, dtype=np.int64)
        self.reps = [_Replica() for _ in range(replicas)]
        self.rr = 0  # the round-robin router's next pick
        self.step_cache: dict[int, float] = {}
        self.need = [int(s) for s in steps]
        self.pre = [float(prefill_s(int(p))) for p in prompt_tokens]  # each prefill's seconds
        self.arr = [float(a) for a in arrival_t]
        inf = float("inf")
        if abort_s is None:
            self.give_up = [inf] * n
        else:
            self.give_up = [
                a + (inf if not np.isfinite(d) else float(d))
                for a, d in zip(self.arr, abort_s, strict=True)
            ]
        self.state = [_QUEUED] * n

    def tau(self, b: int) -> float:
        v = self.step_cache.get(b)
        if v is None:
            v = self.step_cache[b] = float(self.step_s(b)) if b else 0.0
        return v

    def leave(self, r: _Replica, i: int, why: str) -> None:
        self.status[i] = why
        self.state[i] = _GONE
        r.account(r.t)
        r.n -= 1

    def expire(self, r: _Replica, upto: float) -> None:
        """Queued requests whose client gave up by ``upto`` leave then (not when a slot frees):
        the queue, the count the router reads and the time integral see them go."""
        state = self.state
        while r.qwatch and r.qwatch[0][0] <= upto:
            g, i = heapq.heappop(r.qwatch)
            if state[i] == _QUEUED:
                self.status[i] = "timeout"
                state[i] = _GONE
                r.account(max(g, r.last))
                r.n -= 1

    def admit(self, r: _Replica) -> None:
        """At a step boundary: queued requests take free slots (FIFO), dropping expired ones."""
        if r.qwatch:
            self.expire(r, r.t)
        state, give_up = self.state, self.give_up
        while r.queue and r.nrun + len(r.joining) < self.slots:
            i = r.queue.popleft()
            if state[i] == _GONE:  # gave up while queued
                continue
            if r.t - self.arr[i] > self.queue_timeout_s or r.t >= give_up[i]:
                self.leave(r, i, "timeout")
                continue
            state[i] = _JOINING
            r.joining.append(i)
            if give_up[i] < float("inf"):
                heapq.heappush(r.watch, (give_up[i], i))

    def aborts(self, r: _Replica) -> None:
        """At a step boundary: admitted requests whose client gave up leave the batch."""
        state = self.state
        while r.watch and r.watch[0][0] <= r.t:
            _, i = heapq.heappop(r.watch)
            if state[i] == _RUNNING:
                r.nrun -= 1
                self.leave(r, i, "timeout")
            elif state[i] == _JOINING:  # not prefilled yet (cannot happen at a boundary)
                r.joining.remove(i)
                self.leave(r, i, "timeout")

    def boundary(self, r: _Replica) -> None:
        if r.running and r.running[0][0] <= r.steps:
            self.pop_done(r)
        if r.watch and r.watch[0][0] <= r.t:
            self.aborts(r)
        if r.queue:
            self.admit(r)

    def one_step(self, r: _Replica, dt: float) -> None:
        """A step of ``dt`` that prefills the joining requests (and advances the running ones)."""
        b = r.nrun
        t_end = r.t + dt
        r.steps += 1 if b else 0
        joined, r.joining = r.joining, []
        if r.qwatch:
            self.expire(r, t_end)
        r.t = t_end
        for i in joined:
            self.ttft[i] = t_end - self.arr[i]
            if self.need[i] <= 0:
                self.finish(r, i, t_end)
            else:
                self.state[i] = _RUNNING
                r.nrun += 1
                heapq.heappush(r.running, (r.steps + self.need[i], i))
        self.boundary(r)

    def finish(self, r: _Replica, i: int, t: float) -> None:
        if t + self.overhead_s >= self.give_up[i]:  # done after the client left: a timeout
            self.ttft[i] = np.inf
            self.leave(r, i, "timeout")
            return
        self.e2e[i] = t - self.arr[i] + self.overhead_s
        self.ttft[i] += self.overhead_s
        self.state[i] = _GONE
        r.account(t)
        r.n -= 1
        r.done += 1

    def pop_done(self, r: _Replica) -> None:
        while r.running and r.running[0][0] <= r.steps:
            _, i = heapq.heappop(r.running)
            if self.state[i] == _RUNNING:
                r.nrun -= 1
                self.finish(r, i, r.t)

    def next_live(self, r: _Replica) -> int:
        state = self.state
        while r.running and state[r.running[0][1]] != _RUNNING:
            heapq.heappop(r.running)
        return r.running[0][0] if r.running else 0

    def advance(self, r: _Replica, until: float) -> None:
        """Run the replica's steps that end by ``until``."""
        state, pre = self.state, self.pre
        while True:
            if r.joining:
                dt = self.tau(r.nrun) + sum(pre[i] for i in r.joining)
                if r.t + dt > until:
                    return
                self.one_step(r, dt)
                continue
            if not r.nrun:
                return
            d = self.tau(r.nrun)
            m = self.next_live(r) - r.steps  # steps until the next completion
            if r.queue and r.nrun < self.slots:
                m = 1  # a waiting request joins at the next boundary
            while r.watch and state[r.watch[0][1]] == _GONE:
                heapq.heappop(r.watch)
            if r.watch and d > 0:  # the first boundary at or after the next abort
                m = min(m, max(1, math.ceil((r.watch[0][0] - r.t) / d - 1e-12)))
            if r.t + m * d <= until:
                r.steps += m
                if r.qwatch:
                    self.expire(r, r.t + m * d)
                r.t += m * d
                self.boundary(r)
            else:
                k = int((until - r.t) / d) if d > 0 else m
                r.steps += k
                r.t += k * d
                return

    def route(self, i: int, t: float) -> _Replica:
        """The replica request ``i`` goes to at its arrival ``t``, the replicas the router
        looks at brought up to ``t`` first."""
        reps = self.reps
        replicas = len(reps)
        least = self.router == "least_loaded"
        if least or replicas == 1:
            for r in reps:
                self.advance(r, t)
            j = min(range(replicas), key=lambda x: (reps[x].n, x)) if replicas > 1 else 0
        else:
            j = self.rr % replicas
            self.rr += 1
            self.advance(reps[j], t)
        for x in reps if least else (reps[j],):
            if x.qwatch and x.qwatch[0][0] <= t:
                self.expire(x, t)
        if least and replicas > 1:  # the router sees who is still there
            j = min(range(replicas), key=lambda x: (reps[x].n, x))
        self.where[i] = j
        return reps[j]

    def arrive(self, i: int, r: _Replica, t: float) -> None:
        """Request ``i`` joins ``r``'s queue at ``t``; admitted now when ``r`` is at a step
        boundary."""
        r.account(t)
        r.n += 1
        idle = not r.nrun and not r.joining
        r.queue.append(i)
        if self.give_up[i] < float("inf") and len(r.queue) > self.slots - r.nrun - len(r.joining):
            # no slot free for it at the next boundary: watch its give-up while it waits (one
            # that joins at the next boundary is checked there, within a step)
            heapq.heappush(r.qwatch, (self.give_up[i], i))
        if idle or r.t == t:  # at a step boundary (an idle engine's is the arrival): admitted now
            r.t = max(r.t, t)
            self.aborts(r)
            self.admit(r)

    def drain(self) -> None:
        """After the last arrival: every replica runs until its requests are all gone."""
        for r in self.reps:
            while r.joining or r.nrun or r.queue:
                self.advance(r, float("inf"))
                if not (r.joining or r.nrun):
                    self.admit(r)  # only queued requests left (an idle engine): they join now

    def result(self) -> SimResult:
        span = max((r.t for r in self.reps), default=0.0)
        for r in self.reps:
            r.account(span)
        return SimResult(
            self.ttft, self.e2e, self.status, self.where, [r.area for r in self.reps], span
        )
