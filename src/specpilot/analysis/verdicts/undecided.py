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

from specpilot.analysis.comparison.paired import PairedComparison
from specpilot.analysis.verdicts.window import Level
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


def needs(
    clusters: int | None,
    episodes_needed: int | None = None,
    processes_needed: int | None = None,
    estimated: bool = True,
    because: str | None = None,
) -> str:
    """What an undecided cell lacks, in words (the verdict and the report both say it), in
    episodes per level, the unit the pilot repeats, or where those would not do, processes;
    ``estimated`` False: the cell had no estimate at all, ``because`` the estimator's reason
    where more episodes would not give one (one process per arm, say).

    >>> needs(12, episodes_needed=30)
    'about 30 episodes per level would decide it at the effect and spread measured (this cell has 12)'
    >>> needs(5, episodes_needed=14, estimated=False)
    'at least 14 episodes per level would give it an estimate (this cell has 5); whether they decide it depends on the effect and spread they measure'
    >>> needs(12, processes_needed=9)
    'more episodes alone would not decide it: the processes differ, and that spread shrinks only with more of them; about 9 processes per arm (at the episodes each serves now) would'
    """
    if episodes_needed is not None and not estimated:
        return (
            f"at least {episodes_needed} episodes per level would give it an estimate (this "
            f"cell has {clusters}); whether they decide it depends on the effect and spread "
            "they measure"
        )
    if episodes_needed is not None:
        return (
            f"about {episodes_needed} episodes per level would decide it at the effect and "
            f"spread measured (this cell has {clusters})"
        )
    if processes_needed is not None:
        return (
            "more episodes alone would not decide it: the processes differ, and that spread "
            f"shrinks only with more of them; about {processes_needed} processes per arm (at "
            "the episodes each serves now) would"
        )
    if not estimated:
        return because or (
            f"too few pairs in too few episodes for an estimate (this cell has {clusters}): "
            "more requests per level, in more episodes"
        )
    return (
        "no number of episodes decides it at the effect and spread measured (the effect "
        "sits where neither a direction nor the equivalence margin can be shown, or the "
        "processes' spread would need many more of them)"
    )


def undecided_text(mine: Sequence[PairedComparison], planned: int | None = None) -> str:
    """Why no load level was decided, and what a decision would take: how many episodes per
    level, at the effect and spread measured (``planned``: the design's episodes per level)."""
    now = max((c.clusters or 0 for c in mine), default=0)
    more = closest_text(mine, planned, "level")
    held = " per level" if all(c.task_group == "*" for c in mine) else " that held its requests"
    return f"undecided: the pilot could not tell from {now} episodes{held}{more}"


def closest_text(mine: Sequence[PairedComparison], planned: int | None, what: str) -> str:
    """ "; " and what would decide the closest of these undecided cells (the fewest episodes
    per level; where more episodes would not, the fewest processes per arm); ``what`` names
    the cells ("level", "cell")."""
    need_ep = [c for c in mine if c.episodes_needed is not None]
    need_m = [c.processes_needed for c in mine if c.processes_needed is not None]
    if need_ep:
        c = min(need_ep, key=lambda c: c.episodes_needed or 0)
        n = int(c.episodes_needed or 0)
        if c.df is None:  # too few episodes for an estimate at all
            return (
                f"; at least {n} episodes per level would give the closest {what} an estimate"
                f"{rerun(n, planned)}"
            )
        return (
            f"; about {n} episodes per level would decide the closest {what} at the effect and "
            f"spread measured{rerun(n, planned)}{own_text(c)}"
        )
    if need_m:
        return (
            f"; more episodes alone would not decide it (the processes differ), about "
            f"{min(need_m)} processes per arm would decide the closest {what}"
        )
    unfit = [c for c in mine if c.df is None and c.undecided_because]
    if unfit and len(unfit) == len(mine):  # none could be estimated: the estimator says why
        return f"; no {what} could be estimated: {unfit[0].undecided_because}"
    return "; no number of episodes decides it at the effect and spread measured"


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
    if c.episodes_needed is not None and c.df is None:  # too few episodes for an estimate
        n = c.episodes_needed
        return f" (at least {n} episodes per level would give it an estimate{rerun(n, planned)})"
    if c.episodes_needed is not None:
        n = c.episodes_needed
        return f" (about {n} episodes per level would decide it{rerun(n, planned)})"
    if c.processes_needed is not None:
        return f" (about {c.processes_needed} processes per arm would decide it)"
    return ""
