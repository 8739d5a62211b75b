"""The episode design: engine processes and episodes as the units of evidence (``episodes:`` in
a pilot file), made into one record before anything runs.

On these machines two processes of one config differ 7-20% for their whole life (where their
memory landed), and requests queued together move together: one process per arm is one sample
of the process effect however many requests it serves. So each compared arm is served by
``processes`` engine processes, all started before the first measured episode, and each
measured phase (a load level) is cut into ``per_level`` **episodes**: consecutive slices of its
schedule (the same arrival offsets and prompts on every arm), each replayed on every arm in
turn and drained to idle before the next, so nothing carries over. In episode e the arms run
in a seeded balanced order (each arm first equally often, ``arm_orders``) and each arm is
served by the process the crossed assignment gives (every candidate process meets every
baseline process; ``crossed``). A ``planted`` slowdown arm reaches the baseline's processes
through a proxy that dilates every latency by exactly 1 + f (``loadgen.dilate``): the pilot
must find it, or it cannot claim a direction at that level.

The design (which process serves which episode, in which order) is ``design_record``: stored
with the schedule in the pilot file, executed by ``pilot.run.episode_run`` and read by the
analysis, which never re-derives it from timestamps.

    >>> from specpilot.workload.schedule import PhaseInfo, Schedule
    >>> from specpilot.records import ScheduledRequest as R
    >>> reqs = [R(i, i * 1.0, "peak", "g", "p", [], 4) for i in range(6)]
    >>> s = Schedule("w", 0, "", [PhaseInfo("peak", 0.0, 6.0, 6, {}, {})], {}, {}, reqs)
    >>> e = split_schedule(s, 3)
    >>> [(p.name, p.duration_s, p.requests) for p in e.phases]
    [('peak~01', 2.0, 2), ('peak~02', 2.0, 2), ('peak~03', 2.0, 2)]
    >>> [(r.phase, r.send_t) for r in e.requests[2:4]]
    [('peak~02', 0.0), ('peak~02', 1.0)]
    >>> arm_orders(["base", "cand"], 4, seed=0)  # each block of two episodes runs both orders
    [['base', 'cand'], ['cand', 'base'], ['base', 'cand'], ['cand', 'base']]
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import Field, model_validator

from specpilot.backends.adapters import adapter_of
from specpilot.records import EPISODE_SEP as SEP
from specpilot.records import MOST_EPISODES, ScheduledRequest, level_of
from specpilot.validation import StrictModel
from specpilot.workload.schedule import PhaseInfo, Schedule

PLANTED = "planted"  # the planted arm's name and role
LEAST_PER_PROCESS = 2  # episodes each process serves before a look, and that a budget keeps
WITHIN = "within"  # the role of a speculative arm's own processes with speculation off
K0 = "-k0"  # its name: the speculative arm's + this


def within_arm(speculative: str) -> str:
    return speculative + K0


class EpisodeSettings(StrictModel):
    """``episodes:`` in a pilot file: the episode design (module docstring)."""

    per_level: int = Field(
        8, ge=2, le=MOST_EPISODES, description="episodes each measured phase is cut into"
    )
    processes: int = Field(
        3, ge=1, le=16, description="engine processes per compared arm, all up at once"
    )
    planted: float | None = Field(
        0.15,
        gt=0,
        le=2.0,
        description="a planted slowdown of this size (0.15: every latency x1.15) through the "
        "baseline's processes, which the pilot must find; null: none",
    )
    within: bool = True
    """a builtin speculative arm also replayed on its own processes with speculation switched
    off at run time (arm ``<name>-k0``): the process effect cancels in that contrast"""
    in_place: bool = False
    """the baseline served by the speculative arm's processes with speculation switched off
    at run time (engines that switch in place: the builtin server), so the two arms of every
    episode run on one process and its offset cancels (``analysis.episodes.inplace``); the baseline
    starts no processes of its own, and ``within`` has nothing left to add"""
    design: Literal["turns", "mirrored"] = "turns"
    """``turns``: each episode replayed on every arm in turn (the balanced order); ``mirrored``:
    on every arm at once, each scheduled request sent at the same instant to one process of each
    arm (``pilot.config.mirrored`` says where it may run). Not the default: on this project's
    validation it was narrower and found the planted slowdown more often, but showed one
    directional A/A cell of 18 where turn-taking showed none (docs/METHOD.md, "Mirrored")"""
    share_machine: bool = False
    """``design: mirrored`` where the arms' processes may share a machine (engines specpilot
    starts without devices of their own, endpoints on one host): they then compete for it, so it
    is refused unless this is set (the pilot's capacity is the machine's, split between arms)"""
    seed: int = 0
    looks: list[int] = Field(
        default_factory=list,
        description="episodes per level after which the pilot looks (analysis.episodes.sequential): a "
        "level decided there gets no more episodes; the last look is at per_level",
    )
    budget_min: float | None = Field(
        None,
        gt=0,
        description="wall minutes for the whole pilot (--budget): episodes that would end it "
        "later are not run, the last first; null: no budget",
    )
    fit_budget: bool = False
    """the levels given as ``target_utilization`` take the length ``budget_min`` holds at the
    capacity measured (``pilot.plan.fit``): each at least ``per_level`` requests, each phase's
    ``duration_s`` its most; the same experiment on a slow CPU and a GPU, with the requests
    (and so the power) the machine affords in the budget"""

    @model_validator(mode="after")
    def _looks(self) -> EpisodeSettings:
        if self.fit_budget and self.budget_min is None:
            raise ValueError(
                "episodes.fit_budget: the levels are fitted to a budget, and none is set -> add "
                "episodes.budget_min (wall minutes), or remove fit_budget"
            )
        at = self.looks
        if any(b <= a for a, b in itertools.pairwise(at)):
            raise ValueError(f"episodes.looks {at}: list them in increasing order")
        low = LEAST_PER_PROCESS * self.processes
        bad = [x for x in at if not low <= x < self.per_level]
        if bad and low >= self.per_level:
            raise ValueError(
                f"episodes.looks {at}: no look fits {self.per_level} episodes per level on "
                f"{self.processes} processes (a look needs every process to have served 2 "
                f"episodes) -> raise per_level above {low}, or remove episodes.looks"
            )
        if bad:
            raise ValueError(
                f"episodes.looks {at}: a look needs every process to have served 2 episodes "
                f"and must come before the last episode -> each between {low} and "
                f"{self.per_level - 1} (2 x processes, per_level - 1)"
            )
        return self


def split_schedule(schedule: Schedule, per_level: int) -> Schedule:
    """Each measured phase as ``per_level`` consecutive episodes cut at its widest gaps
    (``_parts``; episode phases ``level~01`` ...; a level of fewer requests runs one episode
    per request).
    Requests keep their index (so ids stay unique) and their gaps; each episode's send times are
    re-based to its first arrival: the engine is drained and idle when an episode starts, so the
    silence before its first request measures nothing (at 0.3 of capacity it was most of an
    episode). An episode's ``duration_s`` is its share of the level's time (from its first
    arrival to the next episode's; the first's from the level's start), so the shares sum to
    the level and its offered rate is the level's. The warm-up phase is kept as it is."""
    phases: list[PhaseInfo] = []
    requests = []
    start = 0.0
    for p in schedule.phases:
        mine = sorted((r for r in schedule.requests if r.phase == p.name), key=lambda r: r.send_t)
        if p.warmup:
            phases.append(dataclasses.replace(p, start_s=start))
            requests += mine
            start += p.duration_s
            continue
        parts = _parts(mine, per_level)
        edges = [0.0] + [q[0].send_t for q in parts[1:]]
        edges.append(max(p.duration_s, mine[-1].send_t) if mine else p.duration_s)
        for k, part in enumerate(parts):
            name = f"{p.name}{SEP}{k + 1:02d}"
            share = max(edges[k + 1] - edges[k], 1e-6)
            phases.append(
                dataclasses.replace(
                    p, name=name, start_s=start, duration_s=share, requests=len(part)
                )
            )
            first = part[0].send_t
            requests += [dataclasses.replace(r, phase=name, send_t=r.send_t - first) for r in part]
            start += share
    return dataclasses.replace(schedule, phases=phases, requests=requests)


def _parts(reqs: Sequence[ScheduledRequest], n: int) -> list[list[ScheduledRequest]]:
    """``reqs`` (in send order) in ``n`` consecutive runs cut at the ``n - 1`` widest gaps
    between arrivals (one run a request where there are fewer than ``n``). An episode drains
    to idle before the next, so a cut removes whatever queue the next request would have met:
    at the widest gaps that is least (at 0.3 of capacity the engine is idle at every one of
    them), and their silence, which would idle inside an episode, is not played at all. A cut
    that would leave a run under half its even share is passed over; equal gaps are cut
    nearest the even shares."""
    size = len(reqs)
    n = min(n, size)
    if n <= 1:
        return [list(reqs)] if reqs else []
    least = max(1, size // (2 * n))
    even = [k * size / n for k in range(1, n)]
    gaps = [
        (reqs[i + 1].send_t - reqs[i].send_t, -min(abs(i + 1 - e) for e in even), i)
        for i in range(size - 1)
    ]
    cuts: list[int] = []  # a cut after index i
    for _gap, _near, i in sorted(gaps, reverse=True):
        left = max((c for c in cuts if c < i), default=-1)
        right = min((c for c in cuts if c > i), default=size - 1)
        if i - left >= least and right - i >= least:
            cuts.append(i)
            if len(cuts) == n - 1:
                break
    edges = [-1, *sorted(cuts), size - 1]
    return [list(reqs[a + 1 : b + 1]) for a, b in itertools.pairwise(edges)]


def short_levels(schedule: Schedule, per_level: int, least: int) -> tuple[list[str], list[str]]:
    """The measured phases of ``schedule`` (one level each, before it is cut) too thin for
    their ``per_level`` episodes: (refusals, notes). A level with fewer requests than the
    ``least`` episodes the design needs (2 per process) cannot be cut into them, and is
    refused with the duration or rate that gives every episode one request (a level of 1
    request in 40 s across 10 episodes ran them empty and reported the planted slowdown "not
    found" after 9.5 minutes); one with fewer than ``per_level`` runs one episode per request,
    fewer than planned, and is said.

        >>> from specpilot.workload.schedule import PhaseInfo, Schedule
        >>> s = Schedule("w", 0, "", [PhaseInfo("off", 0.0, 40.0, 1, {}, {})], {}, {}, [])
        >>> print(short_levels(s, 10, 4)[0][0])
        phase 'off': its schedule holds 1 request in 40 s (0.025 req/s), fewer than the 4 episodes the design needs at least, each with a request (10 planned) -> set its duration_s to at least 400 s or its rate to at least 0.25 req/s
    """
    refused, said = [], []
    for p in schedule.phases:
        if p.warmup or p.requests >= per_level:
            continue
        head = (
            f"phase {p.name!r}: its schedule holds {p.requests} request"
            f"{'' if p.requests == 1 else 's'} in {p.duration_s:.0f} s ({p.offered_rate:.3g} "
            "req/s)"
        )
        if p.requests >= least:
            said.append(f"{head} for {per_level} episodes: it runs {p.requests}, one request each")
            continue
        faster = f"its rate to at least {per_level / p.duration_s:.3g} req/s"
        fix = (
            f"duration_s to at least {p.duration_s * per_level / p.requests:.0f} s or {faster}"
            if p.requests
            else faster + " (it drew no request: a longer duration_s alone may not help)"
        )
        refused.append(
            f"{head}, fewer than the {least} episodes the design needs at least, each with a "
            f"request ({per_level} planned) -> set its {fix}"
        )
    return refused, said


def arm_orders(arms: Sequence[str], episodes: int, seed: int) -> list[list[str]]:
    """The order the arms run in, per episode: rows of a Williams design (each arm in each
    position, and right after each other arm, equally often over a cycle; two arms: AB, BA),
    shuffled within each Latin half-cycle, so every arm is first equally often, within one
    for a partial cycle."""
    k = len(arms)
    if k == 0:
        return [[] for _ in range(episodes)]
    first, lo, hi = [0], 1, k - 1  # 0, 1, k-1, 2, k-2, ...
    while len(first) < k:
        first.append(lo)
        lo += 1
        if len(first) < k:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % k for x in first] for i in range(k)]
    halves = [rows] + ([[r[::-1] for r in rows]] if k % 2 else [])  # odd k: mirrored square
    rng = np.random.default_rng([seed, 0xAB8A])
    out: list[list[str]] = []
    while len(out) < episodes:
        for half in halves:
            out += [[arms[j] for j in half[int(i)]] for i in rng.permutation(k)]
    return out[:episodes]


def crossed(episodes: int, m: int, arms: int, seed: int) -> list[list[int]]:
    """Per arm (index 0: the baseline, or in place the speculative arm whose processes the
    baseline runs on) the process serving each episode: the baseline's
    processes in seeded shuffled blocks of ``m`` (each once per block), arm a's process in
    block t the baseline's plus t + a (mod m), so over m blocks every process of every arm
    meets every baseline process, and each serves ``episodes / m`` episodes.

        >>> c = crossed(9, 3, 2, 0)
        >>> sorted(zip(c[1], c[0]))  # every (candidate, baseline) pair once
        [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    """
    rng = np.random.default_rng([seed, 11])
    base: list[int] = []
    while len(base) < episodes:
        base += [int(x) for x in rng.permutation(m)]
    base = base[:episodes]
    return [base] + [[(b + k // m + a) % m for k, b in enumerate(base)] for a in range(1, arms)]


class DesignArm(Protocol):
    """What the design reads of an arm (``pilot.plan.arms.ArmPlan`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def url(self) -> str | None: ...
    @property
    def engine(self) -> str: ...


def design_arms(plans: Sequence[DesignArm], settings: EpisodeSettings) -> list[str]:
    """The arms the design replays: the pilot's own, each builtin speculative arm switched off
    in place (``within``), and the planted arm."""
    arms = [p.name for p in plans]
    if settings.within and not settings.in_place and settings.design != "mirrored":
        arms += [
            within_arm(p.name)
            for p in plans
            if p.role == "speculative" and p.url is None and _in_place(p.engine)
        ]
    return arms + ([PLANTED] if settings.planted else [])


def design_record(
    schedule: Schedule,
    arms: Sequence[str],
    baseline: str,
    processes: int,
    settings: EpisodeSettings,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """The whole design before anything runs: per episode phase, its level, the arm order
    and the process index of each arm (the planted arm reaches the baseline's processes), and
    the looks (``analysis.episodes.sequential``: at which episode counts, the error rate they share; the
    runner adds each look's outcome under ``ran`` and the last under ``final``)."""
    groups = {r.group for r in schedule.requests if not r.warmup}
    levels: dict[str, list[str]] = {}
    for p in schedule.phases:
        if not p.warmup:
            levels.setdefault(level_of(p.name), []).append(p.name)
    # the arm whose processes the others are crossed with: the baseline's, or in place the
    # speculative arm's (the baseline runs on them switched off)
    anchor = in_place_of(arms, baseline) if settings.in_place else baseline
    episodes = _episodes(levels, arms, anchor, baseline, processes, settings)
    return {
        "kind": "episodes",
        "per_level": settings.per_level,
        "processes": processes,
        "planted": settings.planted,
        "seed": settings.seed,
        "baseline": baseline,
        "design": settings.design,
        "share_machine": settings.share_machine,
        "in_place": anchor if settings.in_place else None,
        "strata": max(len(groups) - 1, 0),  # a pooled cell's task-group strata (their df)
        "arms": list(arms),
        "levels": levels,
        "episodes": episodes,
        "looks": {
            "at": [*settings.looks, settings.per_level],
            "alpha": alpha,
            "spending": "O'Brien-Fleming-type (Lan-DeMets), Bonferroni over the looks",
            "budget_min": settings.budget_min,
            "ran": [],
        },
    }


def _episodes(
    levels: dict[str, list[str]],
    arms: Sequence[str],
    anchor: str,
    baseline: str,
    processes: int,
    settings: EpisodeSettings,
) -> dict[str, dict[str, Any]]:
    """Per episode phase: its level, number, arm order and each arm's process."""
    others = [a for a in arms if a not in (anchor, baseline)]
    episodes: dict[str, dict[str, Any]] = {}
    for li, names in enumerate(levels.values()):
        seed = settings.seed + 101 * li
        orders = arm_orders(arms, len(names), seed)
        serve = crossed(len(names), processes, 1 + len(others), seed)
        by_arm = {anchor: serve[0]} | {a: serve[1 + i] for i, a in enumerate(others)}
        by_arm[baseline] = by_arm[anchor]
        for a in others:  # an arm switched off in place runs on its own arm's process
            if a.endswith(K0) and a[: -len(K0)] in by_arm:
                by_arm[a] = by_arm[a[: -len(K0)]]
        if settings.design == "mirrored" and PLANTED in by_arm:  # never the baseline's own
            by_arm[PLANTED] = mirrored_planted(by_arm[baseline], processes)
        for k, name in enumerate(names):
            episodes[name] = {
                "level": level_of(name),
                "episode": k + 1,
                "order": orders[k],
                "process": {a: int(by_arm[a][k]) for a in arms},
            }
    return episodes


def mirrored_planted(base: Sequence[int], m: int) -> list[int]:
    """The baseline process the planted arm reaches in each episode of a mirrored design: never
    the one the baseline itself runs on in that episode (the two run at once), each other one
    in turn, block by block (``m`` episodes a block), so over ``m - 1`` blocks every planted
    process meets every other baseline process.

        >>> mirrored_planted([0, 1, 2, 2, 0, 1], 3)
        [1, 2, 0, 1, 2, 0]
    """
    if m < 2:
        raise ValueError("a mirrored planted arm needs 2 baseline processes or more")
    return [(b + 1 + (k // m) % (m - 1)) % m for k, b in enumerate(base)]


def in_place_of(arms: Sequence[str], baseline: str) -> str:
    """The arm whose processes serve the baseline in place: the one own arm beside it
    (``PilotConfig`` checks that there is exactly one, a speculative arm)."""
    own = [a for a in arms if a not in (baseline, PLANTED) and not a.endswith(K0)]
    if len(own) != 1:
        raise ValueError(f"episodes.in_place needs one speculative arm beside {baseline!r}: {own}")
    return own[0]


def _in_place(engine: str) -> bool:
    """The engine switches speculation off inside a running process (``backends.adapter``)."""
    a = adapter_of(engine)
    return a is not None and a.in_place
