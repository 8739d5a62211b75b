"""The pilot's record in its file: a new one (config, hardware, the schedule with its design and
the capacity probe's figures, the notes on how it was measured), or the one a rerun of the
same config resumes, refused where the schedule or a model changed since it started."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from specpilot import __version__
from specpilot.backends.facts import hardware_facts
from specpilot.pilot.config.file import PilotConfigError
from specpilot.pilot.plan.runplans import target_changed
from specpilot.pilot.run.context import PilotContext
from specpilot.records import PilotRecord
from specpilot.store import Store


def open_pilot(p: PilotContext, store: Store, design: dict[str, Any]) -> PilotRecord:
    """A new pilot record, or the existing one when resuming the same config."""
    sha = p.cfg.sha256()
    existing = store.records("pilots")
    if existing:
        old = existing[0]
        if old.config_sha256 != sha:
            raise PilotConfigError(
                f"{store.path} holds another pilot ({old.name}, config sha256 "
                f"{old.config_sha256[:12]}); this config is {sha[:12]}: choose another --out "
                "to start a new pilot, or rerun the same config to resume"
            )
        changed = p.schedule.change_from(old.schedule) if old.schedule else None
        if changed is not None:
            raise PilotConfigError(
                f"{store.path}: the pilot's schedule changed since it started ({changed}): "
                "a file the workload reads (the workload file, a prompt file, a trace, a "
                "request log) was edited, so a resumed pilot would compare arms on different "
                "traffic; choose "
                "another --out to start anew, or restore the files"
            )
        _check_models_unchanged(p, store)
        p.progress.note(f"resuming pilot {old.pilot_id} from {store.path}")
        return dataclasses.replace(old, status="running")
    pilot = PilotRecord(
        pilot_id=f"{p.cfg.name}-{time.strftime('%Y%m%dT%H%M%S')}",
        name=p.cfg.name,
        config=p.cfg.model_dump(mode="json"),
        config_sha256=sha,
        specpilot_version=__version__,
        created_unix=time.time(),
        hardware=hardware_facts(),
        schedule={
            **p.schedule.to_dict(),
            "design": design,
            **({"capacity": p.capacity} if p.capacity else {}),
            # where the workload's relative paths start: `specpilot rerun` reads them there
            "workload_dir": str(p.gates.base_dir),
        },
        notes=_notes(p),
    )
    store.add_pilot(pilot)
    return pilot


def _notes(p: PilotContext) -> list[str]:
    ep = p.cfg.episodes
    who = (
        f"{ep.processes} speculative engine processes, each serving the baseline with "
        "speculation switched off in place and the speculative arm with it on, so each "
        "episode's two arms share a process"
        if ep.in_place
        else f"{ep.processes} engine process{'es' if ep.processes > 1 else ''} per arm"
    )
    notes = [
        f"measurement design: episodes ({who}, all up at once and fingerprinted; each "
        f"measured phase cut into {ep.per_level} episodes, each replayed on every arm "
        "in a seeded balanced order on the process a crossed assignment gives, drained "
        "before the next"
        + (f"; a planted +{ep.planted:.0%} slowdown arm" if ep.planted else "")
        + ")"
    ]
    if p.cfg.profile == "quick":
        notes.append("quick profile: short phases, few requests per group")
    if not p.cfg.representative_traffic:
        notes.append("synthetic traffic: prompts and arrivals are not the service's own")
    if not any(p.role == "alternative" for p in p.plans):
        notes.append(
            "no equal-budget alternative arm: the verdict cannot say speculation "
            "beats the best other use of the draft's resources"
        )
    return notes


def _check_models_unchanged(p: PilotContext, store: Store) -> None:
    changed = target_changed(store.records("arms"), p.plans)
    if changed:
        raise PilotConfigError(
            f"{store.path}: {changed}: a resumed pilot would compare arms on different "
            "models; choose another --out to start anew, or restore the file"
        )


def stored_capacity(path: Path, config_sha256: str) -> dict[str, Any] | None:
    """The capacity a resumed pilot measured when it started (None: a new pilot)."""
    if not path.is_file():
        return None
    with Store(path) as store:
        old = store.records("pilots")
    if not old or old[0].config_sha256 != config_sha256:
        return None
    return (old[0].schedule or {}).get("capacity")
