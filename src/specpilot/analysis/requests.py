"""Every scheduled request as columns, with the derived latencies and the on-time flag.

DESIGN.md's definitions: TTFT = sent -> first chunk with content; E2E = sent -> last byte
(status ok only); TPOT = (E2E - TTFT) / (output_tokens - 1). A request is on time when its
status is ok, no key quality check on it failed, TTFT <= its group's TTFT SLO and E2E <= its
deadline. Warm-up requests are dropped here; cold-start requests are kept and flagged, so the
load figures can keep them apart from the steady state.

    >>> from specpilot.records import RequestRecord as R
    >>> t = RequestTable.build([
    ...     R("r", "base", "peak", "code", "peak-000000", 0.0, "ok", sent_t=0.0, first_content_t=0.2,
    ...       done_t=1.2, output_tokens=11, deadline_s=2.0, ttft_slo_s=0.5),
    ...     R("r", "base", "peak", "code", "peak-000001", 0.5, "timeout", sent_t=0.5, deadline_s=2.0)])
    >>> t.e2e.tolist(), t.on_time.tolist(), round(float(t.tpot[0]), 3)
    ([1.2, inf], [True, False], 0.1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specpilot.analysis.columns import fromiter
from specpilot.records import ArmRecord, QualityRecord, RequestRecord

STATUSES = ("ok", "timeout", "rejected", "error", "cancelled", "not_sent")


@dataclass
class RequestTable:
    """Columns of the non-warm-up requests (one row per scheduled request)."""

    run_id: np.ndarray
    arm: np.ndarray
    phase: np.ndarray
    task_group: np.ndarray
    request_id: np.ndarray
    prompt_id: np.ndarray
    status: np.ndarray
    ttft: np.ndarray  # +inf when no content arrived
    e2e: np.ndarray  # +inf unless status ok
    tpot: np.ndarray  # +inf unless ok; NaN for ok outputs of fewer than 2 tokens
    output_tokens: np.ndarray  # 0 when unknown
    prompt_tokens: np.ndarray  # NaN when unknown
    on_time: np.ndarray
    deadline_s: np.ndarray  # NaN: no deadline
    ttft_slo_s: np.ndarray  # NaN: no TTFT SLO
    cold_start: np.ndarray
    queue_s: np.ndarray  # NaN when the server did not say
    prefill_s: np.ndarray
    decode_s: np.ndarray
    client_stages: dict[str, np.ndarray] = field(default_factory=dict)  # seconds, 0 if absent
    repetition: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return int(self.status.size)

    @property
    def ok(self) -> np.ndarray:
        return self.status == "ok"

    @classmethod
    def build(
        cls,
        requests: Sequence[RequestRecord],
        quality: Sequence[QualityRecord] = (),
        arms: Sequence[ArmRecord] = (),
    ) -> RequestTable:
        reqs = [r for r in requests if not r.warmup]
        obj = {
            a: np.array([getattr(r, a) for r in reqs], dtype=object)
            for a in ("run_id", "arm", "phase", "task_group", "request_id", "prompt_id", "status")
        }
        sent, first, done = (fromiter(reqs, a) for a in ("sent_t", "first_content_t", "done_t"))
        out = fromiter(reqs, "output_tokens")
        ok = obj["status"] == "ok"
        ttft = np.where(np.isfinite(first) & np.isfinite(sent), first - sent, np.inf)
        e2e = np.where(ok & np.isfinite(done) & np.isfinite(sent), done - sent, np.inf)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(ok, (e2e - ttft) / (out - 1), np.inf)
        tpot[ok & ~(out >= 2)] = np.nan
        deadline, ttft_slo = fromiter(reqs, "deadline_s"), fromiter(reqs, "ttft_slo_s")
        failed_key = _key_failures(quality, obj)
        on_time = (
            ok
            & ~failed_key
            & (np.isnan(ttft_slo) | (ttft <= ttft_slo))
            & (np.isnan(deadline) | (e2e <= deadline))
        )
        rep_of = {a.run_id: a.repetition for a in arms}
        return cls(
            **obj,
            ttft=ttft,
            e2e=e2e,
            tpot=tpot,
            output_tokens=np.nan_to_num(out, nan=0.0),
            prompt_tokens=fromiter(reqs, "prompt_tokens"),
            on_time=on_time,
            deadline_s=deadline,
            ttft_slo_s=ttft_slo,
            cold_start=np.fromiter((r.cold_start for r in reqs), dtype=bool, count=len(reqs)),
            queue_s=fromiter(reqs, "queue_s"),
            prefill_s=fromiter(reqs, "prefill_s"),
            decode_s=fromiter(reqs, "decode_s"),
            client_stages=_stages(reqs),
            repetition=np.fromiter(
                (rep_of.get(r.run_id, 0) for r in reqs), dtype=np.int64, count=len(reqs)
            ),
        )

    def select(self, mask: np.ndarray) -> RequestTable:
        """The rows where ``mask`` holds."""
        kw = {
            name: (getattr(self, name)[mask])
            for name in self.__dataclass_fields__
            if name != "client_stages"
        }
        return RequestTable(**kw, client_stages={k: v[mask] for k, v in self.client_stages.items()})


def _key_failures(quality: Sequence[QualityRecord], obj: dict[str, np.ndarray]) -> np.ndarray:
    """Rows whose own output failed a key check (quality records that name the request)."""
    bad = {
        (q.run_id, q.arm, q.request_id)
        for q in quality
        if q.request_id and q.severity == "key" and not q.passed
    }
    n = obj["status"].size
    if not bad:
        return np.zeros(n, dtype=bool)
    keys = zip(obj["run_id"], obj["arm"], obj["request_id"], strict=True)
    return np.fromiter(((k in bad) for k in keys), dtype=bool, count=n)


def _stages(reqs: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    names = sorted({k for r in reqs if r.client_stages for k in r.client_stages})
    out = {k: np.zeros(len(reqs)) for k in names}
    if names:
        for i, r in enumerate(reqs):
            for k, v in (r.client_stages or {}).items():
                out[k][i] = v
    return out
