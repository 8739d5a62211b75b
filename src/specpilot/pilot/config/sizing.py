"""What sizes a pilot's load levels before it runs, beyond its file: the command line's
``--budget`` and ``--episodes N`` (each a new ``PilotConfig``, refused by name where the file
cannot take it), and the refusal of a level too thin for the episodes it must be cut into.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from specpilot.pilot.config.file import PilotConfig, PilotConfigError
from specpilot.pilot.config.settings import DrillSettings
from specpilot.pilot.design import LEAST_PER_PROCESS, EpisodeSettings, short_levels
from specpilot.records import MOST_EPISODES
from specpilot.workload import build_schedule

if TYPE_CHECKING:
    from specpilot.workload import Schedule


def with_budget(cfg: PilotConfig, minutes: float) -> PilotConfig:
    """``cfg`` with ``--budget``: episodes that would end the pilot later are dropped."""
    if not minutes > 0:
        raise PilotConfigError(f"--budget {minutes:g}: give the wall minutes, above 0")
    ep = cfg.episodes.model_copy(update={"budget_min": minutes})
    return cfg.model_copy(update={"episodes": ep})


def with_episodes(
    cfg: PilotConfig, n: int, pilot_dir: str | Path, capacity_rps: float | None = None
) -> PilotConfig:
    """``cfg`` with ``--episodes N``: N episodes per level *as long as they are now*. Each
    measured phase's ``duration_s`` is scaled by N / per_level, so every episode keeps its
    seconds of arrivals and its share of requests (``per_level`` alone would cut the same
    phase thinner); a budget grows alike, never shrinks (the starts and checks do not scale);
    the drill keeps the seconds it replays. Refused, naming why, where the phases cannot grow:
    a workload in a file of its own, a phase with no ``duration_s`` or arriving in steps,
    arrivals that end sooner (a trace window), a drill phase shorter than its switch window.
    The looks stay where they are. The scaled config hashes differently: another pilot's
    episodes are not resumed."""
    ep, flag = cfg.episodes, f"--episodes {n}"
    if not isinstance(cfg.workload, dict):
        raise PilotConfigError(
            f"{flag}: the workload is a file of its own ({cfg.workload}), whose phases this "
            "option does not rewrite -> write the workload inline in the pilot file, or set "
            "episodes.per_level and each phase's duration_s there (scaled alike)"
        )
    f = n / ep.per_level
    waits = cfg.workload_config().utilization_phases()
    if ep.fit_budget and waits:  # the fit sizes those levels (pilot.plan.fit): the budget grows
        return _fitted_episodes(cfg, n, f, flag)
    if waits and capacity_rps is None:  # a trace's phases are scaled as played, at their rate
        raise PilotConfigError(
            f"{flag}: phase {waits[0]!r} gives target_utilization, and the seconds its "
            "arrivals play (what N episodes as long as now scale) depend on the capacity "
            "measured at the pilot's start",
            fix="add --capacity RPS (the capacity.probe.sustainable_rps of a pilot of this "
            "file on this machine), or set episodes.per_level and each phase's duration_s in "
            "the file",
        )
    now = build_schedule(
        cfg.workload_config(), base_dir=cfg.workload_dir(pilot_dir), capacity_rps=capacity_rps
    )
    before = {p.name: p.duration_s for p in now.phases}  # as played: a trace may end sooner
    phases = _scaled_phases(cfg.workload.get("phases") or [], before, f, flag)
    out = cfg.model_copy(
        update={
            "episodes": _n_episodes(ep, n, f, flag),
            "workload": {**cfg.workload, "phases": phases},
            "drill": _drill_kept(cfg, before, f, ep.per_level, flag),
        }
    )
    out._workload = None
    wl = out.workload_config()  # parsed now: its errors before anything runs
    got = build_schedule(wl, base_dir=out.workload_dir(pilot_dir), capacity_rps=capacity_rps)
    _arrivals_hold(got, {p["name"]: p["duration_s"] for p in phases}, before, n, ep.per_level)
    return out


def _arrivals_hold(
    got: Schedule, asked: dict[str, float], before: dict[str, float], n: int, per_level: int
) -> None:
    """Refuse a scaled phase whose arrivals end before the seconds ``n`` episodes need."""
    flag = f"--episodes {n}"
    for ph in got.phases:
        want, was = asked.get(ph.name), before.get(ph.name)
        if want is not None and was and ph.duration_s < want - 1e-6:
            raise PilotConfigError(
                f"{flag}: phase {ph.name!r}'s arrivals end at {ph.duration_s:g} s, before the "
                f"{want:g} s that {n} episodes as long as now need (a trace window or steps "
                "that run out)",
                fix=f"widen the phase's arrivals, or ask for fewer episodes (at most "
                f"{int(per_level * ph.duration_s / was)})",
            )


def _n_episodes(ep: EpisodeSettings, n: int, f: float, flag: str) -> EpisodeSettings:
    """``ep`` with N episodes per level and its budget grown by N / per_level (never shrunk:
    the starts and checks do not scale), refused by field where the looks do not fit."""
    update: dict[str, Any] = {"per_level": n}
    if ep.budget_min is not None:
        update["budget_min"] = round(ep.budget_min * max(f, 1.0), 2)
    try:
        return EpisodeSettings.model_validate({**ep.model_dump(), **update})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = f"episodes.{err['loc'][0]}: " if err["loc"] else ""
        raise PilotConfigError(
            f"{flag}: {where}{err.get('ctx', {}).get('error') or err['msg']}",
            fix=f"give N between 2 and {MOST_EPISODES} (episodes.per_level's range) that the "
            "looks fit",
        ) from None


def _fitted_episodes(cfg: PilotConfig, n: int, f: float, flag: str) -> PilotConfig:
    """``--episodes N`` on a pilot whose levels are fitted to its budget: N episodes, the
    budget grown by N / per_level (never shrunk), the levels' lengths left to the fit."""
    return cfg.model_copy(update={"episodes": _n_episodes(cfg.episodes, n, f, flag)})


def _scaled_phases(
    phases: list[dict[str, Any]], before: dict[str, float], f: float, flag: str
) -> list[dict[str, Any]]:
    """The workload's phases (as written) with each ``duration_s`` its length as played times
    ``f``; refused where a phase's length is not its own to scale."""
    out = []
    for ph in phases:
        if (ph.get("arrival") or {}).get("kind") == "steps":
            raise PilotConfigError(
                f"{flag}: phase {ph.get('name')!r} arrives in steps, which end where their own "
                "durations do -> scale its steps and duration_s in the pilot file, with "
                "episodes.per_level"
            )
        if ph.get("duration_s") is None:
            raise PilotConfigError(
                f"{flag}: phase {ph.get('name')!r} takes its length from its arrivals (no "
                "duration_s), so its episodes cannot be kept as long -> give it a duration_s"
            )
        length = before.get(str(ph.get("name")), float(ph["duration_s"]))
        out.append({**ph, "duration_s": round(length * f, 3)})
    return out


def _drill_kept(
    cfg: PilotConfig, before: dict[str, float], f: float, per_level: int, flag: str
) -> DrillSettings:
    """The drill with the seconds it replays kept as now (a phase replayed whole would grow
    with it), refused where the scaled phase ends before the drill's switch back."""
    d = cfg.drill
    length = before.get(d.phase)
    if not d.enabled or length is None:
        return d
    replay = d.replay_s if d.replay_s is not None else length
    need = d.switch_after_s + d.hold_s + d.recovery_window_s
    if length * f < need:
        raise PilotConfigError(
            f"{flag}: the drill's phase {d.phase!r} would last {length * f:g} s, less than the "
            f"drill's switch, hold and recovery ({need:g} s)",
            fix=f"ask for at least {math.ceil(need / length * per_level)} "
            "episodes, or shorten drill.hold_s",
        )
    return d.model_copy(update={"replay_s": replay})


def refuse_short_levels(cfg: PilotConfig, schedule: Schedule) -> list[str]:
    """Raise ``PilotConfigError`` at the first level too thin for the least episode design
    (``pilot.design.short_levels``), before any engine starts and in ``--dry-run``; the notes
    for levels that will run fewer episodes than planned."""
    ep = cfg.episodes
    refused, said = short_levels(schedule, ep.per_level, LEAST_PER_PROCESS * ep.processes)
    if refused:
        names = [ph.name for ph in cfg.workload_config().phases]
        first = refused[0].split("'")[1]
        inline = isinstance(cfg.workload, dict) and first in names
        at = ("workload", "phases", names.index(first), "duration_s") if inline else None
        raise PilotConfigError("; ".join(refused), at=at)
    return said
