"""R2 window metrics from round records: pure functions, no I/O.

Definitions (printed by the report next to the numbers):

- acceptance rate = sum(accepted) / sum(proposed)
- mean acceptance length = sum(committed) / rounds (bonus/correction token included, vLLM's
  convention: 1 + accepted/drafts when no round is truncated)
- acceptance per position i (1-based) = P(accepted >= i) over rounds that proposed >= i
- decode cost per committed token = sum(round time) / sum(committed), where round time =
  draft + verify + overhead, and a batched round charges each row 1/batch_size of its time
- Leviathan: E[c] = (1 - a^(k+1)) / (1 - a); speed-up bound = E[c] / (k * c_ratio + 1), or
  with the measured verify-cost curve E[c] / (k * c_ratio + v(k+1)) (``analysis.mechanism.leviathan``)

The MISSION's worked example:

    >>> plain = cost_per_token([RoundRecord("r", 0, 0, 0, 1, 0.0, 0.040, 0.0)])
    >>> a = cost_per_token([RoundRecord("r", 0, 4, 2, 3, 0.020, 0.040, 0.0)])
    >>> round(plain * 1000, 6), round(a * 1000, 6)
    (40.0, 20.0)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specpilot.definitions import (
    acceptance_rate_from,
    mean_acceptance_length,  # noqa: F401  (re-exported: the one definition)
    mean_acceptance_length_from,
)
from specpilot.records import RoundRecord


def cost_per_token(rounds: Iterable[RoundRecord]) -> float:
    """Accumulated round time / accumulated committed tokens over the window (seconds)."""
    time_s = 0.0
    committed = 0
    for r in rounds:
        time_s += r.round_s / max(r.batch_size, 1)
        committed += r.committed
    if committed == 0:
        raise ValueError("no committed tokens in the window: cost per token is undefined")
    return time_s / committed


@dataclass(frozen=True)
class WindowMetrics:
    rounds: int
    proposed: int
    accepted: int
    committed: int
    acceptance_rate: float | None  # None for plain decoding (nothing proposed)
    mean_acceptance_length: float
    acceptance_per_position: tuple[float, ...]
    draft_s: float
    verify_s: float
    overhead_s: float
    cost_per_token_s: float
    truncated_rounds: int

    @property
    def time_s(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["time_s"] = self.time_s
        return d


def window_metrics(rounds: Sequence[RoundRecord]) -> WindowMetrics:
    """Aggregate a stable window of rounds into the R2 metrics."""
    if not rounds:
        raise ValueError("empty window: no rounds to aggregate")
    proposed = sum(r.proposed for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    committed = sum(r.committed for r in rounds)
    max_k = max(r.proposed for r in rounds)
    per_pos = []
    for i in range(1, max_k + 1):
        eligible = [r for r in rounds if r.proposed >= i]
        per_pos.append(sum(r.accepted >= i for r in eligible) / len(eligible))
    draft = sum(r.draft_s / max(r.batch_size, 1) for r in rounds)
    verify = sum(r.verify_s / max(r.batch_size, 1) for r in rounds)
    over = sum(r.overhead_s / max(r.batch_size, 1) for r in rounds)
    return WindowMetrics(
        rounds=len(rounds),
        proposed=proposed,
        accepted=accepted,
        committed=committed,
        acceptance_rate=acceptance_rate_from(accepted, proposed),
        mean_acceptance_length=mean_acceptance_length_from(committed, len(rounds)) or 0.0,
        acceptance_per_position=tuple(per_pos),
        draft_s=draft,
        verify_s=verify,
        overhead_s=over,
        cost_per_token_s=(draft + verify + over) / committed if committed else float("nan"),
        truncated_rounds=sum(r.truncated is not None for r in rounds),
    )


def expected_committed(alpha: float, k: int) -> float:
    """Leviathan et al.: expected tokens per round, (1 - a^(k+1)) / (1 - a)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha == 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def leviathan_speedup(alpha: float, k: int, c_ratio: float) -> float:
    """Walltime improvement bound: E[c] / (k * c + 1), c = draft step time / target step time.

    The bound assumes verifying k+1 tokens costs one target step; on a CPU it does not, so
    ``speedup_from_costs`` is the honest prediction when the verify cost was measured.
    """
    return expected_committed(alpha, k) / (k * c_ratio + 1)


def speedup_from_costs(
    alpha: float, k: int, draft_step_s: float, verify_s: float, target_step_s: float
) -> float:
    """Predicted decode speed-up from measured costs: E[c] * t_target / (k t_draft + t_verify(k))."""
    return expected_committed(alpha, k) * target_step_s / (k * draft_step_s + verify_s)


@dataclass(frozen=True)
class Divergence:
    """Where two greedy outputs part, and how close the reference's top-2 were there (R1)."""

    index: int  # first output position that differs
    reference_token: int
    other_token: int
    reference_margin: float | None  # top-1 minus top-2 log-prob of the reference at ``index``


def first_divergence(
    reference: Sequence[int], other: Sequence[int], reference_logprobs: Sequence[Any] = ()
) -> Divergence | None:
    """None when one output is a prefix of the other; else the first differing position.

    ``reference_logprobs``: per-token records with ``.top`` = [(token, logprob), ...] best first.
    A small margin means a near-tie that precision or batch composition can flip: a numeric
    difference to record, not an algorithm failure.
    """
    for i, (a, b) in enumerate(zip(reference, other, strict=False)):
        if a != b:
            margin = None
            if i < len(reference_logprobs):
                top = reference_logprobs[i].top
                if len(top) >= 2:
                    margin = float(top[0][1] - top[1][1])
            return Divergence(i, int(a), int(b), margin)
    return None


def leviathan_alpha(rounds: Iterable[RoundRecord]) -> float | None:
    """Per-token acceptance probability alpha, the parameter of the Leviathan formulas.

    Not the acceptance rate: a round that rejects at position j never tests positions > j, yet
    they count as proposed. Under the i.i.d. model the maximum-likelihood alpha is
    accepted / (accepted + rejections), where a rejection is a round with accepted < proposed.
    """
    accepted = rejections = 0
    for r in rounds:
        if r.proposed > 0:
            accepted += r.accepted
            rejections += r.accepted < r.proposed
    if accepted + rejections == 0:
        return None
    return accepted / (accepted + rejections)
