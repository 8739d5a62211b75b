"""The deployable setting: k per batch size, from the measured step costs and acceptance.

For each batch size b up to the arm's slots, the k in 0..K (K the measured one) that commits
the most tokens per second per request: E[c_k] / step_k(b), where E[c_k] = 1 + sum over i <= k
of P(accepted >= i) (the measured per-position acceptance: drafting fewer tokens keeps the
first positions' acceptance) and step_k(b) interpolates linearly in k between the plain arm's
measured step (k = 0) and the speculative arm's (k = K). The interpolation is a model, said so
in the output; a k between 0 and K was not measured.

Emitted in vLLM's own syntax, ``num_speculative_tokens_per_batch_size`` in
``--speculative-config`` (a list of [first batch, last batch, k], vLLM PR #32374), with
``num_speculative_tokens`` = K. A k = 0 range is not "no speculation": the draft's weights and
KV stay allocated, and vLLM issue #49548 reports a throughput collapse when concurrency crosses
a schedule's threshold (MTP, V1 PIECEWISE graphs); pilot the schedule as an arm before rollout.
Not yet checked by the simulator against a fixed k (its rounds are drawn per request, not per
step): said in the output.

    >>> s = best_k(steps=[lambda b: 0.1 + 0.01 * b, lambda b: 0.12 + 0.04 * b], expected=[1.0, 1.7],
    ...            max_batch=8)
    >>> s.ranges
    ((1, 2, 1), (3, 8, 0))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specpilot.errors import ConfigError
from specpilot.records import PilotData
from specpilot.simulate.costs import calibrate


@dataclass(frozen=True)
class KSchedule:
    k_max: int
    ranges: tuple[tuple[int, int, int], ...]  # (first batch size, last, k)
    rate: tuple[tuple[float, ...], ...]  # per batch size, per k: tokens / s per request
    notes: tuple[str, ...] = ()

    def vllm_speculative_config(self, base: dict[str, Any] | None = None) -> str:
        cfg = {**(base or {}), "num_speculative_tokens": self.k_max,
               "num_speculative_tokens_per_batch_size": [list(r) for r in self.ranges]}  # fmt: skip
        return json.dumps(cfg)

    @property
    def text(self) -> str:
        parts = ", ".join(f"batch {a}-{b}: k={k}" for a, b, k in self.ranges)
        return f"k per batch size (modelled, not measured between k=0 and k={self.k_max}): {parts}"


def best_k(
    steps: Sequence[Callable[[float], float]], expected: Sequence[float], max_batch: int
) -> KSchedule:
    """``steps[k](b)``: step seconds at batch b with k drafts; ``expected[k]``: E[c_k]."""
    table = []
    ks = []
    for b in range(1, max_batch + 1):
        row = tuple(float(e / max(s(b), 1e-12)) for s, e in zip(steps, expected, strict=True))
        table.append(row)
        ks.append(int(np.argmax(row)))
    ranges: list[tuple[int, int, int]] = []
    for b, k in enumerate(ks, start=1):
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], b, k)
        else:
            ranges.append((b, b, k))
    return KSchedule(len(steps) - 1, tuple(ranges), tuple(table))


def k_schedule(data: PilotData, plain_arm: str, spec_arm: str) -> KSchedule:
    plain = calibrate(data, plain_arm)
    spec = calibrate(data, spec_arm)
    if spec.k is None:
        raise ConfigError(f"arm {spec_arm!r} did not speculate: no k to schedule")
    k = spec.k
    rr = [r for r in data.request_rounds if r.arm == spec_arm and r.pos_proposed]
    prop = np.zeros(k)
    acc = np.zeros(k)
    for r in rr:
        n = min(k, len(r.pos_proposed))
        prop[:n] += r.pos_proposed[:n]
        acc[:n] += r.pos_accepted[:n]
    p_ge = np.divide(acc, prop, out=np.zeros(k), where=prop > 0)
    expected = [1.0 + float(p_ge[:j].sum()) for j in range(k + 1)]

    def step_k(j: int) -> Callable[[float], float]:
        return lambda b: plain.step(b) + j / k * (spec.step(b) - plain.step(b))

    s = best_k([step_k(j) for j in range(k + 1)], expected, max(plain.slots, spec.slots))
    notes = (
        f"plain {plain.profile}; speculative {spec.profile}",
        "k = 0 keeps the draft allocated (not the same as no speculation); vLLM issue #49548: "
        "throughput collapse reported at a schedule's batch threshold; pilot it as an arm",
        "not yet checked by the simulator against a fixed k",
    )
    return KSchedule(s.k_max, s.ranges, s.rate, notes)
