"""The sustainable request rate of one engine from two short measurements (the capacity probe).

The probe (``pilot.run.capacity``) measures, on the baseline's own process:

1. a **synchronous pass**: each request sent after the one before has finished, so each task
   time is the unloaded one (GuideLLM's ``synchronous``); its median per group is the unloaded
   latency, and its decode seconds per token the batch-1 step;
2. a **saturating burst**: ``2 x slots`` requests sent at once, so the engine runs full for
   most of it (GuideLLM's ``throughput``); its requests over its span is the maximum rate.

A step at batch ``b`` is taken as linear between the batch-1 step and the full-batch step that
makes the simulator (``simulate.engine``) finish the burst in the span measured: on the AVX2
kind the 1-thread step grows almost linearly with batch, on AVX-512 it barely grows, and both
points are measured, never assumed. The **sustainable rate** is then the highest Poisson rate at
which the simulator keeps every group's 90th-percentile task time within its limit: the
smaller of its SLO deadline and ``factor`` x its unloaded latency (the SLOs of the builtin
groups are generous: a queue that doubles the task time meets them, and is no off-peak).
The rate is searched by bisection between a tenth of the burst's rate and the burst's rate,
on a seeded arrival stream, so the same measurements give the same rate.

    >>> s = [Sample("g", 30, 20, 0.05, 0.05 + 29 * 0.02)] * 4    # 20 ms a token, alone
    >>> b = [Sample("g", 30, 20, 0.05, 0.0)] * 8                   # 8 at once, 2 slots ...
    >>> r = sustainable(s, b, burst_span_s=4 * 0.05 + 4 * 29 * 0.03, slots=2)
    >>> round(r.step_s[0], 3), round(r.step_s[1], 2)           # ... about 30 ms a step at 2
    (0.02, 0.03)
    >>> 0.3 * r.max_rps < r.sustainable_rps < r.max_rps
    True
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specpilot.simulate.engine import simulate

FACTOR = 2.0  # a level's task time may grow to this multiple of the unloaded one
QUANTILE = 0.9  # ... at this quantile of each group's task times
SIM_REQUESTS = 400  # requests in each simulated stream
SEED = 20261205


@dataclass(frozen=True)
class Sample:
    """One measured request: its group, output and prompt tokens, time to first token and task
    time (seconds; in the burst, from the burst's start)."""

    group: str
    output_tokens: int
    prompt_tokens: int
    ttft_s: float
    e2e_s: float


@dataclass(frozen=True)
class Sustained:
    """What the probe's measurements give (see the module docstring)."""

    unloaded_s: dict[str, float]  # group -> median task time, alone
    limit_s: dict[str, float]  # group -> the task time a sustainable rate keeps to
    sync_rps: float  # requests per second sent one after another
    max_rps: float  # the burst's requests over its span
    step_s: tuple[float, float]  # decode step at batch 1 and at ``slots``
    slots: int
    sustainable_rps: float
    predicted_p90_s: dict[str, float] = field(default_factory=dict)  # at the sustainable rate
    prefill_s: float = 0.0  # median time to first token, alone

    def to_dict(self) -> dict[str, object]:
        r = 4
        return {
            "unloaded_s": {g: round(v, r) for g, v in self.unloaded_s.items()},
            "limit_s": {g: round(v, r) for g, v in self.limit_s.items()},
            "sync_rps": round(self.sync_rps, r),
            "max_rps": round(self.max_rps, r),
            "step_s": [round(v, 5) for v in self.step_s],
            "slots": self.slots,
            "sustainable_rps": round(self.sustainable_rps, r),
            "predicted_p90_s": {g: round(v, r) for g, v in self.predicted_p90_s.items()},
            "prefill_s": round(self.prefill_s, 5),
        }


def _linear(s1: float, ss: float, slots: int) -> Callable[[int], float]:
    slope = (ss - s1) / (slots - 1) if slots > 1 else 0.0
    return lambda b: s1 + slope * (max(b, 1) - 1)


def _burst_span(burst: Sequence[Sample], s1: float, ss: float, slots: int, prefill: float) -> float:
    n = len(burst)
    res = simulate(
        np.zeros(n),
        np.array([b.prompt_tokens for b in burst]),
        np.array([max(b.output_tokens - 1, 0) for b in burst]),
        step_s=_linear(s1, ss, slots),
        prefill_s=lambda _n: prefill,
        slots=slots,
    )
    return float(np.max(res.e2e))


def full_step(
    burst: Sequence[Sample], span_s: float, s1: float, slots: int, prefill: float
) -> float:
    """The full-batch step that makes the simulated burst last ``span_s`` (bisection; the
    simulated span grows with it)."""
    lo, hi = s1 * 0.05, s1 * slots * 4 + span_s
    for _ in range(50):
        mid = (lo + hi) / 2
        if _burst_span(burst, s1, mid, slots, prefill) < span_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _p90s(
    sync: Sequence[Sample],
    rate: float,
    step: Callable[[int], float],
    prefill: float,
    slots: int,
) -> dict[str, float]:
    rng = np.random.default_rng(SEED)
    t = np.cumsum(rng.exponential(1.0 / rate, SIM_REQUESTS))
    picks = [sync[i % len(sync)] for i in range(SIM_REQUESTS)]
    res = simulate(
        t,
        np.array([p.prompt_tokens for p in picks]),
        np.array([max(p.output_tokens - 1, 0) for p in picks]),
        step_s=step,
        prefill_s=lambda _n: prefill,
        slots=slots,
    )
    out: dict[str, float] = {}
    for g in dict.fromkeys(p.group for p in picks):
        e = [float(res.e2e[i]) for i, p in enumerate(picks) if p.group == g]
        out[g] = float(np.quantile(e, QUANTILE))
    return out


def unloaded_medians(sync: Sequence[Sample]) -> dict[str, float]:
    """Each group's median task time in the synchronous pass (its unloaded latency)."""
    return {
        g: statistics.median(s.e2e_s for s in sync if s.group == g)
        for g in dict.fromkeys(s.group for s in sync)
    }


def sustainable(
    sync: Sequence[Sample],
    burst: Sequence[Sample],
    *,
    burst_span_s: float,
    slots: int,
    factor: float = FACTOR,
    deadlines: dict[str, float] | None = None,
) -> Sustained:
    """The sustainable rate from the synchronous pass ``sync`` and the ``burst`` (module
    docstring); ``deadlines``: each group's SLO deadline (seconds), where it has one."""
    if not sync or not burst or burst_span_s <= 0:
        raise ValueError("the probe needs a synchronous pass and a burst with a span")
    unloaded = unloaded_medians(sync)
    limit = {
        g: min(factor * u, (deadlines or {}).get(g, float("inf"))) for g, u in unloaded.items()
    }
    prefill = statistics.median(s.ttft_s for s in sync)
    s1 = statistics.median(
        (s.e2e_s - s.ttft_s) / (s.output_tokens - 1) for s in sync if s.output_tokens > 1
    )
    ss = full_step(burst, burst_span_s, s1, slots, prefill) if slots > 1 else s1
    step = _linear(s1, ss, slots)
    max_rps = len(burst) / burst_span_s

    def holds(rate: float) -> bool:
        p90 = _p90s(sync, rate, step, prefill, slots)
        return all(p90[g] <= limit[g] for g in p90)

    lo, hi = 0.1 * max_rps, max_rps
    if not holds(lo):
        lo = 0.0
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    rate = lo
    sync_rps = 1.0 / statistics.mean(s.e2e_s for s in sync)
    p90 = _p90s(sync, rate, step, prefill, slots) if rate > 0 else {}
    return Sustained(unloaded, limit, sync_rps, max_rps, (s1, ss), slots, rate, p90, prefill)


def phase_drains(
    phases: Mapping[str, Sequence[tuple[float, int, int]]], figures: Mapping[str, Any]
) -> dict[str, float]:
    """Seconds each phase's requests take after its last arrival on the probed engine (the
    pilot's ETA before it has measured an episode): ``phases`` maps a phase to its requests as
    (send time from the phase's start, prompt tokens, output tokens); ``figures``: the
    probe's (``step_s`` at 1 and at ``slots``, ``prefill_s``). Empty where the figures lack
    them (a capacity given on the command line, a pilot probed before they were kept).

        >>> f = {"step_s": [0.02, 0.03], "slots": 2, "prefill_s": 0.05}
        >>> phase_drains({"one": [(0.0, 10, 11)], "two": [(0.0, 10, 11), (0.0, 10, 11)]}, f)
        {'one': 0.25, 'two': 0.4}
    """
    try:
        s1, ss = (float(x) for x in figures["step_s"])
        slots, prefill = int(figures["slots"]), float(figures["prefill_s"])
    except (KeyError, TypeError, ValueError):
        return {}
    step = _linear(s1, ss, slots)
    out = {}
    for name, reqs in phases.items():
        if not reqs:
            continue
        order = sorted(reqs)
        t = np.array([r[0] for r in order])
        res = simulate(
            t,
            np.array([r[1] for r in order]),
            np.array([max(r[2] - 1, 0) for r in order]),
            step_s=step,
            prefill_s=lambda _n: prefill,
            slots=slots,
        )
        out[name] = round(float(np.max(t + res.e2e) - t[-1]), 6)
    return out
