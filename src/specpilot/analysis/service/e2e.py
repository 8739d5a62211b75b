"""End to end (R4): where a task's time goes, the decode share, and what Amdahl allows.

A task's time = client stages (retrieval, tools...) + queue + prefill + decode + other (the
rest of the request: network, framing). From load requests: the server's queue/prefill/decode
when it reports them, else the client's view (first-token wait = TTFT, decode = E2E - TTFT).
From application traces: ``analysis.service.traces``. Speculation can only shorten decode, so

    E2E' = fixed + decode / s;  overall speed-up = E2E / E2E'   (DESIGN.md, Amdahl)

MISSION's example, 7 s fixed + 3 s decode, decode twice as fast:

    >>> a = amdahl(10.0, 3.0, 2.0)
    >>> a.after_s, round(a.overall_speedup, 2)
    (8.5, 1.18)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from specpilot.analysis.base.requests import RequestTable

SERVER_STAGES = ("queue", "prefill", "decode", "other")


@dataclass(frozen=True)
class Amdahl:
    before_s: float
    decode_s: float
    speedup: float  # decode speed-up s
    after_s: float
    overall_speedup: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def amdahl(total_s: float, decode_s: float, speedup: float) -> Amdahl:
    """E2E' = (total - decode) + decode / s; overall = total / E2E'."""
    if speedup <= 0:
        raise ValueError(f"decode speed-up must be > 0, got {speedup}")
    if not 0 <= decode_s <= total_s:
        raise ValueError(f"decode time {decode_s} s must lie within the task's {total_s} s")
    after = (total_s - decode_s) + decode_s / speedup
    return Amdahl(total_s, decode_s, speedup, after, total_s / after if after else float("inf"))


@dataclass
class StageTable:
    """Per task: its group, seconds per stage, token counts (NaN when unknown)."""

    task_group: np.ndarray
    stages: dict[str, np.ndarray]
    output_tokens: np.ndarray
    input_tokens: np.ndarray
    source: str  # "server timings" | "client timings" | "mixed" | "trace"

    @classmethod
    def from_requests(cls, t: RequestTable, arm: str, phase: str | None = None) -> StageTable:
        """The completed steady-state requests of one arm (and phase)."""
        m = (t.arm == arm) & t.ok & ~t.cold_start
        if phase is not None:
            m &= t.phase == phase
        e2e, ttft = t.e2e[m], t.ttft[m]
        q, p, d = t.queue_s[m], t.prefill_s[m], t.decode_s[m]
        server = ~np.isnan(d) & ~np.isnan(p)
        stages = {k: v[m] for k, v in t.client_stages.items()}
        stages["queue"] = np.where(server, np.nan_to_num(q), 0.0)
        stages["prefill"] = np.where(server, p, ttft)  # client view: the first-token wait
        stages["decode"] = np.where(server, d, e2e - ttft)
        stages["other"] = np.maximum(
            e2e - stages["queue"] - stages["prefill"] - stages["decode"], 0
        )
        source = (
            "server timings"
            if server.all()
            else ("client timings" if not server.any() else "mixed")
        )
        return cls(t.task_group[m], stages, t.output_tokens[m], t.prompt_tokens[m], source)


@dataclass(frozen=True)
class StageBreakdown:
    task_group: str
    tasks: int
    mean_stage_s: dict[str, float]  # mean seconds per task
    mean_total_s: float
    decode_share: float | None  # sum(decode) / sum(total)
    median_decode_share: float | None  # of per-task shares
    median_output_tokens: float | None
    median_input_tokens: float | None
    dominant_other_stage: str | None  # the largest stage that is not decode
    source: str
    projection: Amdahl | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stage_breakdown(
    st: StageTable, decode_speedup: dict[str, float] | float | None = None
) -> list[StageBreakdown]:
    """Per group and for all tasks (``*``); ``decode_speedup`` (per group or one value) adds the
    Amdahl projection of the mean task."""
    out = []
    groups = [*sorted(set(st.task_group.tolist())), "*"]
    for g in groups:
        m = np.ones(st.task_group.size, dtype=bool) if g == "*" else st.task_group == g
        n = int(m.sum())
        if n == 0:
            continue
        per = {k: np.nan_to_num(v[m]) for k, v in st.stages.items()}
        total = sum(per.values(), np.zeros(n))
        dec = per.get("decode", np.zeros(n))
        mean = {k: float(v.mean()) for k, v in per.items()}
        others = {k: v for k, v in mean.items() if k != "decode"}
        share = float(dec.sum() / total.sum()) if total.sum() > 0 else None
        with np.errstate(invalid="ignore", divide="ignore"):
            med_share = np.nanmedian(np.where(total > 0, dec / total, np.nan)) if n else np.nan
        s = decode_speedup.get(g) if isinstance(decode_speedup, dict) else decode_speedup
        mt, md = float(total.mean()), float(dec.mean())
        out.append(
            StageBreakdown(
                task_group=g,
                tasks=n,
                mean_stage_s=mean,
                mean_total_s=mt,
                decode_share=share,
                median_decode_share=None if np.isnan(med_share) else float(med_share),
                median_output_tokens=_median(st.output_tokens[m]),
                median_input_tokens=_median(st.input_tokens[m]),
                dominant_other_stage=max(others, key=lambda k: others[k]) if others else None,
                source=st.source,
                projection=amdahl(mt, min(md, mt), s) if s and mt > 0 else None,
            )
        )
    return out


def _median(x: np.ndarray) -> float | None:
    x = x[~np.isnan(x)]
    return float(np.median(x)) if x.size else None


@dataclass(frozen=True)
class TaskRecommendation:
    task_group: str
    action: str  # pilot | fix_first | marginal
    bottleneck: str | None
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


STAGE_WORDS = {
    "prefill": "input processing (long input)",
    "queue": "queueing (capacity)",
    "other": "network and framing",
}


def recommend(
    breakdowns: Sequence[StageBreakdown],
    min_decode_share: float,
    min_output_tokens: float = 64,
) -> list[TaskRecommendation]:
    """Which groups are worth a pilot and which should fix another bottleneck first."""
    out = []
    for b in breakdowns:
        if b.task_group == "*" or b.decode_share is None:
            continue
        other = b.dominant_other_stage
        other_share = (
            b.mean_stage_s.get(other, 0.0) / b.mean_total_s if other and b.mean_total_s else 0.0
        )
        nums = {
            "decode_share": b.decode_share,
            "dominant_other_stage": other,
            "dominant_other_share": other_share,
            "median_output_tokens": b.median_output_tokens,
            "median_input_tokens": b.median_input_tokens,
            "tasks": b.tasks,
        }
        proj = ""
        if b.projection:
            nums["overall_speedup_if_decode_faster"] = b.projection.overall_speedup
            nums["assumed_decode_speedup"] = b.projection.speedup
            proj = (
                f"; a decode speed-up of {b.projection.speedup:.2f}x gives an end-to-end speed-up "
                f"of {b.projection.overall_speedup:.2f}x (Amdahl)"
            )
        words = STAGE_WORDS.get(other or "", other or "")
        long_out = (b.median_output_tokens or 0) >= min_output_tokens
        if b.decode_share < min_decode_share:
            action, neck = "fix_first", other
            reason = f"decode is {b.decode_share:.0%} of task time, {words} {other_share:.0%}{proj}"
        elif b.decode_share >= 0.5 and long_out:
            action, neck = "pilot", None
            reason = (
                f"decode is {b.decode_share:.0%} of task time with a median "
                f"{b.median_output_tokens:.0f}-token answer{proj}"
            )
        else:
            action, neck = "marginal", other
            reason = f"decode is {b.decode_share:.0%} of task time{proj}"
        out.append(TaskRecommendation(b.task_group, action, neck, reason, nums))
    return out


def agreement(projected: list[float | None], measured: list[float | None]) -> str:
    """Do the Amdahl projection from the rounds and the measured end-to-end change agree?"""
    plo, phi = projected
    mlo, mhi = measured
    if plo is None or phi is None or mlo is None or mhi is None:
        return "not comparable (an interval is missing)"
    if mhi < plo:
        return (
            "measured end to end below the projection beyond both intervals: the loss is "
            "outside decode (queueing behind longer rounds, prefill, the draft's own prefill)"
        )
    if mlo > phi:
        return (
            "measured end to end above the projection beyond both intervals: queueing shrank "
            "more than decode alone explains"
        )
    return "agree within their intervals"
