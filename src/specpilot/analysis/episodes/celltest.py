"""One cell's test result (``analysis.comparison.paired``): the candidate's effect estimated by processes
and episodes (in place ``analysis.episodes.inplace``, one pool ``analysis.episodes.onepool``, two pools
``analysis.episodes.episode_effect``), beside the pairs' own on-time test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specpilot.analysis.base import stats
from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.episodes.estimate import EpisodeEstimate, episode_effect
from specpilot.analysis.episodes.inplace import switch_effect
from specpilot.analysis.episodes.onepool import pool_effect
from specpilot.errors import ConfigError
from specpilot.records import ArmRecord


@dataclass(frozen=True)
class CellTest:
    n: int
    log_change: float | None
    se_w: float | None
    se: float | None
    df: float | None
    p: float
    min_p: float
    p_on: float
    min_p_on: float
    on_slower: bool
    sd: float | None  # per pair, times the square root of the episodes' design effect
    clusters: int
    p_design: float | None = None  # the episode design's permutation test over processes
    processes: str = ""  # the episode design's estimate in words (components, fingerprint)
    undecided: str | None = None  # why the cell cannot be decided whatever its p-value
    # the episode design's measured noise: process sd (candidate, baseline), episode sd,
    # episodes, processes (candidate, baseline), pairs per episode (``episode_noise``)
    noise: dict[str, Any] | None = None
    # where the estimate could not be fitted for want of episodes: the fewest in the cell that
    # would fit it (``_fitted``)
    min_episodes: int | None = None


MIN_RESIDUAL_DF = 3  # fewer: the episode noise's own estimate is too unstable to test on


def episode_test(
    t: RequestTable,
    b: np.ndarray,
    c: np.ndarray,
    episodes: np.ndarray,
    base: CellTest,
    facts: tuple[Mapping[str, float], Mapping[str, str]],
    level: float,
    strata: np.ndarray | None = None,
    pool: bool = True,
) -> CellTest:
    """``base`` (what the pairs alone say: ``comparison.pairs.pairs_test``) with the task-time test
    replaced by the process-and-episode estimate; ``facts``: each run's log fingerprint and
    the run whose process it reaches (``physical_of``). Where both arms of every episode ran
    on the same process (switched in place), each process's offset cancels and how processes
    respond to the switch is their component (``analysis.episodes.inplace``); where the cell cannot be
    estimated by processes (one per arm, too few episodes) it is undecided, and says why. ``strata``: each pair's task group in
    a pooled cell: d relative to its group's mean (``analysis.base.stats.stratify``)."""
    fingerprints, physical = facts
    ok, raw = task_log_ratios(t, b, c)
    if not np.any(ok):
        return base
    d, lost = stats.stratify(raw, None if strata is None else strata[ok])
    pair_sd = stats.within_sd(d, episodes[ok])
    phys_c = [physical.get(r, r) for r in t.run_id[c][ok]]
    phys_b = [physical.get(r, r) for r in t.run_id[b][ok]]
    if phys_c == phys_b:  # switched in place: each process's offset cancels in its episodes
        ids = np.unique(phys_c, return_inverse=True)[1]
        return _fitted(
            base,
            lost,
            lambda: switch_effect(d, episodes[ok], ids, level=level, strata_df=lost, pool=pool),
            pair_sd,
        )
    base_pool = {physical.get(r, r) for r in t.run_id[t.arm == t.arm[b[0]]].astype(str)}
    if set(phys_c) <= base_pool:
        # the planted arm: the baseline arm's processes, crossed (analysis.episodes.onepool). Not
        # stratified by group: a dilation of every latency by 1 + f moves each group's log
        # ratio alike, so the strata would only take G - 1 of its 6-10 df
        ids = np.unique(np.r_[phys_c, phys_b], return_inverse=True)[1]
        c_ids, b_ids = ids[: len(phys_c)], ids[len(phys_c) :]
        return _fitted(
            base, 0, lambda: pool_effect(raw, episodes[ok], c_ids, b_ids, level=level), pair_sd
        )
    runs = (t.run_id[c][ok].astype(str), t.run_id[b][ok].astype(str))
    return _fitted(
        base,
        lost,
        lambda: _two_pools(d, episodes[ok], runs, fingerprints, level, lost, pool),
        pair_sd,
    )


def _two_pools(
    d: np.ndarray,
    episodes: np.ndarray,
    runs: tuple[np.ndarray, np.ndarray],
    fingerprints: Mapping[str, float],
    level: float,
    lost: int,
    pool: bool,
) -> EpisodeEstimate:
    """Each arm on processes of its own (``estimate.episode_effect``); ``runs``: each pair's
    candidate and baseline run, the fingerprints used only where every run has one."""
    cand_runs, cand = np.unique(runs[0], return_inverse=True)
    base_runs, bas = np.unique(runs[1], return_inverse=True)
    fp_c = {i: fingerprints[r] for i, r in enumerate(cand_runs) if r in fingerprints}
    fp_b = {i: fingerprints[r] for i, r in enumerate(base_runs) if r in fingerprints}
    full = len(fp_c) == len(cand_runs) and len(fp_b) == len(base_runs)
    return episode_effect(
        d,
        episodes,
        cand,
        bas,
        cand_fp=fp_c if full else None,
        base_fp=fp_b if full else None,
        level=level,
        strata_df=lost,
        pool=pool,
    )


def task_log_ratios(t: RequestTable, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which pairs have both task times (model call plus client stages), and their log ratio."""
    stages = sum(t.client_stages.values(), np.zeros(len(t)))
    tb, tc = t.e2e[b] + stages[b], t.e2e[c] + stages[c]
    ok = np.isfinite(tb) & np.isfinite(tc) & (tb > 0) & (tc > 0)
    return ok, np.log(tc[ok] / tb[ok])


def _fitted(
    base: CellTest, lost: int, fit: Callable[[], EpisodeEstimate], pair_sd: float | None = None
) -> CellTest:
    """``base`` with its task-time test replaced by ``fit``'s estimate; undecided, saying why,
    where it cannot be fitted or leaves the episode noise too few degrees of freedom.
    ``lost``: the df the task-group strata took; ``pair_sd``: the pairs' spread inside their
    episodes (``stats.within_sd``, kept in the noise for ``analysis.verdicts.planted.request_spread``)."""
    try:
        est = fit()
    except ConfigError as exc:
        why = f"not estimable by processes and episodes: {exc}" + (
            f" ({exc.fix})" if exc.fix else ""
        )
        return dataclasses.replace(base, processes=why, undecided=why)
    spent = est.m_cand if est.one_pool else est.m_cand + est.m_base - 1
    resid = est.n_episodes - spent - lost
    if resid < MIN_RESIDUAL_DF:
        why = (
            f"{est.n_episodes} episodes, less {spent} for the mean and the process offsets"
            f"{f' and {lost} for the task groups' if lost else ''}, leave "
            f"{max(resid, 0)} degrees of freedom for the episode noise; a decision needs at least "
            f"{spent + lost + MIN_RESIDUAL_DF} episodes in the cell"
        )
        return dataclasses.replace(
            base, processes=est.text, undecided=why, min_episodes=spent + lost + MIN_RESIDUAL_DF
        )
    return dataclasses.replace(
        base,
        log_change=est.estimate,
        se_w=est.se,
        se=est.se,
        df=est.df,
        p=est.p_model,
        min_p=0.0,
        clusters=est.n_episodes,
        p_design=est.p_design,
        processes=est.text,
        noise={**episode_noise(est), "strata_df": lost, "pair_sd": pair_sd},
    )


def episode_noise(est: EpisodeEstimate) -> dict[str, Any]:
    """What the planner needs to predict the next pilot's power on this machine
    (``pilot.plan.noise``): the components as measured, and the design they were measured on."""
    return {
        "process_sd": [est.s_a, est.s_b],
        "episode_sd": est.s_xi,
        "episodes": est.n_episodes,
        "processes": [est.m_cand, est.m_base],
        "pairs_per_episode": est.n_pairs / max(est.n_episodes, 1),
        "se": est.se,
        "df": est.df,
        "design": "in_place" if est.in_place else "one_pool" if est.one_pool else "two_pools",
    }


def process_floor(noise: Mapping[str, Any] | None) -> float:
    """The part of a cell's variance (log scale) that more episodes on the same processes do
    not shrink: each kept process component over its processes (s_a^2 / m_c + s_b^2 / m_b; in
    place the response to the switch, s_u^2 / m). None in one pool, whose offsets are fitted.

        >>> round(process_floor({"process_sd": [0.1, 0.0], "processes": [4, 4], "design": "in_place"}), 6)
        0.0025
    """
    if not noise or noise.get("design") == "one_pool":
        return 0.0
    (s_a, s_b), (m_c, m_b) = noise["process_sd"], noise["processes"]
    return float(s_a) ** 2 / max(int(m_c), 1) + float(s_b) ** 2 / max(int(m_b), 1)


def fingerprints_of(arms: Sequence[ArmRecord]) -> dict[str, float]:
    """Each process's log plain decode time per token (``pilot.run.fingerprint``, in its run's
    manifest), where it was measured with speculation off (``plain``): only those compare
    across arms."""
    out = {}
    for r in arms:
        fp = (r.manifest or {}).get("fingerprint") or {}
        x = fp.get("decode_s_per_token")
        if x and fp.get("plain"):
            out[r.run_id] = float(np.log(x))
    for run, of in physical_of(arms).items():  # planted / in place: their process's
        if of != run and of in out:
            out[run] = out[of]
    return out


def physical_of(arms: Sequence[ArmRecord]) -> dict[str, str]:
    """The run whose engine process each run reached: itself, or for the planted arm and an arm
    switched off in place, the run named in its manifest (followed to the process: the planted
    arm of an ``episodes.in_place`` pilot reaches the baseline, which reaches a speculative
    process)."""
    out = {}
    for r in arms:
        m = r.manifest or {}
        of = (m.get("planted") or {}).get("of_run") or (m.get("within") or {}).get("of_run")
        out[r.run_id] = str(of) if of else r.run_id
    return {run: _follow(out, run) for run in out}


def _follow(of: dict[str, str], run: str) -> str:
    seen = {run}
    while of.get(run, run) not in seen:  # a run reaching a run that reaches another: its process
        run = of[run]
        seen.add(run)
    return run
