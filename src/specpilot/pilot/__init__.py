"""The pilot (R6, R8, R9): every arm through its load levels in the episode design on one
schedule, quality gates, the rollback drill, then the analysis and the report.

Rooms, each standing only on those below it (``tests/test_layering.py``): ``design`` (the
episode design: its settings, the split into episodes, the balanced orders) under every room,
``config`` (what the pilot file says), ``plan`` (what is decided before running), ``eta``
(what the pilot shows), ``run`` (running it).

The public names, imported on first use (so the other rooms do not load the runner):

    >>> from specpilot.pilot import Pilot, default_pilot_path, load_pilot
    >>> cfg = load_pilot(default_pilot_path(), quick=True)
    >>> Pilot.__name__, cfg.profile, cfg.episodes.processes
    ('Pilot', 'quick', 1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specpilot.pilot.config.file import PilotConfig, default_pilot_path, load_pilot
    from specpilot.pilot.run.rerun import Rerun
    from specpilot.pilot.run.runner import Pilot, PilotResult

_WHERE = {
    "Pilot": "specpilot.pilot.run.runner",
    "PilotResult": "specpilot.pilot.run.runner",
    "Rerun": "specpilot.pilot.run.rerun",  # a finished pilot again, on its schedule
    "PilotConfig": "specpilot.pilot.config.file",
    "load_pilot": "specpilot.pilot.config.file",
    "default_pilot_path": "specpilot.pilot.config.file",
}


def __getattr__(name: str) -> object:  # the names above, typed by their imports
    if name not in _WHERE:
        raise AttributeError(f"module 'specpilot.pilot' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)


__all__ = ["Pilot", "PilotConfig", "PilotResult", "Rerun", "default_pilot_path", "load_pilot"]
