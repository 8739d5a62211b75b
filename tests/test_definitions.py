"""DESIGN.md's definitions live once (``specpilot.definitions``); the column paths the analysis
uses at scale must give the same numbers as the record-level functions."""

from __future__ import annotations

import numpy as np

from specpilot import definitions
from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.rollback.drill import summarize
from specpilot.records import RequestRecord


def _random_requests(n: int, seed: int) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        status = str(rng.choice(["ok", "ok", "ok", "timeout", "error", "not_sent"]))
        sched = float(i)
        sent = None if status == "not_sent" else sched + float(rng.uniform(0, 0.3))
        first = None if sent is None or rng.random() < 0.1 else sent + float(rng.uniform(0, 1.0))
        done = (
            None if sent is None or status != "ok" else (first or sent) + float(rng.uniform(0, 3))
        )
        out.append(
            RequestRecord(
                "r",
                "a",
                "peak",
                "g",
                f"peak-{i:06d}",
                sched,
                status,
                sent_t=sent,
                first_content_t=first,
                done_t=done,
                output_tokens=8,
                deadline_s=None if rng.random() < 0.2 else float(rng.uniform(0.5, 4)),
                ttft_slo_s=None if rng.random() < 0.2 else float(rng.uniform(0.1, 1)),
            )
        )
    return out


def test_on_time_over_columns_is_the_record_definition():
    recs = _random_requests(400, 3)
    t = RequestTable.build(recs)
    assert t.on_time.tolist() == [definitions.on_time(r) for r in recs]
    assert 0 < int(t.on_time.sum()) < len(recs)  # both outcomes occur: the check can fail


def test_the_drill_uses_the_same_on_time_as_the_load_cells():
    # one request misses its deadline only if E2E were counted from its scheduled time (the
    # old drill rule): sent 0.4 s late, E2E 1.8 s of a 2.0 s deadline -> on time
    late = RequestRecord(
        "r", "s", "drill", "g", "drill-0", 0.0, "ok", sent_t=0.4, first_content_t=0.5,
        done_t=2.2, deadline_s=2.0, ttft_slo_s=1.0, served_k=0,
    )  # fmt: skip
    assert definitions.on_time(late)
    d = summarize(
        [late], requested_t=0.0, in_force_t=0.1, back_t=None, run_id="r", arm="s",
        kind="restart", goodput_baseline=None, window_s=5.0,
    )  # fmt: skip
    assert d.delayed == 0 and d.interrupted == 0 and d.status == "done"


def test_drill_summary_counts_interruptions_and_recovery():
    recs = [
        RequestRecord(
            "r",
            "s",
            "drill",
            "g",
            f"drill-{i}",
            i * 1.0,
            "ok" if i != 3 else "error",
            sent_t=i * 1.0,
            first_content_t=i + 0.1,
            done_t=i + 0.5 if i != 3 else None,
            deadline_s=2.0,
            ttft_slo_s=1.0,
            served_k=3 if i < 3 else 0,
        )
        for i in range(10)
    ]
    d = summarize(
        recs, requested_t=2.5, in_force_t=2.5001, back_t=None, run_id="r", arm="s",
        kind="runtime_switch", goodput_baseline=1.0, window_s=2.0,
    )  # fmt: skip
    # in force when the first k = 0 request was sent (3.0); the error at 3 is an interruption
    assert d.status == "done" and round(d.switch_in_force_s or 0, 3) == 0.5
    assert d.interrupted == 1 and d.delayed == 0
    assert d.recovery_s is not None and d.recovery_s > 0.5  # the failed request delays it
