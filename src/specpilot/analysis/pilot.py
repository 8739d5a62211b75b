"""The whole analysis of one pilot: ``analyze(PilotData, AnalysisConfig) -> PilotAnalysis``.

Pure: it reads records and returns dataclasses; the report renders them. Sections follow R9.

    >>> from specpilot.records import ArmRecord, PilotData, PilotRecord
    >>> a = analyze(PilotData(PilotRecord("p", "demo", {}, "", "0", 0.0)))
    >>> a.verdicts, a.notes[0]
    ([], 'no baseline arm: nothing to compare')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from specpilot.analysis.base.columns import ALL
from specpilot.analysis.base.coverage import cut_phases, latency_cdf, not_measured
from specpilot.analysis.base.fold import arm_rates, fold
from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.comparison import paired
from specpilot.analysis.comparison.aa import AAControl, aa_control
from specpilot.analysis.comparison.contention import contended
from specpilot.analysis.config import AnalysisConfig
from specpilot.analysis.episodes.celltest import fingerprints_of, physical_of
from specpilot.analysis.episodes.inplace import switch_held
from specpilot.analysis.episodes.mirror import mirror_note
from specpilot.analysis.mechanism.counters import CounterAcceptance, counter_acceptance
from specpilot.analysis.mechanism.leviathan import LeviathanGap
from specpilot.analysis.mechanism.round_summary import (
    RoundsTable,
    RoundSummary,
    speedup_intervals,
)
from specpilot.analysis.mechanism.section import rounds_section
from specpilot.analysis.mechanism.tune_k import KChoice, KRun, choose_k
from specpilot.analysis.mechanism.verify_cost import VerifyCurve, curve_for
from specpilot.analysis.plan import Pairing, hardware_text, pair_arms, representative
from specpilot.analysis.rollback import rules as rollback
from specpilot.analysis.rollback.parity import RollbackParity, drill_outcomes, parity_of
from specpilot.analysis.service import capacity as cap
from specpilot.analysis.service import cost, e2e, ledger, load
from specpilot.analysis.service.coldstart import ColdStart, cold_starts
from specpilot.analysis.service.fleet import Admissible, FleetCell, admissible, fleet_cells
from specpilot.analysis.service.slo import conditions_of
from specpilot.analysis.settings import Design, Effective, effective
from specpilot.analysis.verdicts import planted as pl
from specpilot.analysis.verdicts import quality
from specpilot.analysis.verdicts.decision import DecisionInputs, Verdict
from specpilot.analysis.verdicts.matrix import GroupMatrix, TokenTime, group_matrix, time_per_token
from specpilot.analysis.verdicts.predicted import PredictionCheck, prediction_checks
from specpilot.analysis.verdicts.verdict import (
    Crossover,
    crossover,
    decide,
    validation_arm,
    with_triggers,
)
from specpilot.records import ArmRecord, PilotData


@dataclass
class PilotAnalysis:
    """Every result the report shows, in R9 order."""

    data: PilotData
    config: AnalysisConfig
    plan: Pairing  # which arm is compared with which (analysis.plan)
    hardware: str
    verdicts: list[Verdict] = field(default_factory=list)
    rollback_yaml: dict[str, str] = field(default_factory=dict)  # candidate -> rule file
    load_cells: list[load.LoadCell] = field(default_factory=list)
    rounds: list[RoundSummary] = field(default_factory=list)  # per arm, group, phase
    rounds_pooled: list[RoundSummary] = field(default_factory=list)  # per arm, group
    curves: list[VerifyCurve] = field(default_factory=list)
    gaps: list[LeviathanGap] = field(default_factory=list)
    k_choices: list[KChoice] = field(default_factory=list)
    quality_cells: list[quality.QualityCell] = field(default_factory=list)
    gates: list[quality.QualityGate] = field(default_factory=list)
    stages: list[e2e.StageBreakdown] = field(default_factory=list)
    recommendations: list[e2e.TaskRecommendation] = field(default_factory=list)
    amdahl_checks: list[dict[str, Any]] = field(default_factory=list)
    comparisons: list[paired.PairedComparison] = field(default_factory=list)
    aa: AAControl | None = None  # the A/A control's result (None: the pilot has no control)
    capacities: list[cap.Capacity] = field(default_factory=list)
    crossovers: list[Crossover] = field(default_factory=list)
    memory: list[cap.MemoryBudget] = field(default_factory=list)
    # the engines' own figures during the phases, the concurrency each arm was started with,
    # and what the draft costs of it (measured, else inferred from ``memory``)
    fleet: list[FleetCell] = field(default_factory=list)
    admissible: list[Admissible] = field(default_factory=list)
    draft_concurrency: list[cap.DraftConcurrency] = field(default_factory=list)
    costs: list[cost.ArmCost] = field(default_factory=list)
    cost_lines: list[cost.CostLine] = field(default_factory=list)
    ledgers: list[ledger.Ledger] = field(default_factory=list)  # the whole first-year cost
    cold_starts: list[ColdStart] = field(default_factory=list)  # R6: starts apart
    latency_cdf: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    scheduled: int = 0  # steady-state and cold-start requests analysed (warm-up excluded)
    round_table: RoundsTable | None = None  # the per-request round aggregates analysed
    # acceptance from each arm's engine counters (snapshot deltas over its measured phases)
    counters: dict[str, CounterAcceptance] = field(default_factory=dict)
    group_matrix: GroupMatrix | None = None  # the main candidate's groups x metrics
    time_per_token: list[TokenTime] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # per drilled arm: served rolled back, is it back to the baseline's latency (parity)
    drill_parity: dict[str, RollbackParity] = field(default_factory=dict)
    # every drill with its parity and its cost weighed against the gain (``parity.drill_outcomes``)
    drills: list[dict[str, Any]] = field(default_factory=list)
    planted: list[pl.PlantedResult] = field(default_factory=list)  # per level: was it found
    # the planner's predicted MDE and interval beside what each pooled cell achieved
    predicted: list[PredictionCheck] = field(default_factory=list)
    # the looks of the episode design and what each spent (analysis.episodes.sequential); None: no looks
    sequential: dict[str, Any] | None = None
    settings: Effective | None = None  # the settings as run (analysis.settings); None: not analysed


def analyze(data: PilotData, cfg: AnalysisConfig | None = None) -> PilotAnalysis:
    """Run every section; a section without inputs is empty, and ``notes`` says why."""
    eff = effective(cfg or AnalysisConfig(), Design.of(data.pilot))  # the one derivation
    cfg = eff.config
    data = fold(data)  # the episode design's records by load level (analysis.base.fold)
    if data.request_columns is not None:
        table = RequestTable.from_columns(data.request_columns, data.quality, data.arms)
    else:
        table = RequestTable.build(data.requests, data.quality, data.arms)
    plan = pair_arms(data.arms, set(table.arm.tolist()))
    a = PilotAnalysis(
        data, cfg, plan, hardware_text(data.pilot.hardware), settings=eff, notes=list(plan.notes)
    )
    a.sequential = eff.looks
    a.scheduled = len(table)
    a.notes += cut_phases(data)
    a.notes += switch_held(data)
    a.fleet = fleet_cells(data.snapshots, data.phases, data.arms)
    a.admissible = admissible(data.snapshots, data.arms)
    if plan.baseline is None:
        a.notes.insert(0, "no baseline arm: nothing to compare")
        return a
    a.load_cells = load.load_cells(
        table, data.phases, data.chunk_gaps, data.snapshots, conditions_of(data.pilot.schedule)
    )
    a.latency_cdf = latency_cdf(table)
    a.cold_starts = cold_starts(data)
    a.counters = counter_acceptance(data.snapshots)
    r = rounds_section(data, a.plan.baseline or "", a.plan.pairs)
    a.round_table, a.rounds, a.rounds_pooled = r.table, r.rounds, r.pooled
    a.curves, a.gaps = r.curves, r.gaps
    a.notes += r.notes
    _quality(a, data)
    _comparisons(a, table)
    if eff.design.mirrored:
        others = [x for x in table.codes("arm")[1] if x != plan.baseline]
        a.notes.append(mirror_note(table, plan.baseline, others, eff.design.shared))
    _end_to_end(a, table)
    a.capacities = cap.capacity(a.load_cells, cfg.verdict.slo_attainment)
    a.memory = [cap.memory_budget(data.snapshots, data.arms, b, c) for b, c in plan.pairs]
    a.draft_concurrency = cap.draft_concurrency(a.admissible, a.memory, plan.pairs)
    a.k_choices = _tune_k(a, table, data)
    _verdicts(a, table, data)
    a.crossovers = crossover(a.verdicts)
    a.drill_parity = parity_of(data, plan.baseline, cfg) if plan.baseline else {}
    a.drills = drill_outcomes(data.drills, a.drill_parity, a.comparisons, plan.candidates)
    _costs(a, table)
    a.group_matrix = group_matrix(
        plan.pairs[0] if plan.pairs else None, a.rounds_pooled, a.quality_cells, a.comparisons
    )
    a.time_per_token = time_per_token(a.rounds_pooled)
    return a


def _quality(a: PilotAnalysis, data: PilotData) -> None:
    a.quality_cells = quality.quality_cells(data.quality, data.consistency)
    for b, c in a.plan.pairs:
        a.gates += quality.quality_gates(data, b, c)


def _comparisons(a: PilotAnalysis, table: RequestTable) -> None:
    rates = arm_rates(a.data.phases)
    settings = paired.CompareSettings.of(a.config)
    pairs = [*a.plan.pairs, *a.plan.within]  # within: (switched off in place, speculative)
    if a.plan.planted and a.plan.baseline:
        pairs.append((a.plan.baseline, a.plan.planted))
    if a.plan.alternative and a.plan.baseline:
        pairs.append((a.plan.baseline, a.plan.alternative))
        # the equal-budget alternative answers only for candidates on the baseline's engine
        pairs += [(a.plan.alternative, c) for b, c in a.plan.pairs if b == a.plan.baseline]
    base, ctrl = a.plan.baseline, a.plan.control
    if base is not None and ctrl is not None:  # the A/A control arm, first in the tables
        pairs.insert(0, (base, ctrl))
    fps, phys = fingerprints_of(a.data.arms), physical_of(a.data.arms)
    a.comparisons += paired.comparisons_for(
        table, pairs, settings, offered_rates=rates, fingerprints=fps, physical=phys
    )
    if base is not None and ctrl is not None:
        a.aa = aa_control([c for c in a.comparisons if c.candidate_arm == ctrl], base, ctrl)
    rec = a.plan.record(a.plan.planted) if a.plan.planted else None
    if rec is not None:
        factor = float(((rec.manifest or {}).get("planted") or {}).get("factor") or 0.0)
        a.planted = pl.planted_results(a.comparisons, rec.arm, factor)
        a.comparisons = pl.request_spread(a.comparisons, rec.arm)
        if a.aa is None and a.plan.baseline:  # the planted arm less its dilation: the A/A
            shifted = pl.as_aa(a.comparisons, rec.arm, factor)
            a.aa = (
                aa_control(shifted, a.plan.baseline, shifted[0].candidate_arm) if shifted else None
            )
    prediction = a.settings.design.prediction if a.settings else None
    a.predicted = prediction_checks(prediction, a.comparisons, a.plan.planted)


def _speedup_cis(a: PilotAnalysis) -> None:
    """Intervals of every decode speed-up (``round_summary.speedup_intervals``)."""
    if a.round_table is None:
        return
    cis: dict[tuple[str, str, str], tuple[float, float]] = {}
    for b in {p[0] for p in a.plan.pairs}:
        mine = [c for x, c in a.plan.pairs if x == b]
        cis |= speedup_intervals(
            a.round_table, b, mine, level=a.config.ci_level, seed=a.config.seed
        )

    def put(rs: list[RoundSummary]) -> list[RoundSummary]:
        return [
            replace(r, decode_speedup_ci=cis[(r.arm, r.task_group, r.phase)])
            if r.decode_speedup is not None and (r.arm, r.task_group, r.phase) in cis
            else r
            for r in rs
        ]

    a.rounds, a.rounds_pooled = put(a.rounds), put(a.rounds_pooled)


def _end_to_end(a: PilotAnalysis, table: RequestTable) -> None:
    _speedup_cis(a)
    base = a.plan.baseline or ""
    speedups = {
        (r.arm, r.task_group): r.decode_speedup for r in a.rounds_pooled if r.decode_speedup
    }
    cis = {(r.arm, r.task_group): r.decode_speedup_ci for r in a.rounds_pooled}
    main = a.plan.candidates[0] if a.plan.candidates else None
    s_by_group = {g: s for (arm, g), s in speedups.items() if arm == main and s}
    st = e2e.StageTable.from_requests(table, base)
    a.stages = e2e.stage_breakdown(st, s_by_group or a.config.decode_speedup_for_amdahl)
    a.recommendations = e2e.recommend(a.stages, a.config.verdict.min_decode_share)
    for comp in a.comparisons:
        s = speedups.get((comp.candidate_arm, comp.task_group))
        if comp.baseline_arm != base or s is None or comp.task_rel_change.estimate is None:
            continue
        ph = e2e.stage_breakdown(e2e.StageTable.from_requests(table, base, comp.phase), s)
        row = next((x for x in ph if x.task_group == comp.task_group), None)
        if row is None or row.projection is None:
            continue
        e = comp.task_rel_change

        def inv(x: float | None) -> float | None:
            return 1 / (1 + x) if x is not None and x > -1 else None

        ci = cis.get((comp.candidate_arm, comp.task_group))
        proj_ci: list[float | None] = [None, None]
        if ci is not None:
            for i, sx in enumerate(ci):
                r2 = e2e.stage_breakdown(e2e.StageTable.from_requests(table, base, comp.phase), sx)
                hit = next((x for x in r2 if x.task_group == comp.task_group), None)
                proj_ci[i] = hit.projection.overall_speedup if hit and hit.projection else None
        measured = [inv(e.high), inv(e.low)]
        a.amdahl_checks.append(
            {
                "candidate_arm": comp.candidate_arm,
                "task_group": comp.task_group,
                "phase": comp.phase,
                "decode_speedup": s,
                "decode_speedup_ci": list(ci) if ci is not None else [None, None],
                "decode_share": row.decode_share,
                "projected_task_speedup": row.projection.overall_speedup,
                "projected_task_ci": proj_ci,
                "measured_task_speedup": inv(e.estimate),
                "measured_task_ci": measured,
                "agreement": e2e.agreement(proj_ci, measured),
            }
        )


def _k_of(rec: ArmRecord) -> int | None:
    if rec.strategy.kind == "none":
        return 0
    if rec.strategy.kind == "draft" and rec.strategy.k is not None:
        return rec.strategy.k
    return None


def _tune_k(a: PilotAnalysis, table: RequestTable, data: PilotData) -> list[KChoice]:
    """vLLM's k choice per group and phase over the runs of the main candidate's engine
    (its plain and draft-model arms; each run is one KRun per cell)."""
    cand = a.plan.record(a.plan.candidates[0]) if a.plan.candidates else None
    if cand is None:
        return []
    runs_of = {r.run_id: r for r in data.arms if r.engine == cand.engine and _k_of(r) is not None}
    by_run = table.select(np.isin(table.run_id, list(runs_of)))
    by_run = replace(by_run, arm=by_run.run_id)  # one load cell per run
    phases = [replace(p, arm=p.run_id) for p in data.phases if p.run_id in runs_of]
    runs: dict[tuple[str, str], list[KRun]] = {}
    for c in load.load_cells(by_run, phases):
        obj = c.goodput_rps if a.config.tune_k.objective == "goodput" else c.throughput_tokens_s
        if obj is not None:
            failed = c.scheduled - c.counts["ok"]
            k = _k_of(runs_of[c.arm]) or 0
            runs.setdefault((c.task_group, c.phase), []).append(KRun(k, c.arm, obj, failed))
    if len({r.k for rs in runs.values() for r in rs}) < 2:
        a.notes.append(
            "k was not tuned: the pilot measured a single k (the method needs several, >= 3 runs each)"
        )
        return []
    return [
        choose_k(rs, a.config.tune_k, task_group=g, phase=p) for (g, p), rs in sorted(runs.items())
    ]


def _verdicts(a: PilotAnalysis, table: RequestTable, data: PilotData) -> None:
    steady = int(np.count_nonzero(~table.cold_start))
    base = a.plan.baseline or ""
    rep = representative(data.pilot.config)
    unjudged = not_measured(data)
    planned = a.settings.design.per_level if a.settings else None
    for b, c in a.plan.pairs:
        why = "; ".join(f"{x}: {unjudged[x]}" for x in (b, c) if x in unjudged)
        if why:  # a failed or cut arm gets no verdict and no rollback rules
            a.notes.append(f"{c} against {b}: not measured, no verdict ({why})")
            continue
        # an extra pair (e.g. llama.cpp plain vs n-gram) has no equal-budget alternative of its
        # own: the builtin baseline's alternative runs another engine and answers nothing there
        alt = a.plan.alternative if b == a.plan.baseline else None
        inp = DecisionInputs(
            candidate_arm=c,
            baseline_arm=b,
            alternative_arm=alt,
            comparisons=[x for x in a.comparisons if (x.baseline_arm, x.candidate_arm) == (b, c)],
            alt_comparisons=[
                x
                for x in a.comparisons
                if alt is not None and (x.baseline_arm, x.candidate_arm) == (alt, c)
            ],
            gates=[g for g in a.gates if g.arm == c],
            stages=a.stages,
            rounds=[r for r in a.rounds_pooled if r.arm == c],
            gaps=[g for g in a.gaps if g.arm == c and g.phase == ALL],
            verify_ratio=_verify_ratios(a, c),
            hardware=a.hardware,
            groups_expected=sorted({x for x in table.task_group[table.arm == b].tolist()}),
            representative=rep,
            steady_requests=steady,
            aa=a.aa,
            counters=a.counters.get(c),
            baseline_lowest=_lowest_load(a, b),
            contended=contended(data.phases, [x for x in (b, c, alt) if x is not None]),
            planted_missed=pl.missed_levels(a.planted) if b == a.plan.baseline else frozenset(),
            per_level=planned,
        )
        v = decide(inp, a.config.verdict)
        v = pl.beside(v, a.planted if b == a.plan.baseline else [], a.comparisons, a.plan.within)
        cand = a.plan.record(c)
        if cand is not None and (cand.strategy.params or {}).get("synth_rates"):
            v = validation_arm(v, cand.strategy.params["synth_rates"])
        scope = set(v.groups_adopted) | set(v.groups_in_windows) or set(inp.groups_expected)
        engine = cand.engine if cand is not None else "vllm"
        slos = _slos(a, table, base, scope)
        trig = rollback.triggers(
            slos, a.config.rollback, c, a.config.verdict.slo_attainment, engine
        )
        a.verdicts.append(with_triggers(v, trig))
        a.rollback_yaml[c] = rollback.rules_yaml(
            trig, c, engine, rollback.not_covered(slos, engine, a.config.rollback.group_selectors)
        )


def _lowest_load(a: PilotAnalysis, arm: str) -> tuple[str, float, float] | None:
    """(phase, offered rate, on-time ratio) of ``arm`` at its lowest measured load."""
    cells = [
        c
        for c in a.load_cells
        if c.arm == arm and c.task_group == ALL and c.on_time_ratio is not None
    ]
    if not cells:
        return None
    c = min(cells, key=lambda c: (c.offered_rate or 0.0, c.phase))
    return c.phase, float(c.offered_rate or 0.0), float(c.on_time_ratio or 0.0)


def _verify_ratios(a: PilotAnalysis, cand: str) -> dict[str, tuple[float | None, str]]:
    out = {}
    for r in a.rounds_pooled:
        if r.arm == cand and r.k:
            out[r.task_group] = curve_for(a.curves, cand, round(r.k) + 1, r.mean_batch_size)
    return out


def _slos(
    a: PilotAnalysis, t: RequestTable, base: str, groups: set[str]
) -> dict[str, rollback.GroupSLO]:
    out = {}
    conditions = conditions_of(a.data.pilot.schedule)
    for g in sorted(groups):
        m = (t.arm == base) & (t.task_group == g)
        d, s = t.deadline_s[m], t.ttft_slo_s[m]
        p50 = [c.e2e.p50 for c in a.load_cells if c.arm == base and c.task_group == g and c.e2e.p50]
        out[g] = rollback.GroupSLO(
            float(np.nanmedian(d)) if np.isfinite(d).any() else None,
            float(np.nanmedian(s)) if np.isfinite(s).any() else None,
            max(p50) if p50 else None,
            conditions.get(g, ()),
        )
    return out


def _costs(a: PilotAnalysis, table: RequestTable) -> None:
    a.costs = cost.arm_costs(a.load_cells, a.capacities, a.plan.arms, a.config.cost)
    by = {c.arm: c for c in a.costs}
    for b, c in a.plan.pairs:
        if b in by and c in by:
            v = next((x for x in a.verdicts if x.candidate_arm == c), None)
            scope = set(v.groups_adopted) | set(v.groups_in_windows) if v else set()
            # equal quality where it would be switched on (everywhere when nowhere is adopted)
            failed = any(
                g.failed for g in a.gates if g.arm == c and (not scope or g.task_group in scope)
            )
            a.cost_lines.append(
                cost.cost_line(
                    by[b],
                    by[c],
                    a.config.cost.business_value_per_on_time_task,
                    failed,
                    a.config.cost.currency,
                )
            )
            memory = next((m for m in a.memory if m.candidate_arm == c), None)
            slots = cap.target_slots(a.plan.record(c))
            conc = next((d for d in a.draft_concurrency if d.candidate_arm == c), None)
            a.ledgers.append(
                ledger.for_pair(by[b], by[c], memory, slots, table, a.config.cost, failed, conc)
            )


__all__: Sequence[str] = ["PilotAnalysis", "analyze", "latency_cdf"]
