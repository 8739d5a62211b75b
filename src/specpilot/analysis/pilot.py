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

from specpilot.analysis import decisions
from specpilot.analysis.base.coverage import cut_phases, latency_cdf
from specpilot.analysis.base.fold import arm_rates, fold
from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.comparison import paired
from specpilot.analysis.comparison.aa import AAControl, aa_control
from specpilot.analysis.config import AnalysisConfig
from specpilot.analysis.episodes.celltest import fingerprints_of, physical_of
from specpilot.analysis.episodes.inplace import switch_held
from specpilot.analysis.episodes.mirror import mirror_note
from specpilot.analysis.measured import Compared, EndToEnd, Measured, Rounds
from specpilot.analysis.mechanism.counters import CounterAcceptance, counter_acceptance
from specpilot.analysis.mechanism.leviathan import LeviathanGap
from specpilot.analysis.mechanism.round_summary import (
    RoundsTable,
    RoundSummary,
    speedup_intervals,
)
from specpilot.analysis.mechanism.section import RoundsSection, rounds_section
from specpilot.analysis.mechanism.tune_k import KChoice, KRun, choose_k
from specpilot.analysis.mechanism.verify_cost import VerifyCurve
from specpilot.analysis.plan import Pairing, hardware_text, pair_arms
from specpilot.analysis.rollback.parity import RollbackParity, drill_outcomes, parity_of
from specpilot.analysis.service import capacity as cap
from specpilot.analysis.service import cost, e2e, ledger, load
from specpilot.analysis.service.coldstart import ColdStart, cold_starts
from specpilot.analysis.service.fleet import Admissible, FleetCell, admissible, fleet_cells
from specpilot.analysis.service.slo import conditions_of
from specpilot.analysis.settings import Design, Effective, effective
from specpilot.analysis.verdicts import planted as pl
from specpilot.analysis.verdicts import quality
from specpilot.analysis.verdicts.decision import Verdict
from specpilot.analysis.verdicts.matrix import GroupMatrix, TokenTime, group_matrix, time_per_token
from specpilot.analysis.verdicts.predicted import PredictionCheck, prediction_checks
from specpilot.analysis.verdicts.verdict import (
    Crossover,
    crossover,
)
from specpilot.records import ArmRecord, PilotData


@dataclass(frozen=True)
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
    """Run every section; a section without inputs is empty, and ``notes`` says why. Each
    section is computed whole, from the records and the sections before it, and the result
    is built once at the end."""
    eff = effective(cfg or AnalysisConfig(), Design.of(data.pilot))  # the one derivation
    cfg = eff.config
    data = fold(data)  # the episode design's records by load level (analysis.base.fold)
    if data.request_columns is not None:
        table = RequestTable.from_columns(data.request_columns, data.quality, data.arms)
    else:
        table = RequestTable.build(data.requests, data.quality, data.arms)
    plan = pair_arms(data.arms, set(table.arm.tolist()))
    hardware = hardware_text(data.pilot.hardware)
    fleet = fleet_cells(data.snapshots, data.phases, data.arms)
    adm = admissible(data.snapshots, data.arms)
    head: dict[str, Any] = dict(
        data=data, config=cfg, plan=plan, hardware=hardware, settings=eff,
        sequential=eff.looks, scheduled=len(table), fleet=fleet, admissible=adm,
    )  # fmt: skip
    notes = [*plan.notes, *cut_phases(data), *switch_held(data)]
    if plan.baseline is None:
        return PilotAnalysis(**head, notes=["no baseline arm: nothing to compare", *notes])
    m, more = _measured(data, cfg, eff, plan, table, hardware, adm)
    notes += more
    decided = decisions.verdicts(m, plan, cfg, data, eff.design.per_level)
    spent = decisions.costs(m, plan, cfg, decided.verdicts)
    k_choices, k_notes = _tune_k(plan, cfg, table, data)
    return _built(head, m, decided, spent, k_choices, [*notes, *k_notes, *decided.notes])


def _built(
    head: dict[str, Any],
    m: Measured,
    decided: decisions.Verdicts,
    spent: decisions.Costs,
    k_choices: list[KChoice],
    notes: list[str],
) -> PilotAnalysis:
    """The result, built once from its sections."""
    data, plan, cmp, r = head["data"], head["plan"], m.compared, m.rounds
    parity = parity_of(data, plan.baseline, head["config"])
    return PilotAnalysis(
        **head,
        verdicts=decided.verdicts,
        rollback_yaml=decided.rollback_yaml,
        load_cells=m.load_cells,
        rounds=r.rounds,
        rounds_pooled=r.pooled,
        round_table=r.table,
        curves=r.curves,
        gaps=r.gaps,
        k_choices=k_choices,
        quality_cells=m.quality_cells,
        gates=m.gates,
        stages=m.end_to_end.stages,
        recommendations=m.end_to_end.recommendations,
        amdahl_checks=m.end_to_end.amdahl_checks,
        comparisons=cmp.comparisons,
        aa=cmp.aa,
        planted=cmp.planted,
        predicted=cmp.predicted,
        capacities=m.capacities,
        crossovers=crossover(decided.verdicts),
        memory=m.memory,
        draft_concurrency=m.draft_concurrency,
        costs=spent.costs,
        cost_lines=spent.cost_lines,
        ledgers=spent.ledgers,
        cold_starts=cold_starts(data),
        latency_cdf=latency_cdf(m.table),
        counters=m.counters,
        group_matrix=group_matrix(
            plan.pairs[0] if plan.pairs else None, r.pooled, m.quality_cells, cmp.comparisons
        ),
        time_per_token=time_per_token(r.pooled),
        notes=notes,
        drill_parity=parity,
        drills=drill_outcomes(data.drills, parity, cmp.comparisons, plan.candidates),
    )


def _measured(
    data: PilotData,
    cfg: AnalysisConfig,
    eff: Effective,
    plan: Pairing,
    table: RequestTable,
    hardware: str,
    adm: list[Admissible],
) -> tuple[Measured, list[str]]:
    """Every measured section, each whole, and the notes they leave."""
    base = plan.baseline or ""
    load_cells = load.load_cells(
        table, data.phases, data.chunk_gaps, data.snapshots, conditions_of(data.pilot.schedule)
    )
    sec = rounds_section(data, base, plan.pairs)
    rounds = _with_speedup_cis(sec, plan, cfg)
    notes = list(sec.notes)
    compared = _comparisons(data, plan, cfg, eff, table)
    if eff.design.mirrored:
        others = [x for x in table.codes("arm")[1] if x != base]
        notes.append(mirror_note(table, base, others, eff.design.shared))
    memory = [cap.memory_budget(data.snapshots, data.arms, b, c) for b, c in plan.pairs]
    gates = [g for b, c in plan.pairs for g in quality.quality_gates(data, b, c)]
    m = Measured(
        table=table,
        hardware=hardware,
        load_cells=load_cells,
        rounds=rounds,
        counters=counter_acceptance(data.snapshots),
        quality_cells=quality.quality_cells(data.quality, data.consistency),
        gates=gates,
        compared=compared,
        end_to_end=_end_to_end(plan, cfg, table, rounds, compared.comparisons),
        capacities=cap.capacity(load_cells, cfg.verdict.slo_attainment),
        memory=memory,
        draft_concurrency=cap.draft_concurrency(adm, memory, plan.pairs),
    )
    return m, notes


def _comparisons(
    data: PilotData, plan: Pairing, cfg: AnalysisConfig, eff: Effective, table: RequestTable
) -> Compared:
    """Every compared pair's cells, the A/A control, the planted arm's result per level and
    the planner's prediction beside what each pooled cell achieved."""
    settings = paired.CompareSettings.of(cfg)
    pairs = [*plan.pairs, *plan.within]  # within: (switched off in place, speculative)
    if plan.planted and plan.baseline:
        pairs.append((plan.baseline, plan.planted))
    if plan.alternative and plan.baseline:
        pairs.append((plan.baseline, plan.alternative))
        # the equal-budget alternative answers only for candidates on the baseline's engine
        pairs += [(plan.alternative, c) for b, c in plan.pairs if b == plan.baseline]
    base, ctrl = plan.baseline, plan.control
    if base is not None and ctrl is not None:  # the A/A control arm, first in the tables
        pairs.insert(0, (base, ctrl))
    comparisons = paired.comparisons_for(
        table,
        pairs,
        settings,
        offered_rates=arm_rates(data.phases),
        fingerprints=fingerprints_of(data.arms),
        physical=physical_of(data.arms),
    )
    aa = None
    if base is not None and ctrl is not None:
        aa = aa_control([c for c in comparisons if c.candidate_arm == ctrl], base, ctrl)
    planted: list[pl.PlantedResult] = []
    rec = plan.record(plan.planted) if plan.planted else None
    if rec is not None:
        factor = float(((rec.manifest or {}).get("planted") or {}).get("factor") or 0.0)
        planted = pl.planted_results(comparisons, rec.arm, factor)
        comparisons = pl.request_spread(comparisons, rec.arm)
        if aa is None and base:  # the planted arm less its dilation: the A/A
            shifted = pl.as_aa(comparisons, rec.arm, factor)
            aa = aa_control(shifted, base, shifted[0].candidate_arm) if shifted else None
    predicted = prediction_checks(eff.design.prediction, comparisons, plan.planted)
    return Compared(comparisons, aa, planted, predicted)


def _with_speedup_cis(sec: RoundsSection, plan: Pairing, cfg: AnalysisConfig) -> Rounds:
    """The per-round section with an interval on every decode speed-up
    (``round_summary.speedup_intervals``)."""
    if sec.table is None:
        return Rounds(sec.table, sec.rounds, sec.pooled, sec.curves, sec.gaps)
    cis: dict[tuple[str, str, str], tuple[float, float]] = {}
    for b in {p[0] for p in plan.pairs}:
        mine = [c for x, c in plan.pairs if x == b]
        cis |= speedup_intervals(sec.table, b, mine, level=cfg.ci_level, seed=cfg.seed)

    def put(rs: list[RoundSummary]) -> list[RoundSummary]:
        return [
            replace(r, decode_speedup_ci=cis[(r.arm, r.task_group, r.phase)])
            if r.decode_speedup is not None and (r.arm, r.task_group, r.phase) in cis
            else r
            for r in rs
        ]

    return Rounds(sec.table, put(sec.rounds), put(sec.pooled), sec.curves, sec.gaps)


def _end_to_end(
    plan: Pairing,
    cfg: AnalysisConfig,
    table: RequestTable,
    rounds: Rounds,
    comparisons: Sequence[paired.PairedComparison],
) -> EndToEnd:
    """Where the task time goes (R3) at the main candidate's decode speed-ups, and per cell
    the task speed-up Amdahl projects beside the measured one."""
    base = plan.baseline or ""
    speedups = {(r.arm, r.task_group): r.decode_speedup for r in rounds.pooled if r.decode_speedup}
    cis = {(r.arm, r.task_group): r.decode_speedup_ci for r in rounds.pooled}
    main = plan.candidates[0] if plan.candidates else None
    s_by_group = {g: s for (arm, g), s in speedups.items() if arm == main and s}
    st = e2e.StageTable.from_requests(table, base)
    stages = e2e.stage_breakdown(st, s_by_group or cfg.decode_speedup_for_amdahl)
    checks = []
    for comp in comparisons:
        s = speedups.get((comp.candidate_arm, comp.task_group))
        if comp.baseline_arm != base or s is None or comp.task_rel_change.estimate is None:
            continue
        check = _amdahl(table, base, comp, s, cis.get((comp.candidate_arm, comp.task_group)))
        if check is not None:
            checks.append(check)
    return EndToEnd(stages, e2e.recommend(stages, cfg.verdict.min_decode_share), checks)


def _amdahl(
    table: RequestTable,
    base: str,
    comp: paired.PairedComparison,
    s: float,
    ci: tuple[float, float] | None,
) -> dict[str, Any] | None:
    """One cell's projected task speed-up (its phase's stage shares at decode speed-up ``s``)
    beside the measured one; None where the cell's group has no projection."""
    ph = e2e.stage_breakdown(e2e.StageTable.from_requests(table, base, comp.phase), s)
    row = next((x for x in ph if x.task_group == comp.task_group), None)
    if row is None or row.projection is None:
        return None
    e = comp.task_rel_change

    def inv(x: float | None) -> float | None:
        return 1 / (1 + x) if x is not None and x > -1 else None

    proj_ci: list[float | None] = [None, None]
    if ci is not None:
        for i, sx in enumerate(ci):
            r2 = e2e.stage_breakdown(e2e.StageTable.from_requests(table, base, comp.phase), sx)
            hit = next((x for x in r2 if x.task_group == comp.task_group), None)
            proj_ci[i] = hit.projection.overall_speedup if hit and hit.projection else None
    measured = [inv(e.high), inv(e.low)]
    return {
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


def _k_of(rec: ArmRecord) -> int | None:
    if rec.strategy.kind == "none":
        return 0
    if rec.strategy.kind == "draft" and rec.strategy.k is not None:
        return rec.strategy.k
    return None


def _k_runs(
    plan: Pairing, cfg: AnalysisConfig, table: RequestTable, data: PilotData
) -> dict[tuple[str, str], list[KRun]]:
    """Per (group, phase), one KRun per run of the main candidate's engine (its plain and
    draft-model arms)."""
    cand = plan.record(plan.candidates[0]) if plan.candidates else None
    if cand is None:
        return {}
    runs_of = {r.run_id: r for r in data.arms if r.engine == cand.engine and _k_of(r) is not None}
    by_run = table.select(np.isin(table.run_id, list(runs_of)))
    by_run = replace(by_run, arm=by_run.run_id)  # one load cell per run
    phases = [replace(p, arm=p.run_id) for p in data.phases if p.run_id in runs_of]
    runs: dict[tuple[str, str], list[KRun]] = {}
    for c in load.load_cells(by_run, phases):
        obj = c.goodput_rps if cfg.tune_k.objective == "goodput" else c.throughput_tokens_s
        if obj is not None:
            failed = c.scheduled - c.counts["ok"]
            k = _k_of(runs_of[c.arm]) or 0
            runs.setdefault((c.task_group, c.phase), []).append(KRun(k, c.arm, obj, failed))
    return runs


def _tune_k(
    plan: Pairing, cfg: AnalysisConfig, table: RequestTable, data: PilotData
) -> tuple[list[KChoice], list[str]]:
    """vLLM's k choice per group and phase (``mechanism.tune_k``), or the note saying why
    there is none (one k ran)."""
    if not plan.candidates or plan.record(plan.candidates[0]) is None:
        return [], []
    runs = _k_runs(plan, cfg, table, data)
    if len({r.k for rs in runs.values() for r in rs}) < 2:
        return [], [
            "k was not tuned: the pilot measured a single k (the method needs several, >= 3 "
            "runs each)"
        ]
    choices = [
        choose_k(rs, cfg.tune_k, task_group=g, phase=p) for (g, p), rs in sorted(runs.items())
    ]
    return choices, []


__all__: Sequence[str] = ["PilotAnalysis", "analyze", "latency_cdf"]
