"""Acceptance from an engine's own counters, for engines that report no per-round rows.

llama.cpp (and vLLM's ``vllm:spec_decode_*``) count drafts, drafted tokens and accepted tokens
in ``/metrics``; the pilot scrapes them before and after every phase. Per arm, the deltas over
its measured phases give, in DESIGN.md's definitions: acceptance rate = accepted / drafted;
mean acceptance length = 1 + accepted / drafts (the bonus token counted, whatever the engine's
own convention: the scrape normalises it); per position P(a >= i) from the per-position
counters. What they cannot give is a time split (draft / verify): the engines export none.

    >>> from specpilot.records import MetricSnapshot as S
    >>> m0 = {"spec_rounds": 0, "spec_proposed_tokens": 0, "spec_accepted_tokens": 0}
    >>> m1 = {"spec_rounds": 100, "spec_proposed_tokens": 300, "spec_accepted_tokens": 3}
    >>> c = counter_acceptance([S("r", "ng", "peak", "before", 0, "llamacpp", m0),
    ...                         S("r", "ng", "peak", "after", 1, "llamacpp", m1)])["ng"]
    >>> c.acceptance_rate, c.mean_acceptance_length
    (0.01, 1.03)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specpilot.backends.protocol import SPEC_ACCEPTED as ACCEPTED
from specpilot.backends.protocol import SPEC_POS as POS
from specpilot.backends.protocol import SPEC_PROPOSED as PROPOSED
from specpilot.backends.protocol import SPEC_ROUNDS as ROUNDS
from specpilot.definitions import acceptance_rate_from, mean_acceptance_length_from
from specpilot.records import MetricSnapshot


@dataclass(frozen=True)
class CounterAcceptance:
    arm: str
    engine: str
    phases: int
    drafts: float
    drafted: float
    accepted: float
    per_position: tuple[float, ...]  # P(a >= i) = accepted at position i / drafts

    @property
    def acceptance_rate(self) -> float | None:
        rate = acceptance_rate_from(self.accepted, self.drafted)
        return round(rate, 6) if rate is not None else None

    @property
    def mean_acceptance_length(self) -> float | None:
        # each draft's verification commits its accepted tokens + the bonus one
        mal = mean_acceptance_length_from(self.accepted + self.drafts, self.drafts)
        return round(mal, 6) if mal is not None else None

    @property
    def draft_length(self) -> float | None:
        return self.drafted / self.drafts if self.drafts else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            acceptance_rate=self.acceptance_rate,
            mean_acceptance_length=self.mean_acceptance_length,
            draft_length=self.draft_length,
        )
        return d

    @property
    def text(self) -> str:
        rate = self.acceptance_rate
        if rate is None:
            return f"{self.arm} drafted nothing in its measured phases (the engine's counters)"
        how = (
            "the draft is rejected almost always"
            if rate < 0.1
            else f"{self.mean_acceptance_length:.2f} tokens per verification step"
        )
        return (
            f"acceptance {rate:.1%} ({self.accepted:.0f} of {self.drafted:.0f} drafted tokens "
            f"over {self.drafts:.0f} drafts, {self.draft_length:.1f} a draft; {self.engine}'s "
            f"counters): {how}"
        )


def counter_acceptance(snapshots: Sequence[MetricSnapshot]) -> dict[str, CounterAcceptance]:
    """Per arm: the spec counters' deltas summed over its measured phases (before -> after)."""
    pairs: dict[tuple[str, str, str], dict[str, MetricSnapshot]] = {}
    for s in snapshots:
        if s.label in ("before", "after") and s.phase not in ("warmup", "drill", "start"):
            pairs.setdefault((s.arm, s.run_id, s.phase), {})[s.label] = s
    acc: dict[str, dict[str, Any]] = {}
    for (arm, _, _), edge in pairs.items():
        b, a = edge.get("before"), edge.get("after")
        if b is None or a is None or ROUNDS not in a.metrics:
            continue
        d = acc.setdefault(
            arm,
            {"engine": a.engine, "phases": 0, "pos": {}, ROUNDS: 0.0, PROPOSED: 0.0, ACCEPTED: 0.0},
        )
        d["phases"] += 1
        for k in (ROUNDS, PROPOSED, ACCEPTED):
            d[k] += a.metrics.get(k, 0.0) - b.metrics.get(k, 0.0)
        for k, v in a.metrics.items():
            if k.startswith(POS):
                i = int(k[len(POS) :])
                d["pos"][i] = d["pos"].get(i, 0.0) + v - b.metrics.get(k, 0.0)
    out = {}
    for arm, d in acc.items():
        drafts = d[ROUNDS]
        pos = tuple(d["pos"][i] / drafts for i in sorted(d["pos"]) if drafts)
        out[arm] = CounterAcceptance(
            arm, d["engine"], d["phases"], drafts, d[PROPOSED], d[ACCEPTED], pos
        )
    return out
