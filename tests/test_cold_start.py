"""Cold start apart from the steady state (R6, issue 51 item 6; ``analysis.service.coldstart``):
start to healthy per process, the first requests after a start (warm-up, or a fingerprinted
process's first measured ones) and after a drill's restart, each against the steady state."""

from __future__ import annotations

import pytest

from specpilot.analysis.service.coldstart import FIRST_AFTER_START, cold_starts
from specpilot.records import (
    DRILL_PHASE,
    ArmRecord,
    DrillRecord,
    PilotData,
    PilotRecord,
    RequestRecord,
)


def _req(arm: str, run: str, i: int, t: float, ttft: float, task: float, **kw) -> RequestRecord:
    return RequestRecord(
        run_id=run,
        arm=arm,
        phase=kw.pop("phase", "peak"),
        task_group="g",
        request_id=f"{run}-{i}",
        scheduled_t=t,
        status="ok",
        sent_t=t,
        first_content_t=t + ttft,
        done_t=t + task,
        **kw,
    )


def _data() -> PilotData:
    d = PilotData(PilotRecord("p", "cold", {}, "", "0", 0.0))
    d.arms = [
        ArmRecord("p", "spec.p0", "spec", "speculative", "llamacpp", cold_start_s=4.0),
        ArmRecord("p", "spec.p1", "spec", "speculative", "llamacpp", cold_start_s=6.0),
        ArmRecord("p", "url.p0", "url", "baseline", "openai"),  # by URL: no start timed
    ]
    reqs = []
    for run in ("spec.p0", "spec.p1"):
        # no warm-up (fingerprinted): its first 3 measured requests are slow, the rest steady
        for i in range(10):
            slow = i < FIRST_AFTER_START
            reqs.append(_req("spec", run, i, 10.0 * i, 0.9 if slow else 0.3, 3.0 if slow else 1.0))
    reqs.append(_req("url", "url.p0", 0, 0.0, 0.5, 2.0, warmup=True))  # a warm-up request
    reqs += [_req("url", "url.p0", i, 10.0 * i, 0.25, 1.0) for i in range(1, 6)]
    # the drill restarts spec at t=200: its first requests after are slow again
    reqs += [
        _req("spec", "spec.p0", 100 + i, 200.0 + i, 1.5, 4.0, phase=DRILL_PHASE) for i in range(7)
    ]
    d.requests = reqs
    d.drills = [DrillRecord("spec.p0", "spec", "peak", "restart", "done", in_force_t=199.0)]
    return d


def test_starts_and_their_first_requests_are_apart_from_the_steady_state() -> None:
    by = {c.arm: c for c in cold_starts(_data())}
    spec = by["spec"]
    assert spec.processes == 2 and spec.start_to_healthy_s == 5.0
    assert spec.start_to_healthy_max_s == 6.0
    assert spec.first.requests == 2 * FIRST_AFTER_START
    assert spec.first.ttft_s == pytest.approx(0.9) and spec.first.task_s == pytest.approx(3.0)
    assert spec.steady.ttft_s == pytest.approx(0.3) and spec.steady.task_s == pytest.approx(1.0)
    assert spec.after_restart is not None and spec.after_restart.requests == 5
    assert spec.after_restart.ttft_s == pytest.approx(1.5)
    assert "3.00x and 3.00x the steady state's" in spec.text
    url = by["url"]  # by URL: no start timed, its warm-up request is its first
    assert url.processes == 0 and url.start_to_healthy_s is None
    assert url.first.requests == 1 and url.first.ttft_s == pytest.approx(0.5)
    assert url.after_restart is None
