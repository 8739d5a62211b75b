"""The episode design's looks and budget, as the runner executes them (``analysis.episodes.sequential``
holds the statistics).

The episodes run in **blocks** that end at the looks (``episodes.looks``, then ``per_level``):
block j holds every level's episodes after look j-1 up to look j, the levels interleaved
episode by episode (off_peak~01, peak~01, off_peak~02, ...), so a budget that ends the pilot
early takes episodes from every level alike. After a block with episodes still to run, the
pilot **looks**: the whole analysis over the records so far at the look's nominal level, and a
level whose pooled cells are all decided gets no more episodes. Before every episode the
**budget** (``episodes.budget_min``, ``--budget``) is checked against the time spent plus the
ETA of every step left (an interrupted run's time included): episodes are dropped from the end of the run order until the rest fits,
first those past the first ``least(design)`` of a level (what a pooled cell needs to decide), and
only once the next episode is one of them; where even the least runs past the budget by more than
10% at the costs measured, its last episodes go too (the note says the budget it needs here). The clock stops a
pilot, never the data, so the last look spends what is left of the error rate whenever it
comes. Every look, every episode not run and why, and the last look are written into the
design record as they happen; a resumed pilot keeps them.

    >>> d = {"looks": {"at": [2, 3]}, "levels": {"off": ["off~01", "off~02", "off~03"],
    ...                                          "peak": ["peak~01", "peak~02"]}}
    >>> blocks(d)
    [['off~01', 'peak~01', 'off~02', 'peak~02'], ['off~03']]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from specpilot.analysis.episodes.celltest import MIN_RESIDUAL_DF
from specpilot.analysis.episodes.sequential import decided_levels, final_alpha, interim_alpha
from specpilot.analysis.pilot import analyze
from specpilot.pilot.config.file import PilotConfigError
from specpilot.pilot.design import LEAST_PER_PROCESS
from specpilot.pilot.eta.remaining import Step, eta_s
from specpilot.pilot.run.context import PilotContext

SLACK = 0.10  # the least design may run past the budget by this share before it is cut
BELOW_LEAST = "budget, below the least design"


def blocks(design: dict[str, Any]) -> list[list[str]]:
    """The episode names of each block, in run order (module docstring)."""
    levels: dict[str, list[str]] = design["levels"]
    at = (design.get("looks") or {}).get("at") or [max(map(len, levels.values()), default=0)]
    out, lo = [], 0
    for hi in at:
        out.append([names[k] for k in range(lo, hi) for names in levels.values() if k < len(names)])
        lo = hi
    return out


def least(design: dict[str, Any]) -> int:
    """Episodes per level the budget never drops: each process serves two, and the pooled
    cell keeps ``MIN_RESIDUAL_DF`` for its episode noise after the mean and the process
    offsets (one pool of m in place, m_cand + m_base - 1 for arms on processes of their own)
    and the task groups' strata took theirs; fewer, and it is undecided by construction."""
    m = int(design["processes"])
    fit = m if design.get("in_place") else 2 * m - 1
    return max(LEAST_PER_PROCESS * m, fit + int(design.get("strata") or 0) + MIN_RESIDUAL_DF)


def looks_notes(design: dict[str, Any]) -> list[str]:
    """What the design's looks and size cannot do: a look before ``least`` episodes per level
    cannot stop a level (its pooled cells are undecided by construction there), and a level of
    fewer episodes than that stays undecided."""
    need, per = least(design), int(design["per_level"])
    early = [x for x in (design.get("looks") or {}).get("at", [])[:-1] if x < need]
    out = []
    if per < need:
        out.append(
            f"episodes.per_level {per}: a pooled cell needs {need} episodes per level to leave "
            "its episode noise 3 degrees of freedom after the mean, the process offsets and "
            "the task groups; every level stays undecided -> raise per_level"
        )
    elif early:
        out.append(
            f"episodes.looks {early}: a pooled cell needs {need} episodes per level to decide; "
            "a look before that cannot stop a level and only spends alpha"
        )
    return out


def droppable(design: dict[str, Any]) -> set[str]:
    return {n for names in design["levels"].values() for n in names[least(design) :]}


def check_budget(design: dict[str, Any], plan: Sequence[Step], spent_s: float) -> None:
    """Refuse a budget that cannot hold the pilot's least: every start, the first ``least``
    episodes of each level on every arm, and every step after them (priors where nothing is
    measured yet), past the budget by more than ``SLACK`` (what the run itself allows the
    least design, ``Looks.trim``), naming the smallest budget that does. A slower machine kind
    than the budget was set on (the default's 8.8 min: the AVX2 kind, its first run measuring
    the weight formats for 2.4 min) then runs its least design a little over, not refused."""
    looks = design.get("looks") or {}
    budget = looks.get("budget_min")
    if not budget:
        return
    spent_s += float(looks.get("spent_s") or 0.0)  # an interrupted run's time counts
    drop = droppable(design)
    keep = [s for s in plan if not (s.kind == "load" and s.key.rsplit(":", 1)[-1] in drop)]
    need_s = spent_s + eta_s(keep, {})
    # as the run's own rule (Looks.trim): the least design may run past the budget by SLACK
    if need_s > budget * 60.0 * (1.0 + SLACK):
        smallest = math.ceil(need_s / (1.0 + SLACK) / 6.0) / 10.0
        raise PilotConfigError(
            f"episodes.budget_min {budget:g}: the engine starts, "
            f"{min(least(design), int(design['per_level']))} episodes per "
            f"level on every arm and the checks after them take about {need_s / 60:.1f} min "
            f"here -> set episodes.budget_min (or --budget) to at least {smallest:g}"
        )


class Looks:
    """The looks and the budget of one pilot (module docstring). ``keys_of(name)``: the ETA
    steps of an episode (its load call on each arm), dropped with it."""

    def __init__(
        self, ctx: PilotContext, design: dict[str, Any], keys_of: Callable[[str], list[str]]
    ) -> None:
        self.p = ctx
        self.design = design
        self.lk: dict[str, Any] = design.setdefault("looks", {})
        self.lk.setdefault("alpha", 1.0 - ctx.cfg.analysis.ci_level)
        self.lk.setdefault("ran", [])
        self.skipped: dict[str, str] = self.lk.setdefault("skipped", {})
        self.keys_of = keys_of
        self.before_s = float(self.lk.get("spent_s") or 0.0)  # an interrupted run's time

    def spent_s(self) -> float:
        """Wall seconds of the whole pilot so far, an interrupted run's included."""
        return self.before_s + time.perf_counter() - self.p.started

    def runs(self, name: str) -> bool:
        return name not in self.skipped

    def skip(self, names: Sequence[str], why: str) -> None:
        for n in names:
            self.skipped.setdefault(n, why)
            self.p.progress.clock.drop_steps(self.keys_of(n))
        if names:
            self.save()

    def trim(self, ahead: Sequence[str]) -> None:
        """Before episode ``ahead[0]`` (``ahead``: those not run yet, in run order): when the
        time spent plus the ETA is past the budget, the episodes to drop are the last
        droppable ones whose expected time covers the excess; they are dropped once the next
        episode is among them, so an ETA from priors early on drops nothing too soon. Where
        the least design itself runs past the budget by more than ``SLACK`` at the costs
        measured (a machine slower than the plan), its last episodes go too, the levels
        alike: the budget holds, those levels stay undecided, and the note says the budget
        the least design needs here."""
        budget = self.lk.get("budget_min")
        if not budget or not ahead:
            return
        clock = self.p.progress.clock
        spent, eta = self.spent_s(), clock.eta_s() or 0.0
        excess = spent + eta - budget * 60.0
        drop, tail, below = droppable(self.design), [], []
        left = [n for n in ahead if self.runs(n)]
        for name in reversed([n for n in left if n in drop]):
            if excess <= 0:
                break
            tail.append(name)
            excess -= clock.estimate_s(self.keys_of(name))
        over = excess - SLACK * budget * 60.0
        least_s = spent + eta - sum(clock.estimate_s(self.keys_of(n)) for n in tail)
        # only at costs measured (an episode ran), never a level's first episode
        levels = self.design["levels"].values()
        measured = any(k in clock.done for ns in levels for n in ns for k in self.keys_of(n))
        firsts = {names[0] for names in levels if names}
        least_left = [n for n in left if n not in drop and n not in firsts]
        for name in reversed(least_left if measured else []):
            if over <= 0:
                break
            below.append(name)
            over -= clock.estimate_s(self.keys_of(name))
        if ahead[0] in below:
            self.p.progress.note(
                f"budget {budget:g} min: the least design ({least(self.design)} episodes per "
                f"level) takes about {least_s / 60:.1f} min at the costs measured here; its "
                f"last {len(below)} episodes are dropped to hold the budget, so their levels "
                f"stay undecided -> --budget {math.ceil(least_s / 6.0) / 10.0:g} runs it"
            )
            self.lk["least_needs_min"] = round(least_s / 60.0, 1)
            self.skip(below, BELOW_LEAST)
        if ahead[0] in tail or ahead[0] in below:
            self.skip(tail, "budget")

    def look(self, j: int, done: Sequence[str], ahead: Sequence[str]) -> None:
        """Interim look ``j`` (0-based) over the episodes ``done``: levels decided at its
        nominal level get none of ``ahead``."""
        levels = self.design["levels"]
        closed = {x for r in self.lk["ran"] for x in r.get("closed", [])}
        fraction = self.lk["at"][j] / self.lk["at"][-1]  # of the planned episodes per level
        alpha = interim_alpha(fraction, self.lk["ran"], float(self.lk["alpha"]))
        # without the sometimes-pool: at a few episodes per process it is too narrow in the
        # tail, where an interim look tests (analysis.episodes.episode_effect)
        update = {"ci_level": 1.0 - alpha, "episode_pooling": False}
        cfg = self.p.cfg.analysis.model_copy(update=update)
        a = analyze(self.p.store.read(columns=True), cfg)
        open_levels = [lv for lv in levels if lv not in closed]
        res = decided_levels(a.comparisons, a.planted, list(a.plan.pairs), open_levels)
        now = [r.level for r in res if r.decided]
        self.lk["ran"].append(
            {
                "look": j + 1,
                "fraction": fraction,
                "alpha": alpha,
                "episodes": self.counts(done),
                "open": {r.level: r.open_cells for r in res if not r.decided},
                "closed": now,
            }
        )
        self.p.progress.note(
            f"look {j + 1} at alpha {alpha:.4f}: "
            + (f"decided, no more episodes: {', '.join(now)}" if now else "nothing decided yet")
        )
        self.skip([n for n in ahead if self.level_of(n) in now], "decided")
        self.save()

    def final(self, done: Sequence[str]) -> None:
        not_run: dict[str, dict[str, int]] = {}
        for n, why in self.skipped.items():
            lv = not_run.setdefault(self.level_of(n), {})
            lv[why] = lv.get(why, 0) + 1
        self.lk["final"] = {
            "episodes": self.counts(done),
            "alpha": final_alpha(self.lk["ran"], float(self.lk["alpha"])),
            "not_run": not_run,
            "wall_s": round(self.spent_s(), 1),
        }
        self.save()

    def level_of(self, name: str) -> str:
        return next(lv for lv, names in self.design["levels"].items() if name in names)

    def counts(self, done: Sequence[str]) -> dict[str, int]:
        ran = set(done)
        return {lv: sum(n in ran for n in names) for lv, names in self.design["levels"].items()}

    def save(self) -> None:
        """The design record, as it stands, into the pilot file."""
        import dataclasses

        store = self.p.store
        self.lk["spent_s"] = round(self.spent_s(), 1)
        for rec in store.records("pilots"):
            design = (rec.schedule or {}).get("design")
            if design is not None:
                design["looks"] = self.lk
                store.add_pilot(dataclasses.replace(rec, schedule=rec.schedule))
