"""The noise this machine has shown, kept between pilots so the planner predicts from it.

After every pilot in the episode design, the components each pooled cell measured (process sd
per arm, episode sd, on how many episodes, processes and pairs per episode:
``analysis.episodes.celltest.episode_noise``) are appended to ``<cache>/noise/measured.jsonl`` under the
machine's key (CPU model, the flags that decide verify cost, logical cores). ``--dry-run``
reads the newest entry for this machine: the planted arm's noise (pure timing: the same
processes, a known stretch) for the planted effect, each candidate arm's own (by name: a
speculative arm varies with its acceptance, which timing noise alone does not show) for that
arm; without an entry it falls back to the stated prior, and says which it used.

    >>> key = machine_key({"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "sse"], "cpu_logical_cores": 2})
    >>> key
    'AMD EPYC | avx2 | 2 cores'
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specpilot import cache_root
from specpilot.analysis.episodes.power import half_width, mde
from specpilot.analysis.episodes.sequential import nominal_alphas
from specpilot.backends.facts import hardware_info

if TYPE_CHECKING:
    from specpilot.pilot.config.file import PilotConfig

KEEP = 200  # entries kept in the file (the oldest dropped)
VERIFY_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")


def noise_file() -> Path:
    return cache_root() / "noise" / "measured.jsonl"


def machine_key(hw: Mapping[str, Any]) -> str:
    flags = [f for f in VERIFY_FLAGS if f in (hw.get("cpu_flags") or [])]
    return (
        f"{hw.get('cpu_model') or 'unknown CPU'} | {'/'.join(flags) or 'no AVX2'} | "
        f"{hw.get('cpu_logical_cores')} cores"
    )


def remember(
    doc: Mapping[str, Any], path: Path | None = None, *, shared: Sequence[str] = ()
) -> int:
    """Append the pooled cells' measured noise of a report document; returns how many cells
    were kept (0: not an episode pilot, or ``shared``: measured on a machine that other work
    loaded unevenly (``analysis.comparison.contention.contended``), whose noise is not this machine's own and
    would mislead the next plan; nothing written)."""
    if shared:
        return 0
    planted = {p["arm"] for p in doc.get("planted") or []}
    cells = [
        {
            "arm": c["candidate_arm"],
            "kind": "planted"
            if c["candidate_arm"] in planted
            else "in_place"
            if c["episode_noise"].get("design") == "in_place"
            else "candidate",
            "phase": c["phase"],
            **c["episode_noise"],
        }
        for c in doc.get("comparisons") or []
        if c.get("task_group") == "*" and c.get("episode_noise")
    ]
    if not cells:
        return 0
    entry = {
        "when_unix": time.time(),
        "machine": machine_key(doc.get("hardware") or {}),
        "pilot": (doc.get("pilot") or {}).get("name"),
        "config_sha256": (doc.get("pilot") or {}).get("config_sha256"),
        "cells": cells,
    }
    path = path or noise_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = path.read_text("utf-8").splitlines() if path.is_file() else []
    lines = [*lines, json.dumps(entry, sort_keys=True)][-KEEP:]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", "utf-8")
    tmp.replace(path)  # a crash mid-write keeps the old file whole
    return len(cells)


LAST = 3  # pilots whose noise the planner pools: one pilot's 14 episodes per level estimate an
# sd to about +-20%, which moves a predicted MDE by as much (seen: 0.66x and 1.81x of the
# achieved with one pilot, AMD EPYC AVX-512 kind, 2026-12-04)


def measured(machine: str, path: Path | None = None, last: int = LAST) -> dict[str, Any] | None:
    """The newest ``last`` entries for ``machine`` as one (their cells together, so
    ``components`` pools them), or None. A line that does not parse is skipped (a file from
    another version is a cache, never an error)."""
    path = path or noise_file()
    if not path.is_file():
        return None
    mine = []
    for line in path.read_text("utf-8").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and e.get("machine") == machine:
            mine.append(e)
    if not mine:
        return None
    used = mine[-max(1, last) :]
    newest = used[-1]
    pilots = (
        f"{len(used)} pilots, newest {newest.get('pilot')}"
        if len(used) > 1
        else newest.get("pilot")
    )
    return {**newest, "pilot": pilots, "cells": [c for e in used for c in e.get("cells", [])]}


def components(
    entry: Mapping[str, Any], arm: str, kind: str, phase: str | None = None
) -> dict[str, float] | None:
    """One arm's noise over the entry's levels (``kind`` planted: any planted arm), or at the
    one load level ``phase``: process sd per arm and episode sd, the root mean square over the
    levels."""
    cells = [
        c
        for c in entry.get("cells", [])
        if c["kind"] == kind
        and (kind == "planted" or c["arm"] == arm)
        and (phase is None or c.get("phase") == phase)
    ]
    if not cells:
        return None

    def rms(xs: list[float]) -> float:
        return math.sqrt(sum(x * x for x in xs) / len(xs))

    return {
        "s_a": rms([c["process_sd"][0] for c in cells]),
        "s_b": rms([c["process_sd"][1] for c in cells]),
        "s_xi": rms([c["episode_sd"] for c in cells]),
        "pairs_per_episode": sum(c["pairs_per_episode"] for c in cells) / len(cells),
    }


# The noise the planner assumes before this machine has measured its own (the AMD EPYC kind,
# 2026-12-03: 8 identical builtin processes rotated over 6 rounds showed no lasting process
# effect, 95% upper bound ~2%, benchmarks/engine_instances.py; the planted arm's episode mean
# log task-time ratio moved 7.6-11% between episodes in two default pilots, a speculative
# arm's 14-17%): process sd per arm and episode-mean sd.
PRIOR_PROCESS_SD, PRIOR_EPISODE_SD = 0.02, 0.10


def _predicted(
    c: Mapping[str, float],
    m: int,
    mb: int,
    e: int,
    alpha: float,
    in_place: bool = False,
    strata_df: int = 0,
) -> dict[str, Any]:
    """The planner's MDE and interval half-width (median, 80th percentile) at noise ``c``
    (``in_place``: both arms on one process per episode, ``analysis.episodes.inplace``; ``strata_df``:
    the task groups' strata in the pooled cell)."""
    args = (c["s_a"], c["s_b"], c["s_xi"], m, mb, e, alpha)
    hw = half_width(*args, in_place=in_place, strata_df=strata_df)
    return {
        "m_base": mb,
        "episode_sd": c["s_xi"],
        "mde": mde(*args, in_place=in_place, strata_df=strata_df),
        "half_width": hw[0],  # median; in 1 pilot of 5 above hw[1]
        "half_width_80": hw[1],
    }


def _arm_prediction(
    entry: Mapping[str, Any] | None,
    arm: str,
    kind: str,
    size: tuple[int, int, float, int],
    phases: Sequence[str],
) -> dict[str, Any]:
    """One arm's predicted MDE and half-width, from this machine's noise (``entry``) or the
    prior, overall and per load level where the machine measured that level; ``size``:
    processes, episodes per level, the deciding alpha, task groups."""
    m, e, alpha, groups = size
    got = components(entry, arm, kind) if entry else None
    c = got or {"s_a": PRIOR_PROCESS_SD, "s_b": PRIOR_PROCESS_SD, "s_xi": PRIOR_EPISODE_SD}
    here = kind == "in_place"
    strata = 0 if kind == "planted" else groups - 1  # the planted arm is not stratified
    row = _predicted(c, m, 0 if kind == "planted" else m, e, alpha, here, strata)  # 0: one pool
    measured_at = {ph: components(entry, arm, kind, ph) if entry else None for ph in phases}
    by_level = {
        ph: _predicted(lc, m, row["m_base"], e, alpha, here, strata)
        for ph, lc in measured_at.items()
        if lc
    }
    return {
        "arm": arm,
        "kind": kind,
        "source": f"measured here ({entry['pilot']})" if got and entry else "prior",
        "process_sd": [c["s_a"], c["s_b"]],
        **{k: v for k, v in row.items() if k != "m_base"},
        "by_level": {
            ph: {k: v for k, v in r.items() if k != "m_base"} for ph, r in by_level.items()
        },
    }


def episode_plan(cfg: PilotConfig) -> dict[str, Any]:
    """The episode design's size and the smallest effect it can detect per pooled load level
    (80% power at the level that decides: the last look's alpha shared by Bonferroni over the
    comparison's cells), if every episode runs (a budget or a look that stops a level ends it
    with fewer), from the noise this machine measured in its last episode pilot
    (``pilot.plan.noise``), else from the stated prior."""
    ep = cfg.episodes
    m, e = ep.processes, ep.per_level
    wl = cfg.workload_config()
    groups = len(wl.groups) or 1
    phases = [p.name for p in wl.phases]
    levels = len(phases) or 1
    # a pooled cell's share (analysis.comparison.paired._families): half of alpha when there are task
    # groups (the other half is theirs), by Bonferroni over the load levels
    cells = levels
    # with looks, the last one tests at what the interim looks left (analysis.episodes.sequential)
    total = nominal_alphas([*(x / e for x in ep.looks), 1.0], 1.0 - cfg.analysis.ci_level)[-1]
    alpha = total / (2 if groups > 1 else 1) / cells
    s, x = PRIOR_PROCESS_SD, PRIOR_EPISODE_SD
    machine = machine_key(hardware_info())
    entry = measured(machine)
    rows = [("planted", "planted")] if ep.planted else []
    cand = "in_place" if ep.in_place else "candidate"  # the baseline on the candidate's processes
    rows += [(a.name, cand) for a in cfg.arms if a.role in ("speculative", "alternative")]
    size = (m, e, alpha, groups)
    predicted = [_arm_prediction(entry, arm, kind, size, phases) for arm, kind in rows]
    return {
        "processes": m,
        "in_place": ep.in_place,
        "design": ep.design,
        "share_machine": ep.share_machine,
        "per_level": e,
        "planted": ep.planted,
        "looks": [*ep.looks, e],
        "final_alpha": total,
        "budget_min": ep.budget_min,
        "machine": machine,
        "cells": cells,
        "deciding_level": 1.0 - alpha,
        "mde": mde(s, s, x, m, m, e, alpha),
        "mde_with_fingerprint": mde(0.6 * s, 0.6 * s, x, m, m, e, alpha, fingerprint=True),
        "prior": {"process_sd": s, "episode_sd": x},
        "predicted": predicted,
    }


__all__ = [
    "components",
    "episode_plan",
    "machine_key",
    "measured",
    "noise_file",
    "remember",
]
