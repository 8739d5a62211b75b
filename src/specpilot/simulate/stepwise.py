"""One replica simulated step by step, k chosen at every step from the batch size: how a k per
batch-size schedule (vLLM's ``num_speculative_tokens_per_batch_size``) is checked against a
fixed k.

The event model (``simulate.engine``) draws each request's rounds up front, which holds only
while k is fixed. Here every step of b rows drafts k = ``k_of_b(b)`` tokens per row, costs
``step_k(b, k)`` and commits, per row, min(a, k) + 1 tokens with a drawn from the row's task
group's measured acceptance at the arm's K (drafting fewer tokens keeps the first positions'
acceptance: the first k proposals do not depend on how many follow). Queue, slots, prefill in
the step that admits, client give-up at the next boundary: as in the event model, whose fixed-k
figures this reproduces (tested). O(steps), so meant for thousands of requests, not millions.

    >>> import numpy as np
    >>> f = run(np.array([0.0]), np.array([10]), np.array([9]), np.array(["*"], dtype=object),
    ...         accepted={"*": (np.array([0, 3]), np.array([0.0, 1.0]))}, k_of_b=lambda b: 3,
    ...         step_k=lambda b, k: 0.1, prefill_s=lambda n: 0.05, slots=1)
    >>> round(float(f.e2e[0]), 3)  # prefill (first token), then 8 tokens at 4 per step
    0.25
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specpilot.simulate.costs import draw_rounds


@dataclass
class StepwiseResult:
    ttft: np.ndarray
    e2e: np.ndarray
    status: np.ndarray
    k_steps: dict[int, int]  # k -> steps that drafted it

    @property
    def ok(self) -> np.ndarray:
        return np.asarray(self.status == "ok")


def run(
    arrival_t: np.ndarray,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    group: np.ndarray,
    *,
    accepted: dict[str, tuple[np.ndarray, np.ndarray]],
    k_of_b: Callable[[int], int],
    step_k: Callable[[int, int], float],
    prefill_s: Callable[[int], float],
    slots: int,
    overhead_s: float = 0.0,
    abort_s: np.ndarray | None = None,
    seed: int = 0,
) -> StepwiseResult:
    """``accepted[g]``: (accepted drafts a = 0..K, their probabilities) of task group g ("*":
    every group)."""
    rows = _Rows(arrival_t, output_tokens, group, accepted, overhead_s, abort_s, seed)
    n = len(arrival_t)
    queue: deque[int] = deque()
    running: list[int] = []
    t, nxt = 0.0, 0
    while nxt < n or queue or running:
        while nxt < n and arrival_t[nxt] <= t:
            queue.append(nxt)
            nxt += 1
        if not running and not queue:
            t = float(arrival_t[nxt])
            continue
        join = rows.admit(queue, slots - len(running), t)
        b = len(running)
        k = int(k_of_b(b)) if b else 0
        dt = (step_k(b, k) if b else 0.0) + sum(prefill_s(int(prompt_tokens[i])) for i in join)
        if not join and not b:
            continue
        t += dt
        if b:
            running = rows.decode(running, k, t)
        running += rows.prefilled(join, t)
    return StepwiseResult(rows.ttft, rows.e2e, rows.status, rows.k_steps)


class _Rows:
    """The requests of one ``run``: their fates, tokens left and accepted drafts per step."""

    def __init__(
        self,
        arrival_t: np.ndarray,
        output_tokens: np.ndarray,
        group: np.ndarray,
        accepted: dict[str, tuple[np.ndarray, np.ndarray]],
        overhead_s: float,
        abort_s: np.ndarray | None,
        seed: int,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        n = len(arrival_t)
        self.arrival_t = arrival_t
        self.overhead_s = overhead_s
        self.ttft, self.e2e = np.full(n, np.inf), np.full(n, np.inf)
        self.status = np.full(n, "ok", dtype=object)
        inf = float("inf")
        self.give_up = [
            float(a) + (float(d) if abort_s is not None and np.isfinite(d) else inf)
            for a, d in zip(arrival_t, abort_s if abort_s is not None else np.zeros(n), strict=True)
        ]
        self.left = [int(x) - 1 for x in output_tokens]  # after the prefill's first token
        self.seq = _draw_accepted(group, self.left, accepted, self.rng)
        self.groups = {i: accepted.get(str(group[i])) or accepted["*"] for i in range(n)}
        self.used = [0] * n  # steps each request has run
        self.k_steps: dict[int, int] = {}

    def a_of(self, i: int, step: int) -> int:
        """Request ``i``'s accepted drafts at its ``step``-th decode step."""
        seq = self.seq
        if step >= len(seq[i]):  # drafting less than k: more steps than drawn for
            a_values, p = self.groups[i]
            seq[i] += self.rng.choice(
                np.asarray(a_values, dtype=np.int64), size=max(1, self.left[i]), p=p
            ).tolist()
        return seq[i][step]

    def finish(self, i: int, at: float) -> None:
        if at + self.overhead_s >= self.give_up[i]:
            self.status[i], self.ttft[i] = "timeout", float("inf")
        else:
            self.e2e[i] = at - self.arrival_t[i] + self.overhead_s
            self.ttft[i] += self.overhead_s

    def admit(self, queue: deque[int], free: int, t: float) -> list[int]:
        """Queued requests that take the ``free`` slots at ``t`` (FIFO); those whose client
        gave up leave as timeouts."""
        join: list[int] = []
        while queue and len(join) < free:
            i = queue.popleft()
            if t >= self.give_up[i]:
                self.status[i] = "timeout"
            else:
                join.append(i)
        return join

    def decode(self, running: list[int], k: int, t: float) -> list[int]:
        """A step drafting ``k`` per row, ending at ``t``: each row commits min(a, k) + 1
        tokens; the rows still running after it."""
        self.k_steps[k] = self.k_steps.get(k, 0) + 1
        left, used = self.left, self.used
        still = []
        for i in running:
            left[i] -= min(self.a_of(i, used[i]), k) + 1
            used[i] += 1
            if left[i] <= 0:
                self.finish(i, t)
            elif t >= self.give_up[i]:
                self.status[i] = "timeout"
            else:
                still.append(i)
        return still

    def prefilled(self, join: list[int], t: float) -> list[int]:
        """The joining requests' first token at ``t``; those that go on decoding."""
        go_on = []
        for i in join:
            self.ttft[i] = t - self.arrival_t[i]
            if self.left[i] <= 0:
                self.finish(i, t)
            elif t >= self.give_up[i]:
                self.status[i], self.ttft[i] = "timeout", float("inf")
            else:
                go_on.append(i)
        return go_on


def _draw_accepted(
    group: np.ndarray,
    left: list[int],
    accepted: dict[str, tuple[np.ndarray, np.ndarray]],
    rng: np.random.Generator,
) -> list[list[int]]:
    """Each request's accepted drafts per step, drawn up front as the event model draws its
    rounds (costs.draw_rounds at the full k, same seed: the same values); a row that drafts
    less than k needs more steps and draws them when it runs out (``_Rows.a_of``)."""
    n = len(group)
    seq: list[list[int]] = [[] for _ in range(n)]
    for g in sorted(set(map(str, group))):
        a_values, p = accepted.get(g) or accepted["*"]
        mine = np.array([i for i in range(n) if str(group[i]) == g], dtype=np.int64)
        need = np.maximum(np.array([left[i] for i in mine], dtype=np.int64), 0)
        committed = np.asarray(a_values, dtype=np.int64) + 1
        _, rows = draw_rounds(need, committed, np.asarray(p), rng, keep=True)
        assert rows is not None
        for row, i in zip(rows, mine.tolist(), strict=True):
            seq[i] = (row - 1).tolist()
    return seq
