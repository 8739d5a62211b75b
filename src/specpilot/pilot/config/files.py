"""The model files a pilot's arms name must exist before anything runs.

A ``target`` (or llama.cpp/vLLM ``model``) or ``draft`` that is not there used to pass the dry
run (every arm missing alike) or read as "arms differ in target" (one arm missing): the arm
would fail only when its engine started. Checked when a pilot file is loaded (each problem at
its line) and again when a run plans its arms (:func:`specpilot.pilot.plan.arms.plan_arms`), so a
config built in code is stopped before engines start too.

    >>> from specpilot.pilot.config.file import parse_pilot
    >>> cfg = parse_pilot({"workload": "w.yaml", "arms": [
    ...     {"name": "b", "role": "baseline", "engine": "builtin", "options": {"target": "/no/m.gguf"}},
    ...     {"name": "s", "role": "speculative", "engine": "builtin",
    ...      "options": {"target": "/no/m.gguf", "draft": "shipped:nope", "k": 3}}]})
    >>> [(m.arm, m.field, m.path) for m in missing_models(cfg)]
    [('b', 'target', '/no/m.gguf'), ('s', 'target', '/no/m.gguf'), ('s', 'draft', 'shipped:nope')]

Paths are read as the engines read them: relative to the directory specpilot runs in. A vLLM or
SGLang ``model`` is checked only when it looks like a path (``/``, ``./``, ``~``, ``.gguf``):
anything else may be a Hugging Face hub id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from specpilot.backends.adapters import adapter_of
from specpilot.pilot.config.options import SHIPPED_DRAFT

if TYPE_CHECKING:
    from specpilot.pilot.config.arms import Arm


class _HasArms(Protocol):
    @property
    def arms(self) -> Sequence[Arm]: ...


_DEFAULT_TARGET = "remove it to use the default target (SmolLM2-135M-Instruct)"


@dataclass(frozen=True)
class MissingModel:
    """One model file an arm names that is not there."""

    arm: str
    index: int  # the arm's position in the pilot's arms
    field: str  # the option naming it: target, model or draft
    path: str
    message: str
    fix: str


def missing_models(cfg: _HasArms) -> list[MissingModel]:
    """Every model file of ``cfg``'s arms that does not exist, in arm order."""
    return [m for i, a in enumerate(cfg.arms) for m in _arm(i, a)]


def missing_model_lines(
    cfg: _HasArms,
    where: str,
    locate: Callable[[tuple[str | int, ...]], str],
    raw_arms: object = None,
) -> list[str]:
    """The lines of one error listing every missing model file at its line (empty: none).
    ``locate``: a field's path to ``FILE:LINE: field``; ``raw_arms``: the file's own ``arms:``
    list, whose order the lines follow (the quick profile's merge may drop arms)."""
    missing = missing_models(cfg)
    if not missing:
        return []
    listed = raw_arms if isinstance(raw_arms, list) else []
    order = [a.get("name") if isinstance(a, dict) else None for a in listed]
    out = [f"{where}: {len(missing)} model file(s) missing"]
    for m in missing:
        index = order.index(m.arm) if m.arm in order else m.index
        out.append(f"  {locate(('arms', index, 'options', m.field))}: {m.message} -> {m.fix}")
    return out


def _arm(i: int, arm: Arm) -> Iterator[MissingModel]:
    o = arm.options
    if arm.url is not None or o is None:  # an endpoint someone else runs
        return
    engine = adapter_of(arm.engine)
    for m in engine.models(o) if engine is not None else []:
        field, value, always = m.field, m.value, m.always_path
        if value is None:
            continue
        problem = (
            _draft(value, always) if field == "draft" else _target(field, value, always, m.hub_ids)
        )
        if problem is not None:
            message, fix = problem
            yield MissingModel(arm.name, i, field, value, f"arm {arm.name!r}: {message}", fix)


def _target(field: str, value: str, always: bool, hub_ids: bool) -> tuple[str, str] | None:
    if not (always or _looks_like_path(value)) or _exists(value):
        return None
    hub = " or a Hugging Face hub id in the local cache" if hub_ids else ""
    return (
        f"{field} {value} does not exist{_relative(value)}",
        f"point {field} at an existing GGUF file or checkpoint directory{hub}, "
        f"or {_DEFAULT_TARGET}",
    )


def _draft(value: str, always: bool) -> tuple[str, str] | None:
    if value.startswith("truncate:"):
        return None  # layers of the target: no file of its own
    if value.startswith("shipped:"):
        name = value.removeprefix("shipped:")
        shipped = shipped_drafts()
        if name in shipped:
            return None
        have = ", ".join(f"shipped:{n}" for n in shipped) or "none installed"
        return f"draft {value}: no shipped draft {name!r}", f"use one of: {have}"
    if not (always or _looks_like_path(value)) or _exists(value):
        return None
    return (
        f"draft {value} does not exist{_relative(value)}",
        f"point draft at an existing draft directory or GGUF file, use the shipped draft "
        f"({SHIPPED_DRAFT}), or set draft: null and k: 0",
    )


def shipped_drafts() -> list[str]:
    """Names of the drafts shipped with the package (``specpilot/data/drafts/NAME``)."""
    root = Path(str(resources.files("specpilot"))) / "data" / "drafts"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "draft.json").is_file())


def _looks_like_path(value: str) -> bool:
    return value.startswith(("/", "./", "../", "~")) or value.endswith(".gguf")


def _exists(value: str) -> bool:
    return Path(value).expanduser().exists()


def _relative(value: str) -> str:
    p = Path(value).expanduser()
    return "" if p.is_absolute() else f" (read from the directory specpilot runs in: {Path.cwd()})"
