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
``check`` runs the schedule and the fixed K through the step-by-step simulator
(``simulate.stepwise``: k chosen at every step from the batch size) on the same Poisson
arrivals over seeds, and says where the schedule gains, loses or makes no difference.

    >>> s = best_k(steps=[lambda b: 0.1 + 0.01 * b, lambda b: 0.12 + 0.04 * b], expected=[1.0, 1.7],
    ...            max_batch=8)
    >>> s.ranges
    ((1, 2, 1), (3, 8, 0))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specpilot.errors import ConfigError
from specpilot.records import PilotData
from specpilot.simulate.costs import ArmCosts, calibrate

if TYPE_CHECKING:
    from specpilot.simulate.predict import Workload
    from specpilot.simulate.profile import HardwareProfile


@dataclass(frozen=True)
class KSchedule:
    k_max: int
    ranges: tuple[tuple[int, int, int], ...]  # (first batch size, last, k)
    rate: tuple[tuple[float, ...], ...]  # per batch size, per k: tokens / s per request
    notes: tuple[str, ...] = ()

    def vllm_speculative_config(self, base: dict[str, Any] | None = None) -> str:
        cfg = {
            **(base or {}),
            "num_speculative_tokens": self.k_max,
            "num_speculative_tokens_per_batch_size": [list(r) for r in self.ranges],
        }
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


def _step_k(plain: ArmCosts, spec: ArmCosts, k: int) -> Callable[[int, int], float]:
    """Step seconds at batch b with j drafts: linear in j between the plain arm's (0) and the
    speculative arm's (k) measured steps."""
    return lambda b, j: plain.step(b) + j / k * (spec.step(b) - plain.step(b))


def _costs(
    data: PilotData, plain_arm: str, spec_arm: str, profile: HardwareProfile | None
) -> tuple[ArmCosts, ArmCosts]:
    plain, spec = calibrate(data, plain_arm), calibrate(data, spec_arm)
    if profile is None:
        return plain, spec
    from specpilot.simulate.profile import apply

    return apply(plain, profile), apply(spec, profile)


def k_schedule(
    data: PilotData, plain_arm: str, spec_arm: str, *, profile: HardwareProfile | None = None
) -> KSchedule:
    """The k per batch size from the two arms' step costs (the pilot's, or ``profile``'s) and
    the speculative arm's measured per-position acceptance."""
    plain, spec = _costs(data, plain_arm, spec_arm, profile)
    if spec.k is None:
        raise ConfigError(f"arm {spec_arm!r} did not speculate: no k to schedule")
    k = spec.k
    rr = [r for r in data.request_rounds if r.arm == spec_arm and any(r.pos_proposed)]
    if not rr:
        raise ConfigError(
            f"arm {spec_arm!r} reports no per-position acceptance (only totals, as llama.cpp "
            "does): no k schedule can be derived from it"
        )
    prop = np.zeros(k)
    acc = np.zeros(k)
    for r in rr:
        n = min(k, len(r.pos_proposed))
        prop[:n] += r.pos_proposed[:n]
        acc[:n] += r.pos_accepted[:n]
    p_ge = np.divide(acc, prop, out=np.zeros(k), where=prop > 0)
    expected = [1.0 + float(p_ge[:j].sum()) for j in range(k + 1)]
    step = _step_k(plain, spec, k)

    def at(j: int) -> Callable[[float], float]:
        return lambda b: step(int(b), j)

    s = best_k([at(j) for j in range(k + 1)], expected, max(plain.slots, spec.slots))
    notes = (
        f"plain {plain.profile}; speculative {spec.profile}",
        "k = 0 keeps the draft allocated (not the same as no speculation); vLLM issue #49548: "
        "throughput collapse reported at a schedule's batch threshold; pilot it as an arm",
    )
    return KSchedule(s.k_max, s.ranges, s.rate, notes)


@dataclass(frozen=True)
class ScheduleCheck:
    """The schedule against the fixed K, simulated step by step on the same arrivals.
    ``rows``: per rate, the mean over seeds of goodput and p50 E2E under each policy and the
    paired goodput difference (schedule - fixed) with its standard error."""

    k_max: int
    rows: tuple[dict[str, float | None], ...]
    text: str
    profile: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "k_max": self.k_max,
            "rows": list(self.rows),
            "text": self.text,
            "profile": self.profile,
        }


def check(
    data: PilotData,
    plain_arm: str,
    spec_arm: str,
    schedule: KSchedule,
    *,
    rates: Sequence[float] | None = None,
    n: int = 400,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    profile: HardwareProfile | None = None,
) -> ScheduleCheck:
    """Goodput and p50 E2E of ``schedule`` vs the fixed K over ``rates`` (default: six from a
    sixteenth of the fixed K's estimated capacity to 1.5 times it), on Poisson arrivals with
    the lengths of the arm's last measured phase."""
    from specpilot.simulate.predict import measured, measured_phases, poisson_workload

    plain, spec = _costs(data, plain_arm, spec_arm, profile)
    if spec.k is None:
        raise ConfigError(f"arm {spec_arm!r} did not speculate: no k to check")
    k = spec.k
    step = _step_k(plain, spec, k)
    accepted = {g: (v.astype(np.int64) - 1, p) for g, (v, p) in spec.committed.items()}
    phases = measured_phases(data, spec_arm)
    if not phases:
        raise ConfigError(f"arm {spec_arm!r} has no measured phase to take requests from")
    template, _ = measured(data, spec_arm, phases[-1])  # the last phase of the schedule
    if rates is None:
        rates = _around_capacity(template, spec)

    def k_of(b: int) -> int:
        return next((kk for lo, hi, kk in schedule.ranges if lo <= b <= hi), schedule.ranges[-1][2])

    rows: list[dict[str, float | None]] = []
    for rate in rates:
        got: dict[str, list[tuple[float, float | None]]] = {"fixed": [], "schedule": []}
        for seed in seeds:
            w = poisson_workload(template, rate, n, np.random.default_rng([seed, int(rate * 1e6)]))
            for name, policy in (("fixed", lambda b: k), ("schedule", k_of)):
                got[name].append(_goodput_and_p50(spec, w, accepted, policy, step, seed))
        rows.append(_paired_row(rate, got["fixed"], got["schedule"]))
    text = _verdict(rows, rates, k, len(seeds))
    return ScheduleCheck(k, tuple(rows), f"checked step by step: {text}", spec.profile)


def _around_capacity(template: Workload, spec: ArmCosts) -> list[float]:
    """Six rates from a sixteenth of the fixed k's capacity (all slots busy, no queue) to 1.5
    times it, geometrically spaced."""
    per_request = float(
        np.mean(template.output_tokens) / spec.mean_committed("*") * spec.step(spec.slots)
        + spec.prefill(float(np.mean(template.prompt_tokens)))
    )
    cap = spec.slots / max(per_request, 1e-9)
    rates: list[float] = np.geomspace(cap / 16, 1.5 * cap, 6).round(6).tolist()
    return rates


def _goodput_and_p50(
    spec: ArmCosts,
    w: Workload,
    accepted: dict[str, tuple[np.ndarray, np.ndarray]],
    policy: Callable[[int], int],
    step: Callable[[int, int], float],
    seed: int,
) -> tuple[float, float | None]:
    """``w`` simulated step by step with k = ``policy(batch size)``: its goodput and p50 E2E."""
    from specpilot.simulate import stepwise
    from specpilot.simulate.predict import figures

    r = stepwise.run(
        w.arrival_t,
        w.prompt_tokens,
        w.output_tokens,
        w.group,
        accepted=accepted,
        k_of_b=policy,
        step_k=step,
        prefill_s=spec.prefill,
        slots=spec.slots,
        overhead_s=spec.overhead_s,
        abort_s=w.abort_s,
        seed=seed,
    )
    f = figures(w, r.ok, r.e2e, r.ttft)
    return f.goodput, f.e2e_p50


def _paired_row(
    rate: float,
    fixed: list[tuple[float, float | None]],
    schedule: list[tuple[float, float | None]],
) -> dict[str, float | None]:
    """One rate's row: the means over seeds of (goodput, p50 E2E) under each policy and the
    paired goodput difference (schedule - fixed, seed by seed) with its standard error."""
    diff = np.array([s[0] - f[0] for s, f in zip(schedule, fixed, strict=True)])
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    return {
        "rate": float(rate),
        "goodput_fixed": _mean([g for g, _ in fixed]),
        "goodput_schedule": _mean([g for g, _ in schedule]),
        "e2e_p50_fixed": _mean([e for _, e in fixed]),
        "e2e_p50_schedule": _mean([e for _, e in schedule]),
        "goodput_diff": float(diff.mean()),
        "goodput_diff_se": se,
    }


def _mean(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


def _verdict(
    rows: Sequence[dict[str, float | None]], rates: Sequence[float], k: int, n_seeds: int
) -> str:
    """Where the schedule gains or loses goodput against a fixed ``k`` (a paired difference
    beyond 2 standard errors), and where it makes no difference."""
    gains = [r["rate"] for r in rows if (r["goodput_diff"] or 0) > 2 * (r["goodput_diff_se"] or 0)]
    loses = [r["rate"] for r in rows if (r["goodput_diff"] or 0) < -2 * (r["goodput_diff_se"] or 0)]
    fmt = lambda xs: ", ".join(f"{x:.3g}" for x in xs)  # noqa: E731
    same = [r for r in rates if r not in gains and r not in loses]
    if not gains and not loses:
        return (
            f"the schedule and a fixed k={k} give the same goodput (within 2 standard errors "
            f"over {n_seeds} seeds) at every simulated rate ({fmt(rates)} req/s)"
        )
    parts = [
        f"the schedule gains goodput over a fixed k={k} at {fmt(gains)} req/s" if gains else "",
        f"loses to it at {fmt(loses)} req/s" if loses else "",
        f"no difference at {fmt(same)} req/s" if same else "",
    ]
    return "; ".join(x for x in parts if x) + f" (simulated over {n_seeds} seeds)"
