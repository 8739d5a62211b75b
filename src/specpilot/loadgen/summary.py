"""What a platform engineer checks before trusting a load run, and the run's result.

>>> quantile([1.0, 2.0, 3.0, 4.0], 0.5), quantile([], 0.99)
(2.0, None)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specpilot.loadgen.config import LoadConfig
from specpilot.records import STATUSES, ChunkTiming, PrefillRecord, RequestRecord, RoundRecord


def quantile(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile (no interpolation: a p99 is a lag that really happened)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


@dataclass
class LoadSummary:
    """What a platform engineer checks before trusting a run."""

    run_id: str
    scheduled: int
    status_counts: dict[str, int]
    dispatch_lag_p50_s: float | None
    dispatch_lag_p99_s: float | None
    dispatch_lag_max_s: float | None
    send_lag_p99_s: float | None  # sent - scheduled - client stages: the concurrency cap's wait
    lag_threshold_s: float
    trustworthy: bool
    reasons: list[str] = field(default_factory=list)
    concurrency_cap: int | None = None
    max_in_flight: int = 0
    token_count_source: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    stop_reason: str | None = None
    sink_errors: int = 0
    started_t: float = 0.0
    ended_t: float = 0.0
    t_run: float | None = None  # monotonic instant of schedule time 0
    wall_t_run: float | None = None  # the same instant in Unix time
    phase_timing: str = "schedule"
    phase_starts_s: dict[str, float] = field(default_factory=dict)  # "schedule" timing only
    cut_phases: list[str] = field(default_factory=list)  # started, not finished: cut by a stop
    client_stages: str = "none"  # run (measured) | planned (not run, planned seconds kept) | none
    notes: list[str] = field(default_factory=list)  # facts about the run that do not void it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadResult:
    records: list[RequestRecord]
    chunks: list[ChunkTiming]
    summary: LoadSummary
    rounds: list[RoundRecord] = field(default_factory=list)
    prefills: list[PrefillRecord] = field(default_factory=list)


@dataclass
class RunStats:
    """What the runner counts while it runs; ``summary`` turns it into a ``LoadSummary``."""

    dispatch_lags: list[float] = field(default_factory=list)
    token_sources: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    sink_errors: int = 0
    first_sink_error: BaseException | None = None
    notes: list[str] = field(default_factory=list)

    def sending(self, delta: int) -> None:
        self.in_flight += delta
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def sink_failed(self, exc: BaseException) -> None:
        self.sink_errors += 1
        self.first_sink_error = self.first_sink_error or exc

    def summary(
        self,
        cfg: LoadConfig,
        records: list[RequestRecord],
        *,
        stages: str,
        stop_reason: str | None,
        interrupted: bool,
        times: dict[str, float | None],
        phase_starts: dict[str, float],
        cut_phases: list[str],
    ) -> LoadSummary:
        """``stages``: run | planned | none; ``times``: started_t, ended_t, t_run, wall_t_run."""
        counts = {s: 0 for s in STATUSES}
        for r in records:
            counts[r.status] = counts.get(r.status, 0) + 1
        ran = stages == "run"
        send_lags = [
            r.sent_t - r.scheduled_t - (sum(r.client_stages.values()) if ran else 0.0)
            for r in records
            if r.sent_t is not None
        ]
        lags = self.dispatch_lags
        d = cfg.design
        reasons = trust_reasons(
            lags, d.lag_threshold_s, stop_reason, self.sink_errors, self.first_sink_error
        )
        return LoadSummary(
            run_id=cfg.labels.run_id,
            scheduled=len(records),
            status_counts=counts,
            dispatch_lag_p50_s=quantile(lags, 0.5),
            dispatch_lag_p99_s=quantile(lags, 0.99),
            dispatch_lag_max_s=max(lags) if lags else None,
            send_lag_p99_s=quantile(send_lags, 0.99),
            lag_threshold_s=d.lag_threshold_s,
            trustworthy=not reasons,
            reasons=reasons,
            concurrency_cap=d.max_concurrency,
            max_in_flight=self.max_in_flight,
            token_count_source=dict(self.token_sources),
            interrupted=interrupted,
            stop_reason=stop_reason,
            sink_errors=self.sink_errors,
            started_t=times.get("started_t") or 0.0,
            ended_t=times.get("ended_t") or 0.0,
            t_run=times.get("t_run"),
            wall_t_run=times.get("wall_t_run"),
            phase_timing=d.phase_timing,
            phase_starts_s=dict(phase_starts),
            cut_phases=cut_phases,
            client_stages=stages,
            notes=list(self.notes),
        )


def trust_reasons(
    lags: Sequence[float],
    threshold_s: float,
    stop_reason: str | None,
    sink_errors: int,
    first_sink_error: BaseException | None,
) -> list[str]:
    """Why a run must not be trusted (empty: trustworthy)."""
    reasons = []
    p99 = quantile(lags, 0.99)
    if p99 is not None and p99 > threshold_s:
        reasons.append(
            f"p99 dispatch lag {p99 * 1e3:.1f} ms > {threshold_s * 1e3:.1f} ms: "
            "the generator, not the server, shaped the arrivals"
        )
    if stop_reason is not None:
        reasons.append(f"run stopped early: {stop_reason}")
    if sink_errors:
        reasons.append(f"{sink_errors} records failed to reach the sink: {first_sink_error!r}")
    return reasons
