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
    n = len(arrival_t)
    ttft = np.full(n, np.inf)
    e2e = np.full(n, np.inf)
    status = np.full(n, "ok", dtype=object)
    where = np.zeros(n, dtype=np.int64)
    reps = [_Replica() for _ in range(replicas)]
    step_cache: dict[int, float] = {}
    need = [int(s) for s in steps]
    pre = [float(prefill_s(int(p))) for p in prompt_tokens]  # each request's prefill seconds
    arr = [float(a) for a in arrival_t]
    inf = float("inf")
    if abort_s is None:
        give_up = [inf] * n
    else:
        give_up = [
            a + (inf if not np.isfinite(d) else float(d)) for a, d in zip(arr, abort_s, strict=True)
        ]
    state = [_QUEUED] * n

    def tau(b: int) -> float:
        v = step_cache.get(b)
        if v is None:
            v = step_cache[b] = float(step_s(b)) if b else 0.0
        return v

    def account(r: _Replica, t: float) -> None:
        r.area += r.n * (t - r.last)
        r.last = t

    def leave(r: _Replica, i: int, why: str) -> None:
        status[i] = why
        state[i] = _GONE
        account(r, r.t)
        r.n -= 1

    def expire(r: _Replica, upto: float) -> None:
        """Queued requests whose client gave up by ``upto`` leave then (not when a slot frees):
        the queue, the count the router reads and the time integral see them go."""
        while r.qwatch and r.qwatch[0][0] <= upto:
            g, i = heapq.heappop(r.qwatch)
            if state[i] == _QUEUED:
                status[i] = "timeout"
                state[i] = _GONE
                account(r, max(g, r.last))
                r.n -= 1

    def admit(r: _Replica) -> None:
        """At a step boundary: queued requests take free slots (FIFO), dropping expired ones."""
        if r.qwatch:
            expire(r, r.t)
        while r.queue and r.nrun + len(r.joining) < slots:
            i = r.queue.popleft()
            if state[i] == _GONE:  # gave up while queued
                continue
            if r.t - arr[i] > queue_timeout_s or r.t >= give_up[i]:
                leave(r, i, "timeout")
                continue
            state[i] = _JOINING
            r.joining.append(i)
            if give_up[i] < inf:
                heapq.heappush(r.watch, (give_up[i], i))

    def aborts(r: _Replica) -> None:
        """At a step boundary: admitted requests whose client gave up leave the batch."""
        while r.watch and r.watch[0][0] <= r.t:
            _, i = heapq.heappop(r.watch)
            if state[i] == _RUNNING:
                r.nrun -= 1
                leave(r, i, "timeout")
            elif state[i] == _JOINING:  # not prefilled yet (cannot happen at a boundary)
                r.joining.remove(i)
                leave(r, i, "timeout")

    def boundary(r: _Replica) -> None:
        if r.running and r.running[0][0] <= r.steps:
            pop_done(r)
        if r.watch and r.watch[0][0] <= r.t:
            aborts(r)
        if r.queue:
            admit(r)

    def one_step(r: _Replica, dt: float) -> None:
        """A step of ``dt`` that prefills the joining requests (and advances the running ones)."""
        b = r.nrun
        t_end = r.t + dt
        r.steps += 1 if b else 0
        joined, r.joining = r.joining, []
        if r.qwatch:
            expire(r, t_end)
        r.t = t_end
        for i in joined:
            ttft[i] = t_end - arr[i]
            if need[i] <= 0:
                finish(r, i, t_end)
            else:
                state[i] = _RUNNING
                r.nrun += 1
                heapq.heappush(r.running, (r.steps + need[i], i))
        boundary(r)

    def finish(r: _Replica, i: int, t: float) -> None:
        if t + overhead_s >= give_up[i]:  # done after the client left: a timeout
            ttft[i] = np.inf
            leave(r, i, "timeout")
            return
        e2e[i] = t - arr[i] + overhead_s
        ttft[i] += overhead_s
        state[i] = _GONE
        account(r, t)
        r.n -= 1
        r.done += 1

    def pop_done(r: _Replica) -> None:
        while r.running and r.running[0][0] <= r.steps:
            _, i = heapq.heappop(r.running)
            if state[i] == _RUNNING:
                r.nrun -= 1
                finish(r, i, r.t)

    def next_live(r: _Replica) -> int:
        while r.running and state[r.running[0][1]] != _RUNNING:
            heapq.heappop(r.running)
        return r.running[0][0] if r.running else 0

    def advance(r: _Replica, until: float) -> None:
        """Run the replica's steps that end by ``until``."""
        while True:
            if r.joining:
                dt = tau(r.nrun) + sum(pre[i] for i in r.joining)
                if r.t + dt > until:
                    return
                one_step(r, dt)
                continue
            if not r.nrun:
                return
            d = tau(r.nrun)
            m = next_live(r) - r.steps  # steps until the next completion
            if r.queue and r.nrun < slots:
                m = 1  # a waiting request joins at the next boundary
            while r.watch and state[r.watch[0][1]] == _GONE:
                heapq.heappop(r.watch)
            if r.watch and d > 0:  # the first boundary at or after the next abort
                m = min(m, max(1, math.ceil((r.watch[0][0] - r.t) / d - 1e-12)))
            if r.t + m * d <= until:
                r.steps += m
                if r.qwatch:
                    expire(r, r.t + m * d)
                r.t += m * d
                boundary(r)
            else:
                k = int((until - r.t) / d) if d > 0 else m
                r.steps += k
                r.t += k * d
                return

    rr = 0
    for i in range(n):
        t = arr[i]
        if router == "least_loaded" or replicas == 1:
            for r in reps:
                advance(r, t)
            j = min(range(replicas), key=lambda x: (reps[x].n, x)) if replicas > 1 else 0
        else:
            j = rr % replicas
            rr += 1
            advance(reps[j], t)
        r = reps[j]
        where[i] = j
        for x in reps if router == "least_loaded" else (r,):
            if x.qwatch and x.qwatch[0][0] <= t:
                expire(x, t)
        if router == "least_loaded" and replicas > 1:  # the router sees who is still there
            j = min(range(replicas), key=lambda x: (reps[x].n, x))
            r = reps[j]
            where[i] = j
        account(r, t)
        r.n += 1
        idle = not r.nrun and not r.joining
        r.queue.append(i)
        if give_up[i] < inf and len(r.queue) > slots - r.nrun - len(r.joining):
            # no slot free for it at the next boundary: watch its give-up while it waits (one
            # that joins at the next boundary is checked there, within a step)
            heapq.heappush(r.qwatch, (give_up[i], i))
        if idle or r.t == t:  # at a step boundary (an idle engine's is the arrival): admitted now
            r.t = max(r.t, t)
            aborts(r)
            admit(r)
    for r in reps:
        while r.joining or r.nrun or r.queue:
            advance(r, inf)
            if not (r.joining or r.nrun):
                admit(r)  # only queued requests left (an idle engine): they join now
    span = max((r.t for r in reps), default=0.0)
    for r in reps:
        account(r, span)
    return SimResult(ttft, e2e, status, where, [r.area for r in reps], span)
