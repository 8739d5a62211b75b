"""Sequential looks in the episode design: a load level whose verdict is decided stops receiving
episodes, and the error rate over every look stays at most 1 - ``ci_level``.

**Spending.** The pilot looks after planned numbers of episodes per level (``episodes.looks``,
then ``per_level``; the information fraction t is the look's episodes over ``per_level``). Look
j spends alpha(t_j) - alpha(t_{j-1}) of the Lan-DeMets O'Brien-Fleming-type function
alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)) (Lan & DeMets 1983), and the last look spends
whatever is left, however early a budget ends the pilot (the budget stops on the clock, not on
the comparison; how long episodes take does depend on the latencies measured). Each look tests at its own spend (a Bonferroni split over the looks), so the
error over all looks is at most their sum, alpha, whatever the correlation between looks: the
statistic is a Satterthwaite t over a few processes and episodes, with Holm over the cells at
every look, where the exact group-sequential boundaries (independent increments of one z) do
not hold as such. The price is small because O'Brien-Fleming spends little early: with one
interim look at 8 of 14 episodes, alpha 0.05 is split 0.0095 and 0.0405, and the last interval
is 5-8% wider than at 0.05 (t on 20 to 4 df).

**Interim looks without the sometimes-pool.** At two episodes per process the episode noise
has 1-3 df, the preliminary F test cannot see a process component, and the pooled interval is
too narrow in the tail where an interim look tests (4 + 4 processes, 8 episodes: 2.7% of A/A
intervals exclude 0 at a nominal 0.5%). So interim looks keep every component
(``AnalysisConfig.episode_pooling`` off): valid, and wide, so they decide only large effects (a
speculative arm 1.5-2x slower where verifying k + 1 tokens costs 2x one). The seeded
simulations (``tests/test_sequential.py``: two levels, one cell each, a level stopping when its
interval excludes 0; the all-cells rule, Holm and the budget are not simulated) give the
family's A/A error 4.4% with the looks.

**Stopping.** A level stops receiving episodes when every pooled cell the verdict reads is
decided at the look: the planted effect found, and each candidate faster, slower, or no
different within the equivalence margin. The report shows the last analysis for every level,
at the last look's alpha: for a level stopped earlier a larger alpha only narrows its
intervals, though Holm's family there and the sometimes-pool differ from the look's, so its
reported outcome can differ from the one that stopped it (the look's is in ``ran``). A level a
budget cut below ``POOL_MIN_PER_PROCESS`` episodes per process is tested without the
sometimes-pool at the end too. A pilot interrupted after an interim look is reported at what
the looks left.

    >>> round(spent(0.5, 0.05), 5), spent(1.0, 0.05)
    (0.00557, 0.05)
    >>> [round(a, 4) for a in nominal_alphas([8 / 14, 1.0], 0.05)]
    [0.0095, 0.0405]
    >>> [round(a, 4) for a in nominal_alphas([8 / 14], 0.05)]  # the budget ended it at look 1
    [0.05]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from specpilot.analysis.base.columns import ALL

DECIDED = ("faster", "slower", "no_difference")
POOL_MIN_PER_PROCESS = 3  # fewer episodes per process: no sometimes-pool (module docstring)


def spent(t: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type alpha spent by information fraction ``t``."""
    if t >= 1.0:
        return alpha
    if t <= 0.0:
        return 0.0
    n = NormalDist()
    return 2.0 - 2.0 * n.cdf(n.inv_cdf(1.0 - alpha / 2.0) / math.sqrt(t))


def nominal_alphas(fractions: Sequence[float], alpha: float) -> list[float]:
    """The level each look tests at: the spend between it and the look before; the last look
    spends the rest of ``alpha``."""
    out: list[float] = []
    before = 0.0
    for j, t in enumerate(fractions):
        now = alpha if j == len(fractions) - 1 else spent(t, alpha)
        out.append(max(0.0, now - before))
        before = now
    return out


def interim_alpha(fraction: float, ran: Sequence[Mapping[str, Any]], alpha: float) -> float:
    """The nominal alpha of an interim look at information ``fraction`` after the looks in
    ``ran``: what the spending function allows by then, less what they spent."""
    return max(0.0, spent(fraction, alpha) - sum(float(x["alpha"]) for x in ran))


def final_alpha(interim: Sequence[Mapping[str, Any]], alpha: float) -> float:
    """The last look's nominal alpha: what the interim looks left."""
    used = sum(float(x["alpha"]) for x in interim)
    return max(0.0, alpha - used)


def active(looks: Mapping[str, Any]) -> bool:
    """The pilot had looks to take or episodes to drop (else its one test is at ``ci_level``)."""
    return len(looks.get("at") or []) > 1 or bool(looks.get("ran") or looks.get("skipped"))


def report_alpha(looks: Mapping[str, Any]) -> float | None:
    """The level the report tests at: the last look's alpha, or, for a pilot interrupted
    after an interim look, what the looks run so far left; None: no looks."""
    if not active(looks):
        return None
    final = looks.get("final")
    if final:
        return float(final["alpha"])
    return final_alpha(looks.get("ran") or [], float(looks.get("alpha", 0.05)))


def thin_levels(looks: Mapping[str, Any], processes: int) -> list[str]:
    """Levels that ran fewer than ``POOL_MIN_PER_PROCESS`` episodes per process (a budget cut
    them): there the sometimes-pool is too narrow in the tail, so the report tests without it."""
    got = (looks.get("final") or {}).get("episodes") or {}
    return [lv for lv, n in got.items() if int(n) < POOL_MIN_PER_PROCESS * processes]


@dataclass(frozen=True)
class LevelLook:
    level: str
    decided: bool
    open_cells: list[str] = field(default_factory=list)  # why not: the cells still open


def decided_levels(
    comparisons: Sequence[Any],
    planted: Sequence[Any],
    pairs: Sequence[tuple[str, str]],
    levels: Sequence[str],
) -> list[LevelLook]:
    """Per level, whether every pooled cell the verdict reads is decided: each (baseline,
    candidate) pair's, and the planted effect found (module docstring)."""
    pooled = {
        (c.baseline_arm, c.candidate_arm, c.phase): c.outcome
        for c in comparisons
        if c.task_group == ALL
    }
    out = []
    for level in levels:
        open_cells = [
            f"{cand} {pooled.get((base, cand, level), 'not measured')}"
            for base, cand in pairs
            if pooled.get((base, cand, level)) not in DECIDED
        ]
        open_cells += [
            f"planted +{p.factor:.0%} not found"
            for p in planted
            if p.phase == level and not p.found
        ]
        out.append(LevelLook(level, not open_cells, open_cells))
    return out


def looks_text(looks: Mapping[str, Any]) -> list[str]:
    """The report's lines: each look, what it spent and what it stopped."""
    out = []
    alpha = float(looks.get("alpha", 0.05))
    for x in looks.get("ran", []):
        eps = ", ".join(f"{k} {v}" for k, v in x["episodes"].items())
        closed = ", ".join(x.get("closed", [])) or "none"
        out.append(
            f"look {x['look']} after {eps} episodes: tested at alpha {x['alpha']:.4f} "
            f"(O'Brien-Fleming spending at information {x['fraction']:.2f}); stopped: {closed}"
        )
    final = looks.get("final")
    if final:
        eps = ", ".join(f"{k} {v}" for k, v in final["episodes"].items())
        cut = final.get("not_run") or {}
        why = (
            "; not run: "
            + ", ".join(f"{lv} {n} ({r})" for lv, rs in cut.items() for r, n in rs.items())
            if cut
            else ""
        )
        out.append(
            f"final look after {eps} episodes: tested at alpha {final['alpha']:.4f}, the rest "
            f"of {alpha:.2f} after {len(looks.get('ran', []))} interim look(s){why}"
        )
    elif looks.get("ran"):
        out.append(
            f"no final look (the pilot was interrupted): tested at alpha "
            f"{final_alpha(looks['ran'], alpha):.4f}, what the interim looks left"
        )
    thin = looks.get("without_pool") or []
    if thin:
        out.append(
            f"tested without the sometimes-pool: {', '.join(thin)} ran fewer than "
            f"{POOL_MIN_PER_PROCESS} episodes per process, where it is too narrow in the tail"
        )
    return out
