"""Paired comparisons of two arms on the same schedule, with tests valid at a pilot's sizes.

Requests pair on (repetition, phase, request_id): the same schedule slot, hence the same
prompt, in both arms (a prompt_id that differs is counted as unmatched, never paired).

**The verdict's measure** is the relative task-time change of a cell (phase x group), task
time = client stages (retrieval, tools) + E2E, what the user waits for. Over the pairs where
both requests ended ok, d_i = log(candidate task time / baseline task time); the estimate is
exp(mean d) - 1 (the geometric mean of the per-request ratios: negative is faster). In a cell
that pools task groups (``*``) each pair's d is taken relative to its own group's mean and that
mean's share added back (``stats.stratify``): the estimate is the same, but the groups' different
effects (speculation can save 20% on code and cost 15% on Chinese prose in one pilot) no
longer count as noise, and the groups' means cost their degrees of freedom.

**Units.** Every pair carries its episode (``analysis.base.fold.episode_key``), and every run the
engine process it reached (``celltest.physical_of``): the cell's effect is estimated by
processes and episodes (``celltest.episode_test``: in place, one pool or two pools), Student's t
on Satterthwaite's df. A pilot whose pairs carry no episodes (the sequential and interleaved
designs, retired in December 2026 with their unit, the busy period) is refused with the fix.

A cell gets a direction ("faster" / "slower") only when (1) it has at least ``min_pairs``
both-ok pairs and its estimator could be fitted with enough degrees of freedom left for the
episode noise, (2) its t-test stays below 1 - level after Holm's adjustment
(``stats.holm_tarone``), and (3) the interval lies beyond ``min_gain`` on that side (the same
margin for both directions). **Multiplicity** (``_families``): the pooled load-level cells
(does it pay at this load?) and the task groups' cells are two families, each given half of
alpha (Bonferroni across them, so the family-wise error stays at alpha; one family when there
is one group): the question every pilot must answer keeps most of its power (at 2 levels and
4 groups, each pooled cell is decided at 98.75% instead of 99.5%), the per-group cells pay. An
undecided cell ("insufficient") says why, and the episodes per level (or processes per arm)
that would decide it at the effect and spread measured.

Failed requests stay in the picture: the on-time rate over *all* pairs is compared by the
exact McNemar test on the discordant pairs, of whole episodes (the sign test of each episode's
net count; in the same Holm family); a candidate significantly less often on time is "slower"
whatever its survivors' speed.

The other intervals (E2E alone, E2E seconds, TTFT, on-time difference) are descriptive: a
paired percentile bootstrap of ratios of sums over the cell's episodes, from
``numpy.random.default_rng([seed, crc32(cell)])`` (cells of more than 1,024 episodes resample
1,024 random buckets of episodes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from specpilot.analysis.base import stats
from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.base.stats import Interval
from specpilot.analysis.comparison.pairs import MeasuredCell, measured_cells
from specpilot.analysis.config import AnalysisConfig
from specpilot.analysis.episodes.celltest import CellTest, process_floor


@dataclass(frozen=True)
class CompareSettings:
    """The thresholds a comparison uses; their one home is ``AnalysisConfig`` (``of``)."""

    resamples: int
    seed: int
    level: float
    min_gain: float
    min_pairs: int
    min_effect: float
    equivalence_margin: float
    pool: bool = True  # the episode estimator's sometimes-pool (AnalysisConfig.episode_pooling)

    @classmethod
    def of(cls, cfg: AnalysisConfig) -> CompareSettings:
        v = cfg.verdict
        return cls(
            resamples=cfg.bootstrap_resamples,
            seed=cfg.seed,
            level=cfg.ci_level,
            min_gain=v.min_e2e_gain,
            min_pairs=v.min_pairs,
            min_effect=v.min_effect,
            equivalence_margin=v.equivalence_margin,
            pool=cfg.episode_pooling,
        )


@dataclass(frozen=True)
class PairedComparison:
    baseline_arm: str
    candidate_arm: str
    phase: str
    task_group: str
    offered_rate: float | None
    pairs: int
    unmatched: int
    both_ok: int
    task_rel_change: Interval  # client stages + E2E: the verdict's measure, deciding interval
    e2e_rel_change: Interval
    e2e_diff_s: Interval
    ttft_rel_change: Interval
    on_time_diff: Interval
    outcome: str  # faster | slower | no_difference | insufficient
    method: str
    log_change: float | None = None  # mean log(candidate / baseline task time), both-ok pairs
    se_within: float | None = None  # of log_change, from the pairs
    drift_sd: float | None = None  # report.json's key, always None: processes carry the drift
    df: float | None = None
    p_value: float | None = None  # the episode estimate's t-test before adjustment
    p_on_time: float | None = None  # exact McNemar on the discordant on-time pairs
    p_adjusted: float | None = None  # Holm across the comparison's cells (the smaller test)
    power: float | None = None  # to detect min_effect at this cell's standard error
    pairs_needed: int | None = None  # both-ok pairs for 80% power at min_effect (None: never)
    clusters: int | None = None  # episodes the both-ok pairs fell in
    min_clusters: int | None = None  # report.json's key, always None (the busy periods' test)
    # the level of task_rel_change: 1 - alpha / K, K the cells tested together (Bonferroni
    # over Tarone's family), so a directional cell's interval excludes zero and the margin
    deciding_level: float | None = None
    equivalence_margin: float | None = None  # no_difference: task_rel_change inside +-this
    # why an undecided ("insufficient") cell is undecided, in words
    undecided_because: str | None = None
    unit: str = "episode"  # what ``clusters`` counts
    # episodes per level that would decide this undecided cell if its estimate and spread
    # stayed as measured (``stats.units_needed``; None: none would); where it could not be
    # estimated for want of episodes, the fewest that would estimate it (``estimated`` False)
    episodes_needed: int | None = None
    # where no number of episodes would (the processes' own spread): processes that would, at
    # the episodes per process of this pilot (``_processes_needed``)
    processes_needed: int | None = None
    # with a planted arm: how far this arm's effect differs between requests, beyond the
    # measurement's spread (``analysis.verdicts.planted.request_spread``; log scale)
    request_sd: float | None = None
    # the episode design: the noise components measured in this cell and the design they were
    # measured on (``analysis.episodes.celltest.episode_noise``; the planner's prior for the next pilot)
    episode_noise: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def method_text(resamples: int, seed: int, level: float) -> str:
    """How the intervals were computed, printed with every comparison table."""
    return (
        "task time: geometric mean of per-pair ratios; per episode the mean log ratio, "
        "fitted with each arm's engine process as a random effect (components by moments, "
        "a process component indistinguishable from episode noise pooled into it, pooled "
        f"cells stratified by task group), Student-t interval at {level:.0%} on "
        "Satterthwaite df; direction only where that t-test is significant after Holm across "
        "cells (the exact test of process labels is reported beside it); no difference only "
        "inside the equivalence margin; on time: exact McNemar of whole episodes; "
        f"E2E/TTFT/on-time intervals: paired percentile bootstrap, {resamples} resamples, "
        f"seed {seed}"
    )


def compare_arms(
    t: RequestTable,
    baseline: str,
    candidate: str,
    settings: CompareSettings,
    *,
    offered_rates: dict[tuple[str, str], float] | None = None,
    fingerprints: Mapping[str, float] | None = None,
    physical: Mapping[str, str] | None = None,
) -> list[PairedComparison]:
    """Per (phase, group) and (phase, ``*``): the candidate against the baseline, paired, by
    processes and episodes (module docstring; ``fingerprints``: log plain decode step per run,
    ``physical``: the run whose process each run reached): each cell measured
    (``pairs.measured_cells``), the multiplicity plan over them (``_families``), each judged
    (``_judged``)."""
    cells = measured_cells(
        t,
        (baseline, candidate),
        (fingerprints or {}, physical or {}),
        seed=settings.seed,
        resamples=settings.resamples,
        level=settings.level,
        pool=settings.pool,
    )
    alpha = 1.0 - settings.level
    adj, deciding_of = _families(cells, alpha, settings.min_pairs)
    context = _Context(
        (baseline, candidate),
        settings,
        method_text(settings.resamples, settings.seed, settings.level),
        _pooled_sd([x.test for x in cells]),
        {x.phase: x.test.clusters for x in cells if x.group == "*"},  # episodes each level ran
        offered_rates or {},
    )
    return [
        _judged(x, (adj.get((i, "task"), 1.0), adj.get((i, "on"), 1.0)), deciding_of[i], context)
        for i, x in enumerate(cells)
    ]


class _Context(NamedTuple):
    """What judging every cell of one pair of arms shares."""

    arms: tuple[str, str]
    settings: CompareSettings
    method: str
    pooled_sd: float | None
    per_level: dict[str, int]
    offered_rates: Mapping[tuple[str, str], float]


def _judged(
    x: MeasuredCell, p: tuple[float, float], deciding: float, ctx: _Context
) -> PairedComparison:
    """The cell's outcome at its adjusted p-values ``p`` (task time, on time) and its deciding
    level, with what an undecided one would need."""
    st, tst = ctx.settings, x.test
    alpha = 1.0 - st.level
    task = _task_interval(tst, deciding)
    outcome, why = _outcome(tst, task, p[0], p[1], alpha, st)
    sd = tst.sd if tst.sd is not None and tst.n >= 3 else ctx.pooled_sd
    family = alpha / (1.0 - deciding)  # the Bonferroni divisor of this row
    eff = float(np.log1p(st.min_effect))
    need_ep, need_m = None, None
    if outcome == "insufficient":
        need_ep = _episodes_needed(tst, deciding, st, ctx.per_level.get(x.phase))
        if need_ep is None and tst.min_episodes:
            need_ep = _scaled(tst.min_episodes, tst.clusters, ctx.per_level.get(x.phase))
        if need_ep is None:
            need_m = _processes_needed(tst, deciding, st)
    n_pairs = stats.pairs_needed(sd, 0.0, eff, alpha / family) if sd is not None else None
    return PairedComparison(
        baseline_arm=ctx.arms[0],
        candidate_arm=ctx.arms[1],
        phase=x.phase,
        task_group=x.group,
        offered_rate=ctx.offered_rates.get((ctx.arms[1], x.phase)),
        pairs=x.pairs,
        unmatched=x.unmatched,
        both_ok=tst.n,
        task_rel_change=task,
        e2e_rel_change=x.intervals[1],
        e2e_diff_s=x.intervals[2],
        ttft_rel_change=x.intervals[3],
        on_time_diff=x.intervals[4],
        outcome=outcome,
        method=ctx.method,
        log_change=tst.log_change,
        se_within=tst.se_w,
        df=tst.df,
        p_value=tst.p if tst.se is not None else None,
        p_on_time=tst.p_on,
        p_adjusted=min(p),
        power=stats.power(eff, tst.se, alpha / family) if tst.se else None,
        pairs_needed=max(st.min_pairs, n_pairs) if n_pairs is not None else None,
        clusters=tst.clusters,
        deciding_level=deciding,
        equivalence_margin=st.equivalence_margin,
        undecided_because=why,
        episodes_needed=need_ep,
        processes_needed=need_m,
        episode_noise=tst.noise,
    )


def _families(
    rows: Sequence[MeasuredCell], alpha: float, min_pairs: int
) -> tuple[dict[tuple[int, str], float], list[float]]:
    """The multiplicity plan (module docstring): two families, the pooled load-level cells (the
    primary question: does it pay at this load) and the task groups' cells, each given half of
    alpha (Bonferroni across the two; one family with all of it when there is one task group).
    Within a family, Holm over Tarone's family of every estimated cell's task-time test (at
    least ``min_pairs`` both-ok pairs, the episode estimate fitted) and every on-time test.
    Returns the adjusted p-values, scaled so that comparing them with ``alpha`` tests at the
    family's share, and each row's deciding level (1 - share / K)."""
    pooled = [i for i, r in enumerate(rows) if r.group == "*"]
    groups = [i for i, r in enumerate(rows) if r.group != "*"]
    n_groups = len({rows[i].group for i in groups})
    families = [pooled, groups] if pooled and n_groups > 1 else [pooled + groups]
    share = alpha / len(families)
    adj: dict[tuple[int, str], float] = {}
    deciding = [1.0 - alpha] * len(rows)
    for fam in families:
        tests = [
            (i, "task") for i in fam if rows[i].test.n >= min_pairs and rows[i].test.se is not None
        ]
        tests += [(i, "on") for i in fam]
        pv = [rows[i].test.p if k == "task" else rows[i].test.p_on for i, k in tests]
        mp = [rows[i].test.min_p if k == "task" else rows[i].test.min_p_on for i, k in tests]
        for key, q in zip(tests, stats.holm_tarone(pv, mp, share), strict=True):
            adj[key] = min(1.0, q * alpha / share)
        level = 1.0 - share / stats.tarone_k(mp, share)  # Bonferroni over Tarone's family
        for i in fam:
            deciding[i] = level
    return adj, deciding


def _episodes_needed(
    x: CellTest, level: float, st: CompareSettings, per_level: int | None
) -> int | None:
    """Episodes per load level that would decide the cell: a task group's cell holds only the
    episodes its requests fell in (``x.clusters`` of the level's ``per_level``), so its count
    is scaled up to the level's."""
    if x.log_change is None or x.se is None or x.df is None or x.clusters < 2:
        return None
    margins = (float(np.log1p(st.min_gain)), float(np.log1p(st.equivalence_margin)))
    floor = process_floor(x.noise)
    n = stats.units_needed(x.log_change, x.se, x.clusters, x.df, level, margins, floor=floor)
    return None if n is None else _scaled(n, x.clusters, per_level)


def _scaled(n: int, held: int, per_level: int | None) -> int:
    """``n`` episodes in a cell that holds ``held`` of its level's ``per_level``, per level."""
    if not per_level or per_level <= held or held < 1:
        return n
    return math.ceil(n * per_level / held)


def _processes_needed(x: CellTest, level: float, st: CompareSettings) -> int | None:
    """Where more episodes alone would not decide the cell (its processes' own components keep
    the interval wide: ``process_floor``), the candidate's processes that would, each serving as
    many episodes as now (every part of the variance then shrinks with them)."""
    if x.log_change is None or x.se is None or x.df is None or not process_floor(x.noise):
        return None
    m = int((x.noise or {}).get("processes", [0])[0])
    if m < 2:
        return None
    margins = (float(np.log1p(st.min_gain)), float(np.log1p(st.equivalence_margin)))
    return stats.units_needed(x.log_change, x.se, m, x.df, level, margins, cap=8)


def _pooled_sd(tests: Sequence[CellTest]) -> float | None:
    """The per-pair sd over the cells that have one (for cells too small to estimate it)."""
    num = sum((x.n - 1) * x.sd**2 for x in tests if x.sd is not None)
    den = sum(x.n - 1 for x in tests if x.sd is not None)
    return float(np.sqrt(num / den)) if den > 0 else None


def _task_interval(x: CellTest, level: float) -> Interval:
    if x.log_change is None:
        return Interval(None, None, None)
    est = float(np.expm1(x.log_change))
    if x.se is None or x.df is None:
        return Interval(est, None, None)
    lo, hi = stats.t_interval(x.log_change, x.se, x.df, level)
    return Interval(est, float(np.expm1(lo)), float(np.expm1(hi)))


def _outcome(
    x: CellTest,
    task: Interval,
    p_task: float,
    p_on: float,
    alpha: float,
    st: CompareSettings,
) -> tuple[str, str | None]:
    """The cell's outcome and, when undecided ("insufficient"), why. A direction needs the
    tests significant and the deciding interval beyond the margin; "no difference" is an
    equivalence claim: the deciding interval inside +-``equivalence_margin``."""
    if p_on < alpha and x.on_slower:
        return "slower", None  # less often on time, whatever the survivors' speed
    if x.n < st.min_pairs:
        return "insufficient", (
            f"{x.n} both-ok pairs in {x.clusters} episodes; a direction needs {st.min_pairs} pairs"
        )
    if x.undecided:
        return "insufficient", x.undecided
    if task.low is None or task.high is None:
        return "insufficient", f"{x.n} both-ok pairs in {x.clusters} episodes gave no interval"
    if p_task < alpha and task.low > st.min_gain:
        return "slower", None
    if p_task < alpha and task.high < -st.min_gain:
        return "faster", None
    eq = st.equivalence_margin
    if -eq < task.low and task.high < eq:
        return "no_difference", None
    if p_task >= alpha and (task.low > 0 or task.high < 0):
        return "insufficient", (
            f"the interval excludes 0 but the test does not after Holm's correction across "
            f"cells (adjusted p {p_task:.3f})"
        )
    return "insufficient", (
        f"neither beyond 0 nor inside the +-{eq:.0%} equivalence margin"
        if eq > 0
        else "not significant, and no equivalence margin is set (verdict.equivalence_margin)"
    )


def comparisons_for(
    t: RequestTable,
    pairs: Sequence[tuple[str, str]],
    settings: CompareSettings,
    *,
    offered_rates: dict[tuple[str, str], float] | None = None,
    fingerprints: Mapping[str, float] | None = None,
    physical: Mapping[str, str] | None = None,
) -> list[PairedComparison]:
    """``compare_arms`` for each (baseline, candidate)."""
    return [
        c
        for base, cand in pairs
        for c in compare_arms(
            t,
            base,
            cand,
            settings,
            offered_rates=offered_rates,
            fingerprints=fingerprints,
            physical=physical,
        )
    ]
