"""The per-round section of one pilot (R2): the round aggregates summarised per arm, task group
and load level and pooled, each speculative arm beside its baseline's plain decode, the verify
cost curves measured on the baseline, and the Leviathan gap between the speed-up predicted from
alpha, k and the cost ratio and the one measured. Engines that report no rounds are named in
``notes`` with what their rows stand for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specpilot.analysis.mechanism.leviathan import LeviathanGap, compare
from specpilot.analysis.mechanism.round_summary import (
    RoundsTable,
    RoundSummary,
    summarize_rounds,
    with_plain,
)
from specpilot.analysis.mechanism.verify_cost import VerifyCurve, curve_for, verify_curves
from specpilot.records import DERIVED_TIMES_ENGINES, TOTALS_ENGINES, PilotData


@dataclass(frozen=True)
class RoundsSection:
    table: RoundsTable  # the per-request round aggregates analysed
    rounds: list[RoundSummary]  # per arm, group, phase
    pooled: list[RoundSummary]  # per arm, group, and per arm (task_group "*")
    curves: list[VerifyCurve]
    gaps: list[LeviathanGap]
    notes: list[str]


def rounds_section(data: PilotData, base: str, pairs: Sequence[tuple[str, str]]) -> RoundsSection:
    """The per-round section: per (arm, group, phase) and pooled, each candidate beside its
    baseline's plain decode, the verify-cost curves and the Leviathan gaps; ``base``: the
    baseline arm whose verify costs were measured; ``pairs``: (baseline, candidate)."""
    notes: list[str] = []
    gaps: list[LeviathanGap] = []
    if data.request_rounds_columns is not None:
        rt = RoundsTable.from_columns(data.request_rounds_columns)
    else:
        rt = RoundsTable.build(data.request_rounds)
    cells = summarize_rounds(rt)
    pooled = summarize_rounds(rt, ("arm", "task_group"))
    pooled += summarize_rounds(rt, ("arm",))  # task_group "*"
    for b in {p[0] for p in pairs}:
        mine = [c for x, c in pairs if x == b]
        cells = with_plain(cells, b, mine)
        pooled = with_plain(pooled, b, mine)
    curves = verify_curves(data.verify_costs, base)
    for b, c in pairs:
        plain = {(r.task_group, r.phase): r for r in [*cells, *pooled] if r.arm == b}
        for s in (r for r in [*cells, *pooled] if r.arm == c and r.k):
            v, src = curve_for(curves, c, round(s.k or 0) + 1, s.mean_batch_size)
            p = plain.get((s.task_group, s.phase))
            gap = compare(s, p, v, src) if p else None
            if gap is not None:
                gaps.append(gap)
    if len(rt) == 0:
        notes.append("no round records: the per-round section is empty")
    with_rounds = {str(x) for x in rt.labels["arm"]} if len(rt) else set()
    derived = sorted(
        {r.arm for r in data.arms if r.engine in DERIVED_TIMES_ENGINES and r.arm in with_rounds}
    )
    if derived:
        notes.append(
            f"{', '.join(derived)}: vLLM exports no per-round times. Its round rows are the "
            "response's per_step_accepted / per_step_drafted counts, and each round's time is "
            "its committed tokens x the request's generation time per token (generation_time_ms "
            "/ tokens after the first), shown as verify time: the draft / verify split and the "
            "Leviathan gap of a vLLM arm are not measured"
        )
    totals = sorted(
        {r.arm for r in data.arms if r.engine in TOTALS_ENGINES and r.arm in with_rounds}
    )
    if totals:
        notes.append(
            f"{', '.join(totals)}: llama.cpp reports per-response totals, not rounds. Each ok "
            "request is one row: drafted / accepted tokens (timings.draft_n / draft_n_accepted), "
            "decode steps = output tokens - 1 - accepted, and the decode time (predicted_ms) as "
            "verify time. Which steps carried a draft is not reported, so k, alpha and the "
            "draft / verify split of a llama.cpp arm are not measured; tokens per decode step "
            "counts the steps without a draft (the counters' figure is per draft)"
        )
    return RoundsSection(rt, cells, pooled, curves, gaps, notes)
