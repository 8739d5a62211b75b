"""What a report adopts, read from its document (``report.json``): per candidate arm, the task
groups its verdict switches speculation on for (``ADOPT``), those it adopts only in a load
window (``ADOPT_IN_WINDOWS``: below a rate, or in named phases), the arm as the pilot ran it
(engine, strategy, manifest, validated options from the stored pilot config) and what was not
adopted, with why. Nothing here writes a file.

    >>> doc = {"verdicts": [{"candidate_arm": "spec", "baseline_arm": "base", "verdict": "ADOPT",
    ...     "groups_adopted": ["code"], "groups_in_windows": [], "groups": [
    ...     {"task_group": "code", "verdict": "ADOPT", "window": "pays at every level"},
    ...     {"task_group": "chat", "verdict": "DO_NOT_ADOPT", "bottleneck": "no gain"}]}],
    ...     "arms": [], "pilot": {"config": {}}}
    >>> a = adoptions(doc)[0]
    >>> [s.group for s in a.scopes], a.rejected
    (['code'], (('chat', 'DO_NOT_ADOPT', 'no gain'),))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from specpilot.backends.adapters import adapter_of
from specpilot.validation import StrictModel

ADOPT, WINDOWS = "ADOPT", "ADOPT_IN_WINDOWS"  # analysis.verdicts.decision's words
POOLED = "*"  # the pooled group (analysis.base.columns.ALL): never a scope of its own


@dataclass(frozen=True)
class Scope:
    """One adopted task group. ``verdict`` ADOPT: on at every measured load in
    ``load_range_rps``; ADOPT_IN_WINDOWS: on only below ``below_rps`` (it paid at
    ``pays_up_to_rps``) or in the phases ``phases``."""

    group: str
    verdict: str
    window: str  # the verdict's own words for where it pays
    load_range_rps: tuple[float, float] | None = None
    below_rps: float | None = None
    pays_up_to_rps: float | None = None
    phases: tuple[str, ...] = ()

    @property
    def always(self) -> bool:
        return self.verdict == ADOPT


@dataclass(frozen=True)
class Adoption:
    """A candidate arm with at least one adopted scope, as the pilot ran it."""

    candidate: str
    baseline: str
    engine: str
    summary: str
    scopes: tuple[Scope, ...]
    strategy: Mapping[str, Any] = field(default_factory=dict)  # StrategySpec.to_dict()
    manifest: Mapping[str, Any] = field(default_factory=dict)  # the arm's frozen manifest
    options: StrictModel | None = None  # validated engine options; None: by URL or not stored
    url: str | None = None  # an arm someone else runs: its endpoint
    hypothesis: tuple[str, ...] = ()  # PILOT_HYPOTHESIS reasons (empty: a decision)
    rejected: tuple[tuple[str, str, str], ...] = ()  # (group, verdict, why) not adopted
    groups: tuple[str, ...] = ()  # every group the verdict judged, adopted or not
    model_name: str | None = None  # the model id the pilot sent to this arm (arms[].model_name)

    @property
    def k(self) -> int:
        """Draft tokens per round as measured (the strategy the arm recorded)."""
        return int(self.strategy.get("k") or getattr(self.options, "k", 0) or 0)


@dataclass(frozen=True)
class NotAdopted:
    """A verdict that adopts nothing: the candidate, its verdict and why."""

    candidate: str
    baseline: str
    verdict: str
    summary: str


def adoptions(doc: Mapping[str, Any]) -> list[Adoption]:
    """Every verdict that adopts a scope, one per candidate arm, in the document's order."""
    out = []
    for v in doc.get("verdicts") or []:
        scopes = _scopes(v)
        if not scopes:
            continue
        arm = arm_run(doc, v["candidate_arm"])
        spec = arm_config(doc, v["candidate_arm"])
        groups = [g for g in v.get("groups") or [] if g.get("task_group") != POOLED]
        out.append(
            Adoption(
                candidate=v["candidate_arm"],
                baseline=v["baseline_arm"],
                engine=str(arm.get("engine") or spec.get("engine") or "unknown"),
                summary=str(v.get("summary", "")),
                scopes=scopes,
                strategy=arm.get("strategy") or {},
                manifest=arm.get("manifest") or {},
                options=arm_options(spec, arm),
                url=spec.get("url"),
                hypothesis=tuple(v.get("hypothesis_reasons") or ()),
                rejected=tuple(
                    (g["task_group"], g["verdict"], _why(g))
                    for g in groups
                    if g["verdict"] not in (ADOPT, WINDOWS)
                ),
                groups=tuple(g["task_group"] for g in groups),
                model_name=spec.get("model_name"),
            )
        )
    return out


def not_adopted(doc: Mapping[str, Any]) -> list[NotAdopted]:
    """Every verdict that adopts no scope (the README says why nothing is deployed for it)."""
    return [
        NotAdopted(v["candidate_arm"], v["baseline_arm"], v["verdict"], str(v.get("summary", "")))
        for v in doc.get("verdicts") or []
        if not _scopes(v)
    ]


def _scopes(v: Mapping[str, Any]) -> tuple[Scope, ...]:
    """The verdict's adopted groups (ADOPT first, then in windows), each with its window."""
    by_group = {g["task_group"]: g for g in v.get("groups") or []}
    out = []
    for name in [*(v.get("groups_adopted") or []), *(v.get("groups_in_windows") or [])]:
        g = by_group.get(name, {})
        rng = g.get("load_range_rps")
        out.append(
            Scope(
                group=name,
                verdict=ADOPT if name in (v.get("groups_adopted") or []) else WINDOWS,
                window=str(g.get("window") or ""),
                load_range_rps=(float(rng[0]), float(rng[1])) if rng else None,
                below_rps=g.get("below_rps"),
                pays_up_to_rps=g.get("pays_up_to_rps"),
                phases=tuple(g.get("windows") or ()),
            )
        )
    return tuple(out)


def _why(g: Mapping[str, Any]) -> str:
    return str(g.get("bottleneck") or g.get("window") or "no reason recorded")


def arm_run(doc: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The arm's first run with a manifest (every process of one arm runs one configuration)."""
    runs = [a for a in doc.get("arms") or [] if a.get("arm") == name]
    return next((a for a in runs if a.get("manifest")), runs[0] if runs else {})


def arm_config(doc: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The arm as the stored pilot config gives it (``arms[]``, defaults filled in)."""
    arms: Sequence[Mapping[str, Any]] = ((doc.get("pilot") or {}).get("config") or {}).get(
        "arms"
    ) or []
    return next((a for a in arms if a.get("name") == name), {})


def arm_options(spec: Mapping[str, Any], arm: Mapping[str, Any]) -> StrictModel | None:
    """The engine's validated options, with the changes the pilot derived for this arm
    (``manifest.overrides``, e.g. an alternative's ``max_slots``); None for an arm by URL or
    one whose options the config does not hold."""
    engine = adapter_of(str(spec.get("engine") or arm.get("engine") or ""))
    if engine is None or spec.get("url") is not None or spec.get("options") is None:
        return None
    over = (arm.get("manifest") or {}).get("overrides") or {}
    try:
        return engine.options.model_validate({**spec["options"], **over})
    except ValidationError:  # stored by another version: the README says no launch is written
        return None


__all__ = [
    "ADOPT",
    "WINDOWS",
    "Adoption",
    "NotAdopted",
    "Scope",
    "adoptions",
    "arm_config",
    "arm_options",
    "arm_run",
    "not_adopted",
]
