"""The decisions over what a pilot measured (``analysis.measured.Measured``): each candidate's
verdict with its rollback triggers and rule file, then each arm's cost, the cost lines and
the first-year ledgers. Pure functions; each returns its section whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specpilot.analysis.base.columns import ALL
from specpilot.analysis.base.coverage import not_measured
from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.comparison.contention import contended
from specpilot.analysis.config import AnalysisConfig
from specpilot.analysis.measured import Measured
from specpilot.analysis.mechanism.verify_cost import curve_for
from specpilot.analysis.plan import Pairing, representative
from specpilot.analysis.rollback import rules as rollback
from specpilot.analysis.service import capacity as cap
from specpilot.analysis.service import cost, ledger
from specpilot.analysis.service.slo import conditions_of
from specpilot.analysis.verdicts import planted as pl
from specpilot.analysis.verdicts.decision import DecisionInputs, Verdict
from specpilot.analysis.verdicts.verdict import decide, validation_arm, with_triggers
from specpilot.records import PilotData


@dataclass(frozen=True)
class Verdicts:
    """Each candidate's verdict, its rollback rule file, and the pairs left without one."""

    verdicts: list[Verdict]
    rollback_yaml: dict[str, str]  # candidate -> rule file
    notes: list[str]


@dataclass(frozen=True)
class Costs:
    costs: list[cost.ArmCost]
    cost_lines: list[cost.CostLine]
    ledgers: list[ledger.Ledger]  # the whole first-year cost


def verdicts(
    m: Measured, plan: Pairing, cfg: AnalysisConfig, data: PilotData, per_level: int | None
) -> Verdicts:
    """Every (baseline, candidate) pair's verdict (``verdicts.verdict.decide``), beside the
    planted arm, with its rollback triggers; a pair with an arm not measured gets a note."""
    out: list[Verdict] = []
    rules: dict[str, str] = {}
    notes: list[str] = []
    unjudged = not_measured(data)
    for b, c in plan.pairs:
        why = "; ".join(f"{x}: {unjudged[x]}" for x in (b, c) if x in unjudged)
        if why:  # a failed or cut arm gets no verdict and no rollback rules
            notes.append(f"{c} against {b}: not measured, no verdict ({why})")
            continue
        inp = _inputs(m, plan, data, b, c, per_level)
        v = decide(inp, cfg.verdict)
        cmp = m.compared
        v = pl.beside(v, cmp.planted if b == plan.baseline else [], cmp.comparisons, plan.within)
        cand = plan.record(c)
        if cand is not None and (cand.strategy.params or {}).get("synth_rates"):
            v = validation_arm(v, cand.strategy.params["synth_rates"])
        scope = set(v.groups_adopted) | set(v.groups_in_windows) or set(inp.groups_expected)
        engine = cand.engine if cand is not None else "vllm"
        slos = _slos(m, data, plan.baseline or "", scope)
        trig = rollback.triggers(slos, cfg.rollback, c, cfg.verdict.slo_attainment, engine)
        out.append(with_triggers(v, trig))
        rules[c] = rollback.rules_yaml(
            trig, c, engine, rollback.not_covered(slos, engine, cfg.rollback.group_selectors)
        )
    return Verdicts(out, rules, notes)


def _inputs(
    m: Measured, plan: Pairing, data: PilotData, b: str, c: str, per_level: int | None
) -> DecisionInputs:
    """What the decision rules read of one pair."""
    t, cmp, r = m.table, m.compared, m.rounds
    # an extra pair (e.g. llama.cpp plain vs n-gram) has no equal-budget alternative of its
    # own: the builtin baseline's alternative runs another engine and answers nothing there
    alt = plan.alternative if b == plan.baseline else None
    return DecisionInputs(
        candidate_arm=c,
        baseline_arm=b,
        alternative_arm=alt,
        comparisons=[x for x in cmp.comparisons if (x.baseline_arm, x.candidate_arm) == (b, c)],
        alt_comparisons=[
            x
            for x in cmp.comparisons
            if alt is not None and (x.baseline_arm, x.candidate_arm) == (alt, c)
        ],
        gates=[g for g in m.gates if g.arm == c],
        stages=m.end_to_end.stages,
        rounds=[x for x in r.pooled if x.arm == c],
        gaps=[g for g in r.gaps if g.arm == c and g.phase == ALL],
        verify_ratio=_verify_ratios(m, c),
        hardware=m.hardware,
        groups_expected=sorted({x for x in t.task_group[t.arm == b].tolist()}),
        representative=representative(data.pilot.config),
        steady_requests=int(np.count_nonzero(~t.cold_start)),
        aa=cmp.aa,
        counters=m.counters.get(c),
        baseline_lowest=_lowest_load(m, b),
        contended=contended(data.phases, [x for x in (b, c, alt) if x is not None]),
        planted_missed=pl.missed_levels(cmp.planted) if b == plan.baseline else frozenset(),
        per_level=per_level,
    )


def _lowest_load(m: Measured, arm: str) -> tuple[str, float, float] | None:
    """(phase, offered rate, on-time ratio) of ``arm`` at its lowest measured load."""
    cells = [
        c
        for c in m.load_cells
        if c.arm == arm and c.task_group == ALL and c.on_time_ratio is not None
    ]
    if not cells:
        return None
    c = min(cells, key=lambda c: (c.offered_rate or 0.0, c.phase))
    return c.phase, float(c.offered_rate or 0.0), float(c.on_time_ratio or 0.0)


def _verify_ratios(m: Measured, cand: str) -> dict[str, tuple[float | None, str]]:
    out = {}
    for r in m.rounds.pooled:
        if r.arm == cand and r.k:
            out[r.task_group] = curve_for(m.rounds.curves, cand, round(r.k) + 1, r.mean_batch_size)
    return out


def _slos(
    m: Measured, data: PilotData, base: str, groups: set[str]
) -> dict[str, rollback.GroupSLO]:
    out = {}
    t: RequestTable = m.table
    conditions = conditions_of(data.pilot.schedule)
    for g in sorted(groups):
        sel = (t.arm == base) & (t.task_group == g)
        d, s = t.deadline_s[sel], t.ttft_slo_s[sel]
        p50 = [c.e2e.p50 for c in m.load_cells if c.arm == base and c.task_group == g and c.e2e.p50]
        out[g] = rollback.GroupSLO(
            float(np.nanmedian(d)) if np.isfinite(d).any() else None,
            float(np.nanmedian(s)) if np.isfinite(s).any() else None,
            max(p50) if p50 else None,
            conditions.get(g, ()),
        )
    return out


def costs(m: Measured, plan: Pairing, cfg: AnalysisConfig, decided: Sequence[Verdict]) -> Costs:
    """Each arm's cost, and per pair its cost line and first-year ledger, with quality judged
    where the verdict would switch the candidate on (everywhere when nowhere is adopted)."""
    arms = cost.arm_costs(m.load_cells, m.capacities, plan.arms, cfg.cost)
    by = {c.arm: c for c in arms}
    lines, ledgers = [], []
    for b, c in plan.pairs:
        if b not in by or c not in by:
            continue
        v = next((x for x in decided if x.candidate_arm == c), None)
        scope = set(v.groups_adopted) | set(v.groups_in_windows) if v else set()
        failed = any(
            g.failed for g in m.gates if g.arm == c and (not scope or g.task_group in scope)
        )
        lines.append(
            cost.cost_line(
                by[b], by[c], cfg.cost.business_value_per_on_time_task, failed, cfg.cost.currency
            )
        )
        memory = next((x for x in m.memory if x.candidate_arm == c), None)
        slots = cap.target_slots(plan.record(c))
        conc = next((d for d in m.draft_concurrency if d.candidate_arm == c), None)
        ledgers.append(
            ledger.for_pair(by[b], by[c], memory, slots, m.table, cfg.cost, failed, conc)
        )
    return Costs(arms, lines, ledgers)
