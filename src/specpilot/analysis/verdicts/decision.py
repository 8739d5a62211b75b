"""The verdict (R8): ADOPT / ADOPT_IN_WINDOWS / DO_NOT_ADOPT, written as the conditions that
produced it, per task group first and then for the service.

Rules 1-4, in order, for a candidate arm and a group (thresholds in ``VerdictConfig``), held
here (``group_verdict``); rules 5-6, the service and the PILOT_HYPOTHESIS flag, in
``analysis.verdicts.verdict``:

1. Quality first: a failed key-business or consistency gate makes the group DO_NOT_ADOPT,
   whatever the speed.
2. Amdahl next: when decode is less than ``min_decode_share`` of the group's task time on the
   baseline (retrieval, long inputs, tools or queueing dominate), the group is DO_NOT_ADOPT
   with that stage to fix first, whatever decode gains (the measured change is kept as a
   condition).
3. At each load level (phase, by offered rate) speculation *pays* when the paired comparison
   with the baseline says "faster" (``analysis.comparison.paired``: enough both-ok pairs, significant
   after Holm, the interval beyond -min_e2e_gain) and the equal-budget alternative, if
   measured, is not faster than the candidate there; it *does not pay* when the comparison is
   decided otherwise (no difference, slower, or the alternative better); a level whose cell is
   "insufficient" is *not measured* and decides nothing.
4. Pays at every level: ADOPT over the measured load range. Pays at some levels:
   ADOPT_IN_WINDOWS as a bracket, "pays at X req/s, not at Y; not measured between" (the last
   paying level below the first level that does not pay; not-measured levels between them do
   not break the run), or in the named phases when no decided level lies above the paying
   ones. Pays nowhere: DO_NOT_ADOPT with the bottleneck to fix first (``bottleneck``); every
   level insufficient: UNDECIDED, with what a decision needs (``evidence = "insufficient"``,
   ``analysis.verdicts.undecided``).

Held in ``analysis.verdicts.verdict``:

5. The service: ADOPT when some group is ADOPT (scoped to those groups), else ADOPT_IN_WINDOWS
   when some group is, else UNDECIDED when every group is and the groups pooled are not
   DO_NOT_ADOPT, else DO_NOT_ADOPT; its headline names a failed quality gate first.
6. PILOT_HYPOTHESIS when the traffic was not representative, cells have too few pairs, the A/A
   control is missing or differed from the baseline (the measurement is unstable), a required
   or baseline group is missing, or only cold-start requests were measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from specpilot.analysis.comparison.aa import AAControl
from specpilot.analysis.comparison.paired import PairedComparison
from specpilot.analysis.config import VerdictConfig
from specpilot.analysis.mechanism.counters import CounterAcceptance
from specpilot.analysis.mechanism.leviathan import LeviathanGap
from specpilot.analysis.mechanism.round_summary import RoundSummary
from specpilot.analysis.service.e2e import StageBreakdown
from specpilot.analysis.verdicts.quality import QualityGate
from specpilot.analysis.verdicts.undecided import needs, not_shown, undecided_text
from specpilot.analysis.verdicts.window import (
    NOT_MEASURED,
    NOT_PAYING,
    PAYS,
    Level,
    level_status,
    load_window,
)
from specpilot.numbers import signed_pct

ADOPT, WINDOWS, NO = "ADOPT", "ADOPT_IN_WINDOWS", "DO_NOT_ADOPT"
# the pilot could not tell: a fact about the pilot, not about speculation (never DO_NOT_ADOPT)
UNDECIDED = "UNDECIDED"
VERIFY_COST_LIMIT = 1.3  # v(k+1) above this is named as the bottleneck when decode does not gain


@dataclass(frozen=True)
class Condition:
    """One fact the verdict rests on: metric op threshold, whether it holds, in words."""

    kind: str
    subject: dict[str, Any]
    metric: str
    value: Any
    op: str
    threshold: Any
    holds: bool
    text: str


@dataclass(frozen=True)
class GroupVerdict:
    task_group: str
    verdict: str
    load_range_rps: tuple[float, float] | None  # ADOPT: the measured range where it pays
    below_rps: float | None  # ADOPT_IN_WINDOWS: only below this offered rate
    windows: tuple[str, ...]  # ADOPT_IN_WINDOWS: the phases (queues) where it pays
    bottleneck: str | None
    conditions: tuple[Condition, ...]
    pays_up_to_rps: float | None = None  # ADOPT_IN_WINDOWS: the last paying level below below_rps
    evidence: str = "decided"  # "insufficient": no level was decided (verdict UNDECIDED)
    window: str = (
        ""  # where it pays along the load axis (analysis.verdicts.window, as capacity shows)
    )
    levels: tuple[Level, ...] = ()  # (phase, offered rate, pays | does not pay | not measured)


@dataclass(frozen=True)
class Verdict:
    candidate_arm: str
    baseline_arm: str
    alternative_arm: str | None
    verdict: str
    pilot_hypothesis: bool
    hypothesis_reasons: tuple[str, ...]
    groups_adopted: tuple[str, ...]
    groups_in_windows: tuple[str, ...]
    groups_rejected: tuple[str, ...]
    load_range_rps: tuple[float, float] | None
    bottleneck: str | None
    summary: str
    groups: tuple[GroupVerdict, ...]
    conditions: tuple[Condition, ...] = field(default_factory=tuple)
    rollback_triggers: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    aa_control: str = ""  # the A/A control's result, shown next to the verdict
    planted: str = ""  # what the pilot found of its planted slowdown, per level (beside the A/A)
    within: str = ""  # the second estimate: the same processes with speculation switched off

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DecisionInputs:
    candidate_arm: str
    baseline_arm: str
    alternative_arm: str | None
    comparisons: Sequence[PairedComparison]  # candidate vs baseline
    alt_comparisons: Sequence[PairedComparison]  # candidate vs alternative (baseline_arm = alt)
    gates: Sequence[QualityGate]
    stages: Sequence[StageBreakdown]  # the baseline's (current service) decomposition
    rounds: Sequence[RoundSummary]  # the candidate's, pooled over phases, with decode_speedup
    gaps: Sequence[LeviathanGap] = ()
    verify_ratio: dict[str, tuple[float | None, str]] = field(
        default_factory=dict
    )  # group -> v(k+1)
    hardware: str = ""
    groups_expected: Sequence[str] = ()  # groups the baseline served
    representative: bool = False
    steady_requests: int = 0
    aa: AAControl | None = None  # the pilot's A/A control (None: it has none)
    # the candidate's acceptance from the engine's own counters (engines without round rows)
    counters: CounterAcceptance | None = None
    # the baseline's on-time ratio at its lowest measured load: (phase, rate, ratio)
    baseline_lowest: tuple[str, float, float] | None = None
    # the compared arms' phases that shared the machine (analysis.comparison.contention.contended)
    contended: Sequence[str] = ()
    # load levels where the pilot's planted slowdown was not found (analysis.verdicts.planted): no
    # candidate gets a direction or an equivalence claim there
    planted_missed: frozenset[str] = frozenset()
    # the episode design: the episodes per level it planned (a budget may have run fewer)
    per_level: int | None = None


def _level_conditions(
    inp: DecisionInputs, group: str, cfg: VerdictConfig
) -> tuple[list[Condition], list[Level]]:
    """Per load level of a group: the E2E and alternative conditions, and what it shows."""
    alt = {(c.phase, c.task_group): c for c in inp.alt_comparisons}
    conds, levels = [], []
    mine = [c for c in inp.comparisons if c.task_group == group]
    for c in sorted(mine, key=lambda c: (c.offered_rate or 0.0, c.phase)):
        e = c.task_rel_change
        subj = {"task_group": group, "phase": c.phase, "offered_rps": c.offered_rate}
        txt = f"{group} at {c.phase} ({_rate(c.offered_rate)}): {cell_text(c)}"
        faster = c.outcome == "faster"
        conds.append(
            Condition(
                "e2e_change",
                subj,
                "task_rel_change_ci_high",
                e.high,
                "<",
                -cfg.min_e2e_gain,
                faster,
                txt,
            )
        )
        a = alt.get((c.phase, group))
        alt_ok = a is None or a.outcome != "slower"
        if a is not None:
            conds.append(
                Condition(
                    "alternative",
                    {**subj, "alternative_arm": a.baseline_arm},
                    "task_rel_change_vs_alternative",
                    a.task_rel_change.estimate,
                    "not slower",
                    0.0,
                    alt_ok,
                    f"{group} at {c.phase}: against the equal-budget {a.baseline_arm} task time "
                    f"{signed_pct(a.task_rel_change.estimate)} -> {a.outcome}",
                )
            )
        status = level_status(c.outcome, a.outcome if a is not None else None)
        if c.phase in inp.planted_missed and status != NOT_MEASURED:
            status = NOT_MEASURED
            conds[-1 if a is None else -2] = replace(
                conds[-1 if a is None else -2],
                holds=False,
                text=conds[-1 if a is None else -2].text
                + " (not decided: the planted slowdown was not found at this level)",
            )
        levels.append((c.phase, float(c.offered_rate or 0.0), status))
    return conds, levels


OUTCOME_WORDS = {"insufficient": "undecided", "no_difference": "no difference"}


def cell_text(c: PairedComparison) -> str:
    """One cell in words: the estimate, the interval that decided it (or, on an undecided
    cell, an interval that excludes 0 labelled as not deciding), the outcome and, undecided,
    what a decision needs."""
    e = c.task_rel_change
    lvl = f" at {c.deciding_level:.2%}".replace(".00%", "%") if c.deciding_level else ""
    ci = f"{signed_pct(e.low)} to {signed_pct(e.high)}"
    undecided = c.outcome == "insufficient"
    excludes_0 = e.low is not None and e.high is not None and (e.low > 0 or e.high < 0)
    if undecided and excludes_0:
        shown = f"CI{lvl} {ci}, not deciding: {c.undecided_because}"
    elif undecided:
        shown = f"CI{lvl} {ci}" + (f", {c.undecided_because}" if c.undecided_because else "")
    else:
        shown = f"deciding CI{lvl} {ci}"
        if c.outcome == "no_difference" and c.equivalence_margin:
            shown += f", inside the +-{c.equivalence_margin:.0%} margin"
    return (
        f"task time {signed_pct(e.estimate)} ({shown}; {c.both_ok} of {c.pairs} pairs both ok"
        + (f", adjusted p {c.p_adjusted:.3f}" if c.p_adjusted is not None else "")
        + f"), on-time {signed_pct(c.on_time_diff.estimate)} points -> "
        + OUTCOME_WORDS.get(c.outcome, c.outcome)
        + (_needs(c) if undecided else "")
    )


def _needs(c: PairedComparison) -> str:
    why = needs(
        c.clusters,
        c.episodes_needed,
        c.processes_needed,
        estimated=c.df is not None,
        because=c.undecided_because,
    )
    return f" ({why})"


def _rate(x: float | None) -> str:
    return "rate n/a" if x is None else f"{x:.3g} req/s"


def group_verdict(inp: DecisionInputs, group: str, cfg: VerdictConfig) -> GroupVerdict:
    """Rules 1-4 of the module docstring for one group (``*`` = all groups pooled)."""
    gate = next((g for g in inp.gates if g.task_group == group), None)
    conds: list[Condition] = [] if gate is None else [_gate_condition(gate, group)]
    level_conds, levels = _level_conditions(inp, group, cfg)
    conds += level_conds
    if gate is not None and gate.failed:
        return GroupVerdict(
            group, NO, None, None, (), f"quality: {'; '.join(gate.reasons)}", tuple(conds)
        )
    share_neck, share_cond = _decode_share(inp, group, cfg)
    conds += share_cond
    if share_neck is not None:
        return GroupVerdict(group, NO, None, None, (), share_neck, tuple(conds))
    w = load_window(levels)
    if w.everywhere:
        rng = (w.levels[0][1], w.levels[-1][1])
        return GroupVerdict(
            group, ADOPT, rng, None, (), None, tuple(conds), window=w.summary, levels=w.levels
        )
    if w.undecided:
        neck = undecided_text([c for c in inp.comparisons if c.task_group == group], inp.per_level)
        return GroupVerdict(
            group,
            UNDECIDED,
            None,
            None,
            (),
            neck,
            tuple(conds),
            evidence="insufficient",
            window=w.summary,
            levels=w.levels,
        )
    neck, more = bottleneck(inp, group, cfg, levels)
    conds += more
    if not w.windows:
        return GroupVerdict(
            group, NO, None, None, (), neck, tuple(conds), window=w.summary, levels=w.levels
        )
    return GroupVerdict(
        group,
        WINDOWS,
        None,
        w.stops_at_rps,
        w.windows,
        neck,
        tuple(conds),
        pays_up_to_rps=w.pays_up_to_rps if w.stops_at_rps is not None else None,
        window=w.summary,
        levels=w.levels,
    )


def _gate_condition(gate: QualityGate, group: str) -> Condition:
    """The quality gates' condition of one group (rule 1)."""
    return Condition(
        "quality_gate",
        {"task_group": group},
        "gates",
        [gate.key_gate, gate.consistency_gate, gate.distribution_gate, gate.compat_gate],
        "no fail",
        "pass",
        not gate.failed,
        f"{group}: key checks {gate.key_gate}, consistency {gate.consistency_gate}, "
        f"distribution {gate.distribution_gate}, compat {gate.compat_gate}"
        + (f" ({'; '.join(gate.reasons)})" if gate.reasons else "")
        + (f"; decided by {', '.join(gate.carried)}" if gate.carried else ""),
    )


def _decode_share(
    inp: DecisionInputs, group: str, cfg: VerdictConfig
) -> tuple[str | None, list[Condition]]:
    """Rule 2: the bottleneck when decode is too small a share of the task, and its condition."""
    st = next((s for s in inp.stages if s.task_group == group), None)
    if st is None or st.decode_share is None:
        return None, []
    ok = st.decode_share >= cfg.min_decode_share
    other = st.dominant_other_stage or "other"
    oshare = st.mean_stage_s.get(other, 0.0) / st.mean_total_s if st.mean_total_s else 0.0
    cond = Condition(
        "decode_share",
        {"task_group": group},
        "decode_share",
        st.decode_share,
        ">=",
        cfg.min_decode_share,
        ok,
        f"{group}: decode is {st.decode_share:.0%} of task time, {other} {oshare:.0%}",
    )
    if ok:
        return None, [cond]
    return (
        f"fix {other} first: it is {oshare:.0%} of task time and decode only {st.decode_share:.0%}",
        [cond],
    )


def bottleneck(
    inp: DecisionInputs, group: str, cfg: VerdictConfig, levels: Sequence[Level]
) -> tuple[str, list[Condition]]:
    """What to fix first when speculation does not pay (everywhere) for a group: the load level
    where it stops, else decode itself (verification cost, acceptance, draft cost), else the
    equal-budget alternative, else a gain too small to show end to end."""
    conds: list[Condition] = []
    if any(lv[2] == PAYS for lv in levels):
        bad = [lv for lv in levels if lv[2] == NOT_PAYING]
        if not bad:
            return "load: the other levels were not measured with enough pairs", conds
        return f"load: speculation does not pay at {bad[0][0]} ({bad[0][1]:.3g} req/s)", conds
    rs = next((r for r in inp.rounds if r.task_group == group), None)
    s = rs.decode_speedup if rs else None
    if rs is not None and s is not None:
        conds.append(
            Condition(
                "decode_speedup",
                {"task_group": group},
                "decode_speedup",
                s,
                ">",
                1.0,
                s > 1.0,
                f"{group}: decode speed-up {s:.2f}x (decode only, per committed token)",
            )
        )
        if s <= 1.0:
            return _decode_neck(inp, group, rs), conds
    neck = _end_to_end_neck(inp, group, rs)
    if neck is not None:
        return neck, conds
    return not_shown(inp.comparisons, group, levels, inp.planted_missed, inp.per_level), conds


def _end_to_end_neck(inp: DecisionInputs, group: str, rs: RoundSummary | None) -> str | None:
    """Decode pays (or is not split): the equal-budget alternative, where speculation beat the
    baseline but lost to it, else a net end-to-end loss and where it comes from; None if
    neither."""
    beat_base = {
        c.phase for c in inp.comparisons if c.task_group == group and c.outcome == "faster"
    }
    alt_better = [
        c
        for c in inp.alt_comparisons
        if c.task_group == group and c.outcome == "slower" and c.phase in beat_base
    ]
    if alt_better:
        return (
            f"the equal-budget alternative {alt_better[0].baseline_arm} is faster: give the "
            "draft's resources to it"
        )
    slower = [
        c
        for c in inp.comparisons
        if c.task_group == group and c.outcome == "slower" and c.task_rel_change.estimate
    ]
    if not slower:
        return None
    w = max(slower, key=lambda c: c.task_rel_change.estimate or 0.0)
    why = (
        "decode alone is faster, so the loss is outside decode (prefill, queueing)"
        if rs is not None
        else f"{inp.counters.text} (no per-round times: verification and drafting are not split)"
        if inp.counters is not None
        else "the engine reports no per-round timings to split it into verification, draft "
        "and acceptance"
    )
    return f"net slower end to end: task time {w.task_rel_change.estimate:+.0%} at {w.phase}; {why}"


def _decode_neck(inp: DecisionInputs, group: str, rs: RoundSummary) -> str:
    if rs.k is None:  # per-request totals (llama.cpp): no round count, acceptance from totals
        steps = f"{rs.mean_acceptance_length or 0.0:.2f} tokens per decode step"
        if inp.counters is not None:
            return f"{inp.counters.text}; {steps}"
        rate = f"{rs.acceptance_rate:.1%}" if rs.acceptance_rate is not None else "unknown"
        return f"acceptance {rate} ({rs.accepted} of {rs.proposed} drafted tokens), {steps}"
    k = round(rs.k)
    v, src = inp.verify_ratio.get(group, (None, ""))
    hw = f" on this hardware ({inp.hardware})" if inp.hardware else " on this hardware"
    if v is not None and v >= VERIFY_COST_LIMIT:
        return f"verification of {k + 1} tokens costs {v:.1f}x one{hw} ({src})"
    mal = rs.mean_acceptance_length or 0.0
    gap = next((g for g in inp.gaps if g.task_group == group), None)
    if gap is not None and gap.c_ratio * k > 0.5 * mal:
        return f"the draft costs {gap.c_ratio:.2f} of a target step per token at k={k}, for {mal:.2f} tokens per round"
    return f"acceptance too low: {mal:.2f} tokens per round at k={k}"
