"""The A/A control: the baseline's exact config compared with the baseline, as a candidate is.

Its arm is a second copy of the baseline on processes of its own (``role: control``), or the
planted arm less its known dilation (``analysis.verdicts.planted.as_aa``). Either way its comparison is
estimated like every candidate's, by processes and episodes, and any direction it shows is the
measurement, not a configuration: a directional A/A cell declares the measurement unstable and
keeps the verdict a hypothesis.

    >>> from types import SimpleNamespace as C
    >>> iv = C(estimate=0.03)
    >>> cells = [C(phase=p, task_group="*", outcome="no_difference", log_change=0.03,
    ...            task_rel_change=iv) for p in ("off_peak", "peak")]
    >>> aa_control(cells, "base", "ctl").text
    'A/A control (ctl vs base, the same config twice): no directional cell of 2; largest pooled change +3.0%; processes and episodes are the units of every interval'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from specpilot.analysis.base.columns import ALL


class _Estimate(Protocol):
    @property
    def estimate(self) -> float | None: ...


class PairedComparison(Protocol):
    """What the A/A summary reads of ``analysis.comparison.paired.PairedComparison``."""

    @property
    def phase(self) -> str: ...
    @property
    def task_group(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def log_change(self) -> float | None: ...
    @property
    def task_rel_change(self) -> _Estimate: ...


@dataclass(frozen=True)
class AAControl:
    """The control arm against the baseline: same config twice, so any direction is the
    measurement's."""

    baseline_arm: str
    control_arm: str
    cells: int
    directional: tuple[str, ...]  # "phase/group: +3.1% (slower)" of each directional cell
    largest: float | None  # the largest |task-time change| of a pooled cell
    pooled: tuple[float, ...] = ()  # each level's pooled log change
    pooled_outcomes: tuple[str, ...] = ()  # and its outcome (faster, slower, ...)
    # report.json's keys of the retired busy-period design, which added the A/A's spread to
    # every interval as drift: processes and episodes carry it now
    drift: None = None
    drift_added: bool = False

    @property
    def stable(self) -> bool:
        return not self.directional

    @property
    def persistent(self) -> bool:
        """The control differed from the baseline the same way at every level (two or more,
        each level's pooled cell directional, all one way): engine processes of one config
        that differ for their whole life. Seen on the AMD EPYC AVX-512 BF16 kind, 2026-12-02: one default pilot's control
        ran 14.5-18.4% faster than its baseline in all three phases (the next pilot's: -1.3%,
        +2.0%, +9.6%), and four identical builtin engines ran up to 6% apart, each steadily
        (``benchmarks/engine_instances.py``)."""
        v = self.pooled_outcomes
        return len(v) >= 2 and len(set(v)) == 1 and v[0] in ("faster", "slower")

    @property
    def text(self) -> str:
        units = "processes and episodes are the units of every interval"
        head = f"A/A control ({self.control_arm} vs {self.baseline_arm}, the same config twice): "
        if self.stable:
            big = f"; largest pooled change {self.largest:+.1%}" if self.largest is not None else ""
            return head + f"no directional cell of {self.cells}{big}; {units}"
        return (
            head
            + f"{len(self.directional)} of {self.cells} cells directional ("
            + "; ".join(self.directional[:4])
            + (f"; {len(self.directional) - 4} more" if len(self.directional) > 4 else "")
            + f"): the measurement is unstable; {units}"
            + (
                "; the same sign at every level: engines of one config that differ for their "
                "whole life, a difference every compared pair of engines can carry; with more "
                "episodes.processes each arm runs on more engines and the difference is drawn "
                "more times"
                if self.persistent
                else ""
            )
        )


def aa_control(aa: Sequence[PairedComparison], baseline: str, control: str) -> AAControl:
    """The A/A result from the control-vs-baseline comparisons."""
    directional = tuple(
        f"{c.phase}/{c.task_group}: {c.task_rel_change.estimate:+.1%} ({c.outcome})"
        for c in aa
        if c.outcome in ("faster", "slower") and c.task_rel_change.estimate is not None
    )
    pooled = [c for c in aa if c.task_group == ALL]
    est = [c.task_rel_change.estimate for c in pooled]
    largest = max((x for x in est if x is not None), key=abs, default=None)
    logs = tuple(float(c.log_change) for c in pooled if c.log_change is not None)
    outcomes = tuple(c.outcome for c in pooled)
    return AAControl(baseline, control, len(aa), directional, largest, logs, outcomes)


__all__ = ["AAControl", "aa_control"]
