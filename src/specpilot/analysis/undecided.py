"""What a verdict says where the pilot could not tell: why no level (or which level) was
decided, what would decide it (in the episode design: the episodes per level, and how to run
them each as long as now), and how much of the spread is the candidate's own requests
differing from one another, which more requests narrow whatever the machine.

    >>> rerun(40), rerun(12, planned=14)
    (': rerun the pilot with --episodes 40', ' (the pilot planned 14 per level and ran fewer here: its sequential looks say why)')
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specpilot.analysis.paired import PairedComparison
from specpilot.analysis.window import Level
from specpilot.records import MOST_EPISODES

OWN_SHARE = 0.25  # the requests' share of the episodes' variance worth naming


def rerun(n: int, planned: int | None = None) -> str:
    """How to run the ``n`` episodes per level a cell needs, each as long as now; ``planned``:
    the design's episodes per level. Where the level ran fewer than planned (a budget, a look
    that closed it, an interruption) more episodes are not what is missing, and the report's
    sequential looks say which it was."""
    if planned is not None and n <= planned:
        return f" (the pilot planned {planned} per level and ran fewer here: its sequential looks say why)"
    if n > MOST_EPISODES:
        return f"; that is more than one pilot runs ({MOST_EPISODES} per level)"
    return f": rerun the pilot with --episodes {n}"


def request_share(c: PairedComparison) -> float | None:
    """The share of a cell's episode-to-episode variance that its requests differing from one
    another inside an episode make (``request_sd``^2 over the pairs per episode, against the
    episode sd^2); None where the cell has no such figures."""
    noise = c.episode_noise or {}
    sd, per = noise.get("episode_sd"), noise.get("pairs_per_episode")
    if c.request_sd is None or not sd or not per:
        return None
    return min(c.request_sd**2 / float(per) / float(sd) ** 2, 1.0)


def own_text(c: PairedComparison) -> str:
    """The clause naming the candidate's requests' part of the spread, where it is a sizeable
    share (``OWN_SHARE``); "" elsewhere."""
    share = request_share(c)
    total = float((c.episode_noise or {}).get("pair_sd") or 0.0)
    if share is None or share < OWN_SHARE or c.request_sd is None:
        return ""
    meas = math.sqrt(max(total**2 - c.request_sd**2, 0.0))
    return (
        f". About {share:.0%} of the spread between its episodes is its requests differing from "
        f"one another (its pairs spread {total:.0%} inside an episode at {c.phase}, the planted "
        f"arm's, one factor for every request, {meas:.0%}): more requests per level narrow that "
        "part, whatever the machine"
    )


def undecided_text(mine: Sequence[PairedComparison], planned: int | None = None) -> str:
    """Why no load level was decided, and what a decision would take (in the episode design:
    how many episodes per level, at the effect and spread measured; ``planned``: the design's
    episodes per level)."""
    unit = mine[0].unit if mine else "busy period"
    if unit == "episode":
        now = max((c.clusters or 0 for c in mine), default=0)
        need_ep = [c for c in mine if c.episodes_needed is not None]
        need_m = [c.processes_needed for c in mine if c.processes_needed is not None]
        closest = min(need_ep, key=lambda c: c.episodes_needed or 0) if need_ep else None
        more = (
            f"; about {closest.episodes_needed} episodes per level would decide the closest "
            f"level at the effect and spread measured{rerun(closest.episodes_needed, planned)}"
            f"{own_text(closest)}"
            if closest is not None and closest.episodes_needed is not None
            else f"; more episodes alone would not decide it (the processes differ), about "
            f"{min(need_m)} processes per arm would"
            if need_m
            else "; no number of episodes decides it at the effect and spread measured"
        )
        held = " per level" if all(c.task_group == "*" for c in mine) else " that held its requests"
        return f"undecided: the pilot could not tell from {now} episodes{held}{more}"
    need = max((c.pairs_needed or 0 for c in mine), default=0)
    most = max((c.both_ok for c in mine), default=0)
    pairs = "pair" if most == 1 else "pairs"
    periods = max((c.clusters or 0 for c in mine), default=0)
    short = any(
        c.both_ok < (c.pairs_needed or 0) or (c.clusters or 0) < (c.min_clusters or 0) for c in mine
    )
    return (
        "undecided: the pilot could not tell"
        + (
            f" (at most {most} both-ok {pairs} per load level"
            + (f" in at most {periods} busy period{'s' * (periods != 1)}" if periods < most else "")
            + ")"
            if short or not need
            else " (every interval spans both 0 and the equivalence margin)"
        )
        + (f"; a decision needs about {need} both-ok pairs per level" if need else "")
    )


def not_shown(
    comparisons: Sequence[PairedComparison],
    group: str,
    levels: Sequence[Level],
    planted_missed: frozenset[str] = frozenset(),
    planned: int | None = None,
) -> str:
    """Decode gains (or is not split) and no level was decided faster or slower: what each
    level showed, a level still open with what would decide it, so that "do not adopt now"
    never hides one."""
    cells = {c.phase: c for c in comparisons if c.task_group == group}
    parts = []
    for phase, rate, _ in levels:
        c = cells.get(phase)
        at = f"{phase} ({rate:.3g} req/s)"
        if c is None:
            continue
        if phase in planted_missed:
            parts.append(f"not decided at {at} (the planted slowdown was not found there)")
        elif c.outcome == "no_difference":
            margin = (
                f" inside the +-{c.equivalence_margin:.0%} margin" if c.equivalence_margin else ""
            )
            e = c.task_rel_change.estimate
            parts.append(f"no difference at {at}, {'n/a' if e is None else f'{e:+.1%}'}{margin}")
        elif c.outcome == "insufficient":
            parts.append(f"undecided at {at}{_decides(c, planned)}")
    return "the decode gain does not show end to end" + (f": {'; '.join(parts)}" if parts else "")


def _decides(c: PairedComparison, planned: int | None) -> str:
    if c.episodes_needed is not None:
        n = c.episodes_needed
        return f" (about {n} episodes per level would decide it{rerun(n, planned)})"
    if c.processes_needed is not None:
        return f" (about {c.processes_needed} processes per arm would decide it)"
    return ""
