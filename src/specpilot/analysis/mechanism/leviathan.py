"""The Leviathan expectation next to the measured decode speed-up, with the gap explained.

From the measured per-token acceptance alpha, draft cost ratio c and verify-cost ratio
v(k+1) (DESIGN.md): bound = E[c] / (k c + v(k+1)), E[c] = (1 - alpha^(k+1)) / (1 - alpha).
The measured decode speed-up is plain cost per token / speculative cost per token. The gap is
split into factors whose product is exactly measured / bound, each replacing one assumption
of the bound with a measurement (per round, each row's share of the round):

1. acceptance: tokens per round measured (MAL) instead of E[c] (i.i.d. acceptance, no cut);
2. verification: the round's measured verify time instead of v(k+1) x the 1-token step;
3. overhead: the speculative round's sampling, accept rule and bookkeeping (not in the bound);
4. plain overhead: plain decoding's own overhead per token (the bound's unit is a bare step).

    >>> from specpilot.analysis.mechanism.round_summary import RoundSummary
    >>> def cell(arm, k, rounds, acc, com, d, v, o, full):
    ...     return RoundSummary(arm, "g", "p", 1, rounds, rounds if k else 0, k * rounds, acc, com,
    ...         d, v, o, 0, 1.0, k or None, full, None, com / rounds, (), (d + v + o) / com,
    ...         (), None, ())
    >>> plain = cell("base", 0, 100, 0, 100, 0.0, 1.0, 0.0, None)
    >>> spec = cell("spec", 2, 100, 100, 200, 0.2, 1.0, 0.0, 30)
    >>> g = compare(spec, plain, v_next=1.0, v_source="calibration")
    >>> round(g.measured_speedup, 3), [s.name for s in g.steps]
    (1.667, ['acceptance', 'verification', 'overhead', 'plain overhead'])
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from specpilot.analysis.mechanism.round_summary import RoundSummary
from specpilot.analysis.mechanism.rounds import expected_committed


@dataclass(frozen=True)
class GapStep:
    name: str
    factor: float  # multiplies the running prediction
    prediction: float  # the prediction after this step
    explanation: str


@dataclass(frozen=True)
class LeviathanGap:
    arm: str
    task_group: str
    phase: str
    k: int
    alpha: float
    expected_committed: float
    measured_mal: float
    c_ratio: float  # draft time per proposed token / the target's 1-token step
    v_next: float  # v(k+1)
    v_source: str
    bound_free_verify: float  # Leviathan's own bound (v = 1)
    bound: float  # with the measured v(k+1)
    measured_speedup: float
    steps: tuple[GapStep, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(
    spec: RoundSummary, plain: RoundSummary, v_next: float | None, v_source: str
) -> LeviathanGap | None:
    """The bound and the measured value for one cell; None when it cannot be computed
    (alpha undefined because k varied, no plain rounds, or no rounds)."""
    alpha = spec.alpha
    if alpha is None or spec.k is None or not spec.rounds or not plain.rounds:
        return None
    if not plain.committed or not spec.committed or spec.mean_acceptance_length is None:
        return None
    k = round(spec.k)
    t1 = plain.verify_s / plain.rounds  # the target's 1-token step (row share)
    d, v, o = (x / spec.rounds for x in (spec.draft_s, spec.verify_s, spec.overhead_s))
    if t1 <= 0 or d + v <= 0:
        return None
    c = d / k / t1
    if v_next is None:  # no curve: the in-window ratio, labelled as such
        v_next, v_source = v / t1, "in-window verify time / plain step"
    mal = spec.mean_acceptance_length
    ec = expected_committed(alpha, k)
    cost_plain = (plain.draft_s + plain.verify_s + plain.overhead_s) / plain.committed
    preds = [
        ec / (k * c + v_next),
        mal / (k * c + v_next),
        mal * t1 / (d + v),
        mal * t1 / (d + v + o),
        mal * cost_plain / (d + v + o),
    ]
    texts = [
        f"tokens per round measured {mal:.2f} vs E[c] {ec:.2f} from alpha {alpha:.2f}",
        f"verify time per round {v / t1:.2f}x the plain step vs v(k+1) = {v_next:.2f}",
        f"round overhead {o * 1000:.2f} ms ({o / (d + v + o):.0%} of the round)",
        f"plain decoding's overhead: {cost_plain * 1000:.2f} ms/token vs step {t1 * 1000:.2f} ms",
    ]
    names = ("acceptance", "verification", "overhead", "plain overhead")
    steps = tuple(
        GapStep(names[i], preds[i + 1] / preds[i], preds[i + 1], texts[i]) for i in range(4)
    )
    return LeviathanGap(
        arm=spec.arm,
        task_group=spec.task_group,
        phase=spec.phase,
        k=k,
        alpha=alpha,
        expected_committed=ec,
        measured_mal=mal,
        c_ratio=c,
        v_next=v_next,
        v_source=v_source,
        bound_free_verify=ec / (k * c + 1),
        bound=preds[0],
        measured_speedup=preds[-1],  # = plain cost per token / speculative cost per token
        steps=steps,
    )
