"""The settings an analysis runs with, derived once: the user's ``AnalysisConfig`` with what
the pilot's design record sets (``effective``). The report prints the lines saying what the
design changed and why (``report.json`` ``analysis_settings``).

The design record (``pilot.design.design_record``, stored with the pilot's schedule) is read
here only: its episodes per level, processes per arm, the looks and what they spent, the
planner's prediction and the in-place arm. Where the design took interim looks, the report
tests at the level the looks left (``analysis.episodes.sequential.report_alpha``), and a level
a budget cut below the pool's minimum is tested without pooling the process effect.

    >>> from specpilot.records import PilotRecord
    >>> eff = effective(AnalysisConfig(), Design.of(PilotRecord("p", "demo", {}, "", "0", 0.0)))
    >>> eff.config.ci_level, eff.looks, eff.lines
    (0.95, None, ())
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specpilot.analysis.config import AnalysisConfig
from specpilot.analysis.episodes.sequential import looks_text, report_alpha, thin_levels
from specpilot.records import PilotRecord


@dataclass(frozen=True)
class Design:
    """What the analysis reads of the pilot's design record (empty: a pilot file without one)."""

    per_level: int | None  # episodes planned per load level
    processes: int  # engine processes per arm
    looks: Mapping[str, Any]  # the looks and what each ran ({}: none)
    prediction: Mapping[str, Any] | None  # the planner's prediction (analysis.verdicts.predicted)
    in_place: str | None  # the speculative arm serving the baseline in place (None: not in place)
    mirrored: bool = False  # every arm of an episode at once (episodes.design: mirrored)
    shared: bool = False  # ... on one machine, as the user insisted (episodes.share_machine)

    @classmethod
    def of(cls, pilot: PilotRecord) -> Design:
        d = (pilot.schedule or {}).get("design") or {}
        return cls(
            per_level=int(d["per_level"]) if d.get("per_level") else None,
            processes=int(d.get("processes") or 1),
            looks=d.get("looks") or {},
            prediction=d.get("prediction"),
            in_place=d.get("in_place") or None,
            mirrored=d.get("design") == "mirrored",
            shared=bool(d.get("share_machine")),
        )


@dataclass(frozen=True)
class Effective:
    """The analysis's settings as run: ``config`` is the user's with the design's changes;
    ``looks`` the looks with the levels tested without the pool (None: the design took no
    looks); ``lines`` each change in words, for the report."""

    config: AnalysisConfig
    design: Design
    looks: dict[str, Any] | None
    lines: tuple[str, ...]


def effective(cfg: AnalysisConfig, design: Design) -> Effective:
    """``cfg`` with what ``design`` sets: the last look's level, and pooling off where a
    budget cut a level's episodes below the pool's minimum."""
    alpha = report_alpha(design.looks)
    if alpha is None:
        return Effective(cfg, design, None, ())
    thin = thin_levels(design.looks, design.processes)
    pooling = cfg.episode_pooling and not thin  # the user's "off" stays off
    out = cfg.model_copy(update={"ci_level": 1.0 - alpha, "episode_pooling": pooling})
    lines = []
    if out.ci_level != cfg.ci_level:
        lines.append(
            f"ci_level {out.ci_level:.4g} (given {cfg.ci_level:g}): the level the design's "
            "looks left of the error rate at its last look"
        )
    if out.episode_pooling != cfg.episode_pooling:
        lines.append(
            f"episode pooling off (given on): a budget cut {', '.join(thin)} below the pool's "
            "minimum episodes per process, so the process effect is not pooled across levels"
        )
    looks = dict(design.looks, without_pool=thin)
    return Effective(out, design, dict(looks, lines=looks_text(looks)), tuple(lines))
