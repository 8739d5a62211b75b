"""Per-group summaries the report draws: the group x metric matrix of the main candidate and
the decode time per committed token. Computed here, once, so the JSON document, the HTML plots
and the Markdown read the same numbers.

    >>> m = group_matrix(None, [], [], [])
    >>> m.candidate_arm, m.groups
    (None, [])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specpilot.analysis.comparison.paired import PairedComparison
from specpilot.analysis.mechanism.round_summary import RoundSummary
from specpilot.analysis.verdicts.quality import QualityCell

MATRIX_METRICS = (
    "mean acceptance length",
    "decode speed-up",
    "end-to-end speed-up",
    "key-check pass rate",
)


@dataclass(frozen=True)
class GroupMatrix:
    """Rows ``groups``, columns ``metrics``: mean acceptance length and decode speed-up (the
    rounds, pooled over phases), the end-to-end speed-up of the task at its worst load level
    (1 / (1 + task-time change) of the paired comparisons) and the key-check pass rate."""

    candidate_arm: str | None
    groups: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=lambda: list(MATRIX_METRICS))
    values: list[list[float | None]] = field(default_factory=list)


def group_matrix(
    pair: tuple[str, str] | None,
    rounds_pooled: Sequence[RoundSummary],
    quality_cells: Sequence[QualityCell],
    comparisons: Sequence[PairedComparison],
) -> GroupMatrix:
    if pair is None:
        return GroupMatrix(None, metrics=[])
    base, cand = pair
    rounds = {r.task_group: r for r in rounds_pooled if r.arm == cand}
    quality = {q.task_group: q for q in quality_cells if q.arm == cand}
    task: dict[str, list[float]] = {}
    for c in comparisons:
        est = c.task_rel_change.estimate
        if (c.baseline_arm, c.candidate_arm) == (base, cand) and est is not None:
            task.setdefault(c.task_group, []).append(1 / (1 + est))
    groups = sorted({*rounds, *quality, *task} - {"*"})
    values = []
    for g in groups:
        r, q, t = rounds.get(g), quality.get(g), task.get(g)
        values.append(
            [
                r.mean_acceptance_length if r else None,
                r.decode_speedup if r else None,
                min(t) if t else None,  # the worst load level
                q.key_pass_rate if q else None,
            ]
        )
    return GroupMatrix(cand, groups, list(MATRIX_METRICS), values)


@dataclass(frozen=True)
class TokenTime:
    """Draft, verify and overhead milliseconds per committed token of one arm and task group
    (each batched round's time shared over its rows)."""

    arm: str
    task_group: str
    draft_ms: float
    verify_ms: float
    overhead_ms: float


def time_per_token(rounds_pooled: Sequence[RoundSummary]) -> list[TokenTime]:
    return [
        TokenTime(
            r.arm,
            r.task_group,
            1000 * r.draft_s / r.committed,
            1000 * r.verify_s / r.committed,
            1000 * r.overhead_s / r.committed,
        )
        for r in rounds_pooled
        if r.task_group != "*" and r.committed
    ]
