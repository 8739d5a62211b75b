"""Every scheduled request as columns, with the derived latencies and the on-time flag.

DESIGN.md's definitions: TTFT = sent -> first chunk with content; E2E = sent -> last byte
(status ok only); TPOT = (E2E - TTFT) / (output_tokens - 1). A request is *on time* when its
status is ok, TTFT <= its group's TTFT SLO and E2E <= its deadline (latency only); it is
*good* when it is on time and no key quality check on its output failed. Goodput counts the
good ones; the report shows both, so a user sees whether latency or quality failed. Warm-up requests are dropped here; cold-start requests are kept and flagged, so the
load figures can keep them apart from the steady state.

    >>> from specpilot.records import DRILL_PHASE, RequestRecord as R
    >>> t = RequestTable.build([
    ...     R("r", "base", "peak", "code", "peak-000000", 0.0, "ok", sent_t=0.0, first_content_t=0.2,
    ...       done_t=1.2, output_tokens=11, deadline_s=2.0, ttft_slo_s=0.5),
    ...     R("r", "base", "peak", "code", "peak-000001", 0.5, "timeout", sent_t=0.5, deadline_s=2.0)])
    >>> t.e2e.tolist(), t.on_time.tolist(), round(float(t.tpot[0]), 3)
    ([1.2, inf], [True, False], 0.1)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specpilot.analysis.base.columns import factorize, fromiter
from specpilot.records import DRILL_PHASE, ArmRecord, QualityRecord, RequestRecord

OBJECT_COLUMNS = ("run_id", "arm", "phase", "task_group", "request_id", "prompt_id", "status")
FLOAT_COLUMNS = (
    "sent_t",
    "first_content_t",
    "done_t",
    "output_tokens",
    "prompt_tokens",
    "deadline_s",
    "ttft_slo_s",
    "queue_s",
    "prefill_s",
    "decode_s",
)
STAGE_PREFIX = "client_stage:"


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
    on_time: np.ndarray  # ok, within the TTFT SLO and the deadline (latency only)
    good: np.ndarray  # on time and no key check on its output failed (what goodput counts)
    deadline_s: np.ndarray  # NaN: no deadline
    ttft_slo_s: np.ndarray  # NaN: no TTFT SLO
    cold_start: np.ndarray
    queue_s: np.ndarray  # NaN when the server did not say
    prefill_s: np.ndarray
    decode_s: np.ndarray
    client_stages: dict[str, np.ndarray] = field(default_factory=dict)  # seconds, 0 if absent
    sent_t: np.ndarray = field(default_factory=lambda: np.zeros(0))  # NaN when unknown
    done_t: np.ndarray = field(default_factory=lambda: np.zeros(0))  # NaN: never answered
    repetition: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _codes: dict[str, tuple[np.ndarray, list[Any]]] = field(
        init=False, repr=False, default_factory=dict
    )

    def codes(self, name: str) -> tuple[np.ndarray, list[Any]]:
        """Integer codes and distinct labels of an object column (computed once)."""
        if name not in self._codes:
            self._codes[name] = factorize(getattr(self, name))
        return self._codes[name]

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
        """From records (one pass per field); warm-up and the rollback drill's replay
        (``records.DRILL_PHASE``: reported in the drill section) are left out."""
        reqs = [r for r in requests if not r.warmup and r.phase != DRILL_PHASE]
        cols: dict[str, Any] = {
            a: np.array([getattr(r, a) for r in reqs], dtype=object) for a in OBJECT_COLUMNS
        }
        cols.update({a: fromiter(reqs, a) for a in FLOAT_COLUMNS})
        cols["cold_start"] = np.fromiter((r.cold_start for r in reqs), dtype=bool, count=len(reqs))
        cols["warmup"] = np.zeros(len(reqs), dtype=bool)
        for k, v in _stages(reqs).items():
            cols[f"{STAGE_PREFIX}{k}"] = v
        return cls.from_columns(cols, quality, arms)

    @classmethod
    def from_columns(
        cls,
        cols: Mapping[str, Any],
        quality: Sequence[QualityRecord] = (),
        arms: Sequence[ArmRecord] = (),
    ) -> RequestTable:
        """From columns named like ``RequestRecord``'s fields (one row per scheduled request;
        numbers as floats with NaN for None; ``client_stage:<name>`` columns for the client
        stages), as the store's reader can hand them over from DuckDB at scale."""
        missing = [c for c in (*OBJECT_COLUMNS, *FLOAT_COLUMNS) if c not in cols]
        if missing:
            raise ValueError(f"request columns missing: {missing}")
        keep = ~np.asarray(
            cols.get("warmup", np.zeros(len(cols["status"]), dtype=bool)), dtype=bool
        ) & (np.asarray(cols["phase"], dtype=object) != DRILL_PHASE)
        obj = {a: np.asarray(cols[a], dtype=object)[keep] for a in OBJECT_COLUMNS}
        f = {a: np.asarray(cols[a], dtype=np.float64)[keep] for a in FLOAT_COLUMNS}
        sent, first, done, out = f["sent_t"], f["first_content_t"], f["done_t"], f["output_tokens"]
        ok = obj["status"] == "ok"
        ttft = np.where(np.isfinite(first) & np.isfinite(sent), first - sent, np.inf)
        e2e = np.where(ok & np.isfinite(done) & np.isfinite(sent), done - sent, np.inf)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(ok, (e2e - ttft) / (out - 1), np.inf)
        tpot[ok & ~(out >= 2)] = np.nan
        deadline, ttft_slo = f["deadline_s"], f["ttft_slo_s"]
        on_time = (
            ok
            & (np.isnan(ttft_slo) | (ttft <= ttft_slo))
            & (np.isnan(deadline) | (e2e <= deadline))
        )
        good = on_time & ~_key_failures(quality, obj)
        rep_of = {a.run_id: a.repetition for a in arms}
        run_codes, runs = factorize(obj["run_id"])
        cold = cols.get("cold_start")
        return cls(
            **obj,
            ttft=ttft,
            e2e=e2e,
            tpot=tpot,
            output_tokens=np.nan_to_num(out, nan=0.0),
            prompt_tokens=f["prompt_tokens"],
            on_time=on_time,
            good=good,
            deadline_s=deadline,
            ttft_slo_s=ttft_slo,
            cold_start=np.zeros(ok.size, dtype=bool)
            if cold is None
            else np.asarray(cold, dtype=bool)[keep],
            queue_s=f["queue_s"],
            prefill_s=f["prefill_s"],
            decode_s=f["decode_s"],
            sent_t=sent,
            done_t=done,
            client_stages={
                k[len(STAGE_PREFIX) :]: np.nan_to_num(np.asarray(v, dtype=np.float64)[keep])
                for k, v in cols.items()
                if k.startswith(STAGE_PREFIX)
            },
            repetition=np.array([rep_of.get(r, 0) for r in runs], dtype=np.int64)[run_codes],
        )

    def select(self, mask: np.ndarray) -> RequestTable:
        """The rows where ``mask`` holds."""
        kw = {
            name: (getattr(self, name)[mask])
            for name, f in self.__dataclass_fields__.items()
            if name != "client_stages" and f.init
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
