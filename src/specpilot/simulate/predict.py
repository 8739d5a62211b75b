"""Predictions from a calibrated arm: replay a pilot phase, scale it to another rate, or run it
on N replicas; the validation gate (the crossover between two arms: ``simulate.crossover``).

The validation gate (``validate``): calibrate on some of the pilot's phases, replay the others'
measured arrivals, prompts and output lengths through the simulator, and compare p50 / p99 of
E2E and TTFT and the goodput with what was measured. Within ``tolerance`` (15%) on p50 and p99
E2E the arm's simulation is *validated*; otherwise it is reported as not validated with its
misses, and nothing downstream may use it as evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specpilot.analysis.drift import contended
from specpilot.analysis.stats import quantile_interval
from specpilot.errors import ConfigError
from specpilot.records import PilotData, RequestRecord
from specpilot.simulate.costs import ArmCosts, calibrate, rounds_needed
from specpilot.simulate.engine import SimResult, simulate

TOLERANCE = 0.15


@dataclass
class Workload:
    """Requests to simulate: arrival (s from the start), prompt and output tokens, task group,
    deadline and TTFT SLO (NaN: none), and when the client gives up (``abort_s`` from arrival:
    the deadline where the load generator enforces it, else its timeout; NaN: never)."""

    arrival_t: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    group: np.ndarray
    deadline_s: np.ndarray
    ttft_slo_s: np.ndarray
    duration_s: float
    abort_s: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_t)


@dataclass(frozen=True)
class Figures:
    requests: int
    ok: int
    e2e_p50: float | None
    e2e_p99: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    goodput: float  # on-time completions per second of the workload's duration

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _q(x: np.ndarray, q: float) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.quantile(x, q)) if len(x) else None


def figures(w: Workload, ok: np.ndarray, e2e: np.ndarray, ttft: np.ndarray) -> Figures:
    on_time = (
        ok
        & (np.isnan(w.deadline_s) | (e2e <= w.deadline_s))
        & (np.isnan(w.ttft_slo_s) | (ttft <= w.ttft_slo_s))
    )
    e, t = np.where(ok, e2e, np.inf), np.where(ok, ttft, np.inf)
    return Figures(
        len(w), int(ok.sum()), _q(e, 0.5), _q(e, 0.99), _q(t, 0.5), _q(t, 0.99),
        float(on_time.sum() / w.duration_s) if w.duration_s > 0 else 0.0,
    )  # fmt: skip


def measured_phases(data: PilotData, arm: str) -> list[str]:
    """The arm's measured phases in the schedule's order."""
    order = [p["name"] for p in (data.pilot.schedule or {}).get("phases", [])]
    mine = {p.phase for p in data.phases if p.arm == arm and not p.warmup and p.phase != "drill"}
    return [p for p in order if p in mine] + sorted(mine - set(order))


def demand(data: PilotData, reqs: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output tokens each request asked for. A request that did not finish (a
    timeout, an error) reports only what it got before it ended, which is not its demand: it
    takes the lengths the same scheduled request had where it finished in another arm (every
    arm replays the same schedule), else its planned ``max_tokens`` and the median prompt."""
    done: dict[str, tuple[int, int]] = {}
    for q in data.requests:
        if q.status == "ok" and q.prompt_tokens and q.output_tokens is not None:
            done.setdefault(q.request_id, (q.prompt_tokens, q.output_tokens))
    planned: dict[str, int] = {}
    for s in (data.pilot.schedule or {}).get("requests", []):
        planned[f"{s.get('phase')}-{int(s.get('index', -1)):06d}"] = int(s.get("max_tokens") or 0)
    known = [q.prompt_tokens for q in reqs if q.prompt_tokens]
    median_prompt = int(np.median(known)) if known else 0
    prompt, output = [], []
    for q in reqs:
        if q.status == "ok" and q.output_tokens is not None:
            prompt.append(q.prompt_tokens or done.get(q.request_id, (median_prompt, 0))[0])
            output.append(q.output_tokens)
            continue
        other = done.get(q.request_id)
        prompt.append(q.prompt_tokens or (other[0] if other else median_prompt))
        output.append(other[1] if other else planned.get(q.request_id) or q.output_tokens or 1)
    return np.array(prompt, dtype=np.int64), np.maximum(np.array(output, dtype=np.int64), 1)


def phase_requests(data: PilotData, arm: str, phase: str) -> list[RequestRecord]:
    """The arm's sent requests of the phase, in schedule order."""
    reqs = [
        r for r in data.requests
        if r.arm == arm and r.phase == phase and not r.warmup and r.status != "not_sent"
    ]  # fmt: skip
    return sorted(reqs, key=lambda r: r.scheduled_t)


def measured(data: PilotData, arm: str, phase: str) -> tuple[Workload, Figures]:
    """The phase as the arm saw it: its requests' arrivals and lengths, and the figures."""
    reqs = phase_requests(data, arm, phase)
    if not reqs:
        raise ConfigError(f"arm {arm!r} has no requests in phase {phase!r}")
    t0 = min(r.scheduled_t for r in reqs)
    info = next((p for p in data.phases if p.arm == arm and p.phase == phase), None)
    duration = info.planned_end_s - info.planned_start_s if info is not None else 0.0

    def col(name: str) -> np.ndarray:
        return np.array([np.nan if getattr(r, name) is None else getattr(r, name) for r in reqs])

    prompt, output = demand(data, reqs)
    w = Workload(
        np.array([r.scheduled_t - t0 for r in reqs]), prompt, output,
        np.array([r.task_group for r in reqs], dtype=object), col("deadline_s"),
        col("ttft_slo_s"), duration or float(max(r.scheduled_t for r in reqs) - t0) or 1.0,
    )  # fmt: skip
    load = (data.pilot.config or {}).get("load") or {}
    # a pilot's load: section says timeout_s; a `specpilot load` file keeps its flag's name
    limit = float(load.get("timeout_s") or load.get("timeout") or np.inf)
    if load.get("enforce_deadlines", True):
        w.abort_s = np.fmin(np.nan_to_num(w.deadline_s, nan=np.inf), limit)
    else:
        w.abort_s = np.full(len(w), limit)
    ok = np.array([r.status == "ok" for r in reqs])
    sent = col("sent_t")
    e2e = col("done_t") - sent
    ttft = col("first_content_t") - sent
    return w, figures(w, ok, np.nan_to_num(e2e, nan=np.inf), np.nan_to_num(ttft, nan=np.inf))


def measured_interval(
    data: PilotData, arm: str, phase: str, metric: str, level: float = 0.95
) -> tuple[float | None, float | None]:
    """The distribution-free interval of a measured quantile figure (``e2e_p99``...) of the
    arm's ok requests in the phase, as ``measured`` computes it; (None, None) for others. It
    takes the requests as independent draws; requests queued together are not
    (``analysis.clusters``), so the figure's real uncertainty is wider still."""
    kind, _, q = metric.partition("_p")
    if kind not in ("e2e", "ttft") or not q.isdigit():
        return None, None
    end = "done_t" if kind == "e2e" else "first_content_t"
    x = np.array([
        getattr(r, end) - r.sent_t for r in phase_requests(data, arm, phase)
        if r.status == "ok" and getattr(r, end) is not None and r.sent_t is not None
    ])  # fmt: skip
    return quantile_interval(x, int(q) / 100, level)


def run_arm(
    costs: ArmCosts, w: Workload, *, seed: int = 0, replicas: int = 1,
    router: str = "round_robin", queue_timeout_s: float = float("inf"),
) -> SimResult:  # fmt: skip
    """The workload through the arm's calibrated costs: each request's decode steps drawn from
    its group's committed tokens per round, then the event model."""
    rng = np.random.default_rng(seed)
    steps = np.zeros(len(w), dtype=np.int64)
    for g in np.unique(w.group):
        sel = w.group == g
        v, p = costs.committed.get(str(g)) or costs.committed["*"]
        steps[sel] = rounds_needed(w.output_tokens[sel] - 1, v, p, rng)
    return simulate(
        w.arrival_t, w.prompt_tokens, steps, step_s=costs.step, prefill_s=costs.prefill,
        slots=costs.slots, replicas=replicas, router=router, queue_timeout_s=queue_timeout_s,
        overhead_s=costs.overhead_s, abort_s=w.abort_s,
    )  # fmt: skip


def predict(
    costs: ArmCosts, w: Workload, *, seed: int = 0, replicas: int = 1, router: str = "round_robin",
    queue_timeout_s: float = float("inf"),
) -> Figures:  # fmt: skip
    r = run_arm(costs, w, seed=seed, replicas=replicas, router=router,
                queue_timeout_s=queue_timeout_s)  # fmt: skip
    return figures(w, r.ok, r.e2e, r.ttft)


@dataclass(frozen=True)
class Check:
    phase: str
    metric: str
    measured: float | None
    predicted: float | None
    rel_error: float | None
    gated: bool  # part of the gate (p50 and p99 E2E)
    within: bool | None
    # the measured quantile's own distribution-free 95% interval (``stats.quantile_interval``;
    # None: a side its requests cannot bound); None for goodput
    measured_low: float | None = None
    measured_high: float | None = None

    @property
    def coarse(self) -> bool:
        """The measurement's own interval is wider than the gate on a side: the figure cannot
        tell a prediction within the tolerance from one outside it."""
        m = self.measured
        if not self.metric.endswith(("_p50", "_p99")) or not m:
            return False
        lo, hi = self.measured_low, self.measured_high
        return lo is None or hi is None or lo < m * (1 - TOLERANCE) or hi > m * (1 + TOLERANCE)


@dataclass(frozen=True)
class Validation:
    arm: str
    calibrated_on: tuple[str, ...]
    predicted_on: tuple[str, ...]
    tolerance: float
    checks: tuple[Check, ...]
    validated: bool
    profile: str
    # the A/A control's measured p50 / p99 E2E against the baseline's on the predicted phases:
    # the largest relative difference between identical arms (None: no control in the pilot)
    aa_floor: float | None = None
    # the arm's phases (calibration and predicted) that shared the machine more than the others
    # (analysis.drift.contended)
    contended: tuple[str, ...] = ()
    # the largest change of the machine's own step time between the calibration phases and a
    # predicted one: every arm's median decode step at batch 1, the median over arms (None:
    # no step cadence in the file); the interleaving keeps arms comparable within a phase, not
    # the machine's speed from phase to phase, which a calibration carries over
    phase_speed: float | None = None

    @property
    def text(self) -> str:
        gated = [c for c in self.checks if c.gated and c.rel_error is not None]
        worst = max(gated, key=lambda c: abs(c.rel_error or 0), default=None)
        miss = (
            f"; largest miss {worst.metric} at {worst.phase}: {worst.rel_error:+.0%}"
            if worst
            else ""
        )
        state = "validated" if self.validated else "NOT validated"
        floor = ""
        if self.aa_floor is not None:
            floor = f"; identical arms (A/A) differ by up to {self.aa_floor:.0%} on these figures"
            if self.aa_floor > self.tolerance and self.validated:
                floor += ", more than the gate allows: the agreement may be luck"
            elif self.aa_floor > self.tolerance:
                floor += ", more than the gate allows: this file cannot validate a simulation"
        if self.phase_speed is not None and abs(self.phase_speed) > self.tolerance:
            floor += (
                f"; the machine's step time at batch 1 moved {self.phase_speed:+.0%} between "
                "the calibration and a predicted phase (the median over arms), more than the gate "
                "allows: a miss here is the machine's drift as much as the model's"
            )
        coarse = [c for c in self.checks if c.gated and c.coarse]
        if coarse:
            c = coarse[0]
            hi = "unbounded" if c.measured_high is None else f"{c.measured_high:.3g} s"
            lo = "unbounded" if c.measured_low is None else f"{c.measured_low:.3g} s"
            floor += (
                f"; the measured figure's own 95% interval is wider than the gate on "
                f"{len(coarse)} of {sum(c.gated for c in self.checks)} gated checks (e.g. {c.metric} at {c.phase}: "
                f"{c.measured:.3g} s, {lo} to {hi}): there a pass is weak evidence and a miss "
                "is the measurement's few requests as much as the model"
            )
        shared = f"; measured on a shared machine: {'; '.join(self.contended)}" * bool(
            self.contended
        )
        return (
            f"simulation of {self.arm} {state} (calibrated on {', '.join(self.calibrated_on)}, "
            f"predicting {', '.join(self.predicted_on)}, p50/p99 E2E within "
            f"{self.tolerance:.0%}){miss}{floor}{shared}"
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["text"] = self.text
        return d


def validate(
    data: PilotData, arm: str, calibrate_on: Sequence[str], predict_on: Sequence[str], *,
    tolerance: float = TOLERANCE, seed: int = 0,
) -> Validation:  # fmt: skip
    costs = calibrate(data, arm, calibrate_on)
    checks = []
    for phase in predict_on:
        w, meas = measured(data, arm, phase)
        pred = predict(costs, w, seed=seed)
        for metric, gated in (("e2e_p50", True), ("e2e_p99", True), ("ttft_p50", False),
                              ("ttft_p99", False), ("goodput", False)):  # fmt: skip
            m, p = getattr(meas, metric), getattr(pred, metric)
            rel = (p - m) / m if m and p is not None else None
            within = None if rel is None else abs(rel) <= tolerance
            lo, hi = measured_interval(data, arm, phase, metric)
            checks.append(Check(phase, metric, m, p, rel, gated, within, lo, hi))
    gate = [c for c in checks if c.gated]
    ok = bool(gate) and all(c.within for c in gate)
    on = set(calibrate_on) | set(predict_on)
    shared = contended([p for p in data.phases if p.phase in on], [arm], across="phases")
    return Validation(
        arm, tuple(calibrate_on), tuple(predict_on), tolerance, tuple(checks), ok, costs.profile,
        aa_floor(data, predict_on), shared, phase_speed(data, calibrate_on, predict_on),
    )  # fmt: skip


SPEED_SAMPLES = 20  # batch-1 steps a phase needs for its median to count (fewer: too noisy)


def phase_speed(
    data: PilotData, calibrate_on: Sequence[str], predict_on: Sequence[str]
) -> float | None:
    """The largest relative change, from the calibration phases to a predicted one, of the
    median over arms of each arm's median decode step at batch 1 (``PilotData.step_cadence``,
    ``SPEED_SAMPLES`` steps or more in both): how much faster or slower the machine itself ran
    (None: no arm has both)."""
    cal, worst = set(calibrate_on), None
    arms = {c.arm for c in data.step_cadence}
    for phase in predict_on:
        ratios = []
        for arm in arms:
            at = {c.phase: c.median_s for c in data.step_cadence
                  if c.arm == arm and c.batch_size == 1 and c.samples >= SPEED_SAMPLES}  # fmt: skip
            base = [at[p] for p in cal if p in at]
            if base and phase in at and min(base) > 0:
                ratios.append(at[phase] / float(np.mean(base)) - 1.0)
        if ratios:
            r = float(np.median(ratios))
            worst = r if worst is None or abs(r) > abs(worst) else worst
    return worst


def aa_floor(data: PilotData, phases: Sequence[str]) -> float | None:
    """The largest relative difference of measured p50 / p99 E2E between the A/A control and
    the baseline (the same configuration twice) on ``phases``: how closely this file can check
    any prediction."""
    roles = {a.role: a.arm for a in data.arms}
    base, ctrl = roles.get("baseline"), roles.get("control")
    if base is None or ctrl is None:
        return None
    worst: float | None = None
    for phase in phases:
        try:
            _, b = measured(data, base, phase)
            _, c = measured(data, ctrl, phase)
        except ConfigError:
            continue
        for m in ("e2e_p50", "e2e_p99"):
            x, y = getattr(b, m), getattr(c, m)
            if x and y is not None:
                d = abs(y - x) / x
                worst = d if worst is None else max(worst, d)
    return worst


def poisson_workload(template: Workload, rate: float, n: int, rng: np.random.Generator) -> Workload:
    """``n`` Poisson arrivals at ``rate`` with prompts, outputs and groups resampled (jointly)
    from ``template`` (a measured phase or a trace)."""
    gaps = rng.exponential(1.0 / rate, size=n)
    idx = rng.integers(0, len(template), size=n)
    t = np.cumsum(gaps) - gaps[0]
    return Workload(
        t, template.prompt_tokens[idx], template.output_tokens[idx], template.group[idx],
        template.deadline_s[idx], template.ttft_slo_s[idx], float(t[-1]) if n else 0.0,
        None if template.abort_s is None else template.abort_s[idx],
    )  # fmt: skip


def trace_workload(path: str, time_scale: float = 1.0, max_requests: int | None = None) -> Workload:
    """A trace's arrivals (gaps x ``time_scale``: 2 replays it at half its rate) with its own
    input and output tokens; no task groups (the arm's pooled acceptance) and no SLOs."""
    from specpilot.workload.trace import load_trace

    if time_scale <= 0:
        raise ConfigError(f"--time-scale {time_scale}: must be > 0", fix="e.g. --time-scale 2")
    tr = load_trace(path)
    n = len(tr.t) if max_requests is None else min(len(tr.t), max_requests)
    t = (tr.t[:n] - tr.t[0]) * time_scale
    nan = np.full(n, np.nan)
    return Workload(
        t, tr.input_tokens[:n].astype(np.int64), np.maximum(tr.output_tokens[:n], 1).astype(np.int64),
        np.full(n, "*", dtype=object), nan, nan.copy(), float(t[-1]) if n else 0.0,
    )  # fmt: skip
