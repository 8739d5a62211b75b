"""Predictions from a calibrated arm: replay a pilot phase, scale it to another rate, or run it
on N replicas (the validation gate: ``simulate.validation``; the crossover between two arms:
``simulate.crossover``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specpilot.analysis.base.stats import quantile_interval
from specpilot.errors import ConfigError
from specpilot.records import PilotData, RequestRecord, level_of
from specpilot.simulate.costs import ArmCosts, rounds_needed
from specpilot.simulate.engine import SimResult, simulate


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
        requests=len(w),
        ok=int(ok.sum()),
        e2e_p50=_q(e, 0.5),
        e2e_p99=_q(e, 0.99),
        ttft_p50=_q(t, 0.5),
        ttft_p99=_q(t, 0.99),
        goodput=float(on_time.sum() / w.duration_s) if w.duration_s > 0 else 0.0,
    )


def measured_phases(data: PilotData, arm: str) -> list[str]:
    """The arm's measured phases in the schedule's order (an episode's order is its level's)."""
    order = list(
        dict.fromkeys(level_of(p["name"]) for p in (data.pilot.schedule or {}).get("phases", []))
    )
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
        r
        for r in data.requests
        if r.arm == arm and r.phase == phase and not r.warmup and r.status != "not_sent"
    ]
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
        arrival_t=np.array([r.scheduled_t - t0 for r in reqs]),
        prompt_tokens=prompt,
        output_tokens=output,
        group=np.array([r.task_group for r in reqs], dtype=object),
        deadline_s=col("deadline_s"),
        ttft_slo_s=col("ttft_slo_s"),
        duration_s=duration or float(max(r.scheduled_t for r in reqs) - t0) or 1.0,
    )
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
    takes the requests as independent draws; requests of one episode are not (they share the
    machine's moment and the queue), so the figure's real uncertainty is wider still."""
    kind, _, q = metric.partition("_p")
    if kind not in ("e2e", "ttft") or not q.isdigit():
        return None, None
    end = "done_t" if kind == "e2e" else "first_content_t"
    x = np.array(
        [
            getattr(r, end) - r.sent_t
            for r in phase_requests(data, arm, phase)
            if r.status == "ok" and getattr(r, end) is not None and r.sent_t is not None
        ]
    )
    return quantile_interval(x, int(q) / 100, level)


def run_arm(
    costs: ArmCosts,
    w: Workload,
    *,
    seed: int = 0,
    replicas: int = 1,
    router: str = "round_robin",
    queue_timeout_s: float = float("inf"),
) -> SimResult:
    """The workload through the arm's calibrated costs: each request's decode steps drawn from
    its group's committed tokens per round, then the event model."""
    rng = np.random.default_rng(seed)
    steps = np.zeros(len(w), dtype=np.int64)
    for g in np.unique(w.group):
        sel = w.group == g
        v, p = costs.committed.get(str(g)) or costs.committed["*"]
        steps[sel] = rounds_needed(w.output_tokens[sel] - 1, v, p, rng)
    return simulate(
        w.arrival_t,
        w.prompt_tokens,
        steps,
        step_s=costs.step,
        prefill_s=costs.prefill,
        slots=costs.slots,
        replicas=replicas,
        router=router,
        queue_timeout_s=queue_timeout_s,
        overhead_s=costs.overhead_s,
        abort_s=w.abort_s,
    )


def predict(
    costs: ArmCosts,
    w: Workload,
    *,
    seed: int = 0,
    replicas: int = 1,
    router: str = "round_robin",
    queue_timeout_s: float = float("inf"),
) -> Figures:
    r = run_arm(
        costs, w, seed=seed, replicas=replicas, router=router, queue_timeout_s=queue_timeout_s
    )
    return figures(w, r.ok, r.e2e, r.ttft)


def poisson_workload(template: Workload, rate: float, n: int, rng: np.random.Generator) -> Workload:
    """``n`` Poisson arrivals at ``rate`` with prompts, outputs and groups resampled (jointly)
    from ``template`` (a measured phase or a trace)."""
    gaps = rng.exponential(1.0 / rate, size=n)
    idx = rng.integers(0, len(template), size=n)
    t = np.cumsum(gaps) - gaps[0]
    return Workload(
        arrival_t=t,
        prompt_tokens=template.prompt_tokens[idx],
        output_tokens=template.output_tokens[idx],
        group=template.group[idx],
        deadline_s=template.deadline_s[idx],
        ttft_slo_s=template.ttft_slo_s[idx],
        duration_s=float(t[-1]) if n else 0.0,
        abort_s=None if template.abort_s is None else template.abort_s[idx],
    )


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
        arrival_t=t,
        prompt_tokens=tr.input_tokens[:n].astype(np.int64),
        output_tokens=np.maximum(tr.output_tokens[:n], 1).astype(np.int64),
        group=np.full(n, "*", dtype=object),
        deadline_s=nan,
        ttft_slo_s=nan.copy(),
        duration_s=float(t[-1]) if n else 0.0,
    )
