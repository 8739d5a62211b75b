"""Arrivals per phase: the plan's phases in order, and each one's arrival times.

The plan is the warm-up phase (when ``warmup.requests`` > 0: that many requests at a constant
rate) followed by the YAML's phases. Each phase gets its arrival process, seeded from the
workload seed and the phase's position, and its duration: the configured one, the sum of its
steps, or the replayed trace window's or request log's (time-scaled) length, whichever applies
(a configured duration cuts a replay short, never stretches it). A trace phase also yields each
arrival's input and output token counts; a request-log phase each arrival's logged request.

    >>> from specpilot.workload import parse_workload
    >>> cfg = parse_workload({"groups": {"code": {}}, "warmup": {"requests": 2},
    ...     "phases": [{"name": "p", "duration_s": 3, "arrival": {"kind": "constant", "rate": 1}}]})
    >>> [(a.plan.name, a.times.tolist()) for a in map(ArrivalPlanner(cfg, 0, Path(".")).arrivals,
    ...                                                  plan_phases(cfg))]
    [('warmup', [0.0, 1.0]), ('p', [0.0, 1.0, 2.0])]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specpilot.errors import ConfigError
from specpilot.workload.arrivals import ArrivalProcess, Constant, Gamma, Poisson, Steps, TraceReplay
from specpilot.workload.config import (
    PhaseModel,
    RequestLogArrival,
    TraceArrival,
    WorkloadConfig,
    WorkloadError,
)
from specpilot.workload.requestlog import (
    LoggedRequest,
    RequestLog,
    RequestLogReplay,
    read_request_log,
    request_log_trace,
)
from specpilot.workload.resolve import resolve_path
from specpilot.workload.seeds import ARRIVALS, derived_seed
from specpilot.workload.trace import Trace, find_windows, load_trace


@dataclass(frozen=True)
class PhasePlan:
    """One phase of the plan: its name, its key in every seeded stream, its group mix."""

    name: str
    key: int  # 0: the warm-up phase; i + 1: the YAML's i-th phase
    weights: dict[str, float]  # group -> weight, only groups with weight > 0, in YAML order
    model: PhaseModel | None  # None: the warm-up phase

    @property
    def warmup(self) -> bool:
        return self.model is None


@dataclass(frozen=True)
class PhaseArrivals:
    """When a phase's requests arrive (seconds from the phase start), and trace lengths."""

    plan: PhasePlan
    process: ArrivalProcess
    duration_s: float
    times: np.ndarray
    trace: TraceArrival | None = None  # set for trace replay, with ``lengths``
    lengths: tuple[np.ndarray, np.ndarray] | None = None  # (input, output) tokens per arrival
    window: dict[str, Any] | None = None  # the trace (or request-log) window that was found
    logged: tuple[LoggedRequest, ...] | None = None  # request-log replay: one per arrival

    def trace_lengths(self, j: int) -> tuple[int | None, int | None]:
        """(input, output) tokens of arrival ``j`` to use, per the phase's ``use_lengths``."""
        if self.trace is None or self.lengths is None or self.trace.use_lengths == "none":
            return None, None
        out = int(self.lengths[1][j])
        return (int(self.lengths[0][j]) if self.trace.use_lengths == "both" else None), out


def plan_phases(cfg: WorkloadConfig) -> list[PhasePlan]:
    default = {n: g.weight for n, g in cfg.groups.items()}
    plan = [PhasePlan("warmup", 0, _positive(default), None)] if cfg.warmup.requests else []
    for i, p in enumerate(cfg.phases):
        plan.append(PhasePlan(p.name, i + 1, _positive(p.groups or default), p))
    return plan


def _positive(weights: dict[str, float]) -> dict[str, float]:
    return {n: float(w) for n, w in weights.items() if w > 0}


class ArrivalPlanner:
    """Arrivals of each phase of one workload (traces are read once and shared)."""

    def __init__(
        self, cfg: WorkloadConfig, seed: int, base_dir: Path, capacity_rps: float | None = None
    ) -> None:
        self.cfg, self.seed, self.base_dir = cfg, seed, base_dir
        self.capacity_rps = capacity_rps  # what target_utilization is a fraction of
        self._traces: dict[Any, Trace] = {}  # by path (traces), or (path, shape, time_field)
        self._logs: dict[tuple[Any, ...], RequestLog] = {}

    def rate(self, phase: str, rate: float | None, utilization: float | None) -> float | None:
        """The phase's rate: ``rate`` as given, else ``utilization`` x the measured capacity
        (None when neither is set: a trace phase replayed at its own pace)."""
        if utilization is None:
            return rate
        if self.capacity_rps is None:
            raise ConfigError(
                f"phase {phase!r}: target_utilization {utilization:g} is a fraction of the "
                "baseline's measured capacity, and no capacity was given",
                fix="run it in a pilot (its capacity probe measures the capacity first), or "
                "give the rate itself (rate:, or target_rate: for a trace)",
            )
        return utilization * self.capacity_rps

    def arrivals(self, plan: PhasePlan) -> PhaseArrivals:
        if plan.model is None:
            n, rate = self.cfg.warmup.requests, self.cfg.warmup.rate
            warm = Constant(rate)
            return PhaseArrivals(plan, warm, n / rate, warm.times(n / rate)[:n])
        p = plan.model
        seed = derived_seed(self.seed, plan.key, ARRIVALS)
        a = p.arrival
        if isinstance(a, TraceArrival):
            return self._replay(plan, p, a)
        if isinstance(a, RequestLogArrival):
            return self._request_log(plan, p, a)
        if a.kind == "steps":
            st = Steps([(s.duration_s, s.rate) for s in a.steps], a.step_kind, a.cv, seed)
            duration = p.duration_s or st.total_s
            return PhaseArrivals(plan, st, duration, st.times(duration))
        assert p.duration_s is not None  # the config validator enforces it
        at = self.rate(p.name, a.rate, a.target_utilization)
        assert at is not None  # the config validator enforces one of the two
        proc: ArrivalProcess
        if a.kind == "constant":
            proc = Constant(at)
        elif a.kind == "poisson":
            proc = Poisson(at, seed)
        else:
            proc = Gamma(at, a.cv, seed)
        return PhaseArrivals(plan, proc, p.duration_s, proc.times(p.duration_s))

    def _replay(self, plan: PhasePlan, p: PhaseModel, a: TraceArrival) -> PhaseArrivals:
        path = resolve_path(a.path, self.base_dir)
        if path not in self._traces:
            self._traces[path] = load_trace(path)
        tr = self._traces[path]
        window, info = self._window(p.name, tr, a)
        replay = TraceReplay(
            tr,
            time_scale=a.time_scale,
            length_scale=a.length_scale,
            target_rate=self.rate(p.name, a.target_rate, a.target_utilization),
            max_input_tokens=a.max_input_tokens,
            max_output_tokens=a.max_output_tokens,
            window=window,
        )
        dur = replay.duration_s if p.duration_s is None else min(p.duration_s, replay.duration_s)
        times, ins, outs = replay.events(dur)
        return PhaseArrivals(plan, replay, dur, times, a, (ins, outs), info)

    def _request_log(self, plan: PhasePlan, p: PhaseModel, a: RequestLogArrival) -> PhaseArrivals:
        """The log's requests in the phase's window, scaled and capped; cut at ``duration_s``."""
        path = resolve_path(a.path, self.base_dir)
        key = (path, a.shape, a.time_field)
        if a.window in ("off_peak", "peak", "burst") and key not in self._traces:
            self._traces[key] = request_log_trace(path, shape=a.shape, time_field=a.time_field)
        window, info = self._window(p.name, self._traces.get(key), a)
        routes = tuple(sorted(a.routes.items())) if a.routes is not None else None
        opts = (a.route_field, routes, a.group_field, a.time_scale, a.rate_cap, window)
        if (*key, *opts) not in self._logs:
            self._logs[(*key, *opts)] = read_request_log(
                path,
                shape=a.shape,
                time_field=a.time_field,
                route_field=a.route_field,
                routes=a.routes,
                group_field=a.group_field,
                time_scale=a.time_scale,
                rate_cap=a.rate_cap,
                window=window,
            )
        log = self._logs[(*key, *opts)]
        if p.duration_s is not None and p.duration_s < log.duration_s:
            kept = tuple(e for e in log.entries if e.offset_s < p.duration_s)
            log = dataclasses.replace(log, entries=kept, duration_s=float(p.duration_s))
        if a.group_field is not None:
            self._known_groups(p.name, a.group_field, log)
        proc = RequestLogReplay(log)
        times = proc.times(log.duration_s)
        return PhaseArrivals(plan, proc, log.duration_s, times, window=info, logged=log.entries)

    def _known_groups(self, phase: str, field: str, log: RequestLog) -> None:
        """The groups a log names itself (``group_field``) are groups of this workload (those
        of ``routes`` are checked with the config)."""
        named = sorted({e.group for e in log.entries if e.group is not None} - set(self.cfg.groups))
        if named:
            raise WorkloadError(
                f"phases.{phase}.arrival.group_field: the request log {log.source} names "
                f"group(s) {', '.join(named)} in {field}, which are not under groups",
                fix="add them under groups (a built-in group, or one with a source), or map the "
                "log's values to groups with route_field and routes (default: GROUP for the rest)",
            )

    @staticmethod
    def _window(
        phase: str, tr: Trace | None, a: TraceArrival | RequestLogArrival
    ) -> tuple[tuple[float, float] | None, dict[str, Any] | None]:
        """The replayed span of the trace (None: all of it) and, when found, its description."""
        if a.window == "all":
            return None, None
        if isinstance(a.window, tuple):
            window = (float(a.window[0]), float(a.window[1]))
            if not window[0] < window[1]:
                raise ConfigError(f"phase {phase!r}: window start must be before its end")
            return window, None
        assert tr is not None  # a named window is found in the trace (or the log's times)
        found = find_windows(tr, a.window_s, a.burst_s, a.context_s)
        if a.window not in found:
            raise ConfigError(
                f"phase {phase!r}: no {a.window} window found in {tr.source}",
                fix="a shorter burst_s or context_s, or window: peak",
            )
        w = found[a.window]
        return (w.start_s, w.end_s), w.to_dict()
