"""The A/A control and the between-run drift it measures (``analysis.paired`` adds the drift to
every candidate comparison's interval).

The control arm is the baseline's exact config run a second time. Its comparison with the
baseline is tested on within-run noise alone: any direction it shows is the machine, not a
configuration, so a directional A/A cell declares the measurement unstable; its pooled change
per phase is the drift estimate.

    >>> from types import SimpleNamespace as C
    >>> d = Drift.from_control([C(task_group="*", log_change=0.03), C(task_group="*", log_change=-0.04)], "a/a")
    >>> round(d.sd, 4), d.df
    (0.0354, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specpilot.analysis.columns import ALL


class _Estimate(Protocol):
    @property
    def estimate(self) -> float | None: ...


class PairedComparison(Protocol):
    """What the A/A summary reads of ``analysis.paired.PairedComparison`` (named here: paired
    imports this module for ``Drift``)."""

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
class Drift:
    """Between-run drift of the machine, as a standard deviation of log task time per cell.

    ``values`` are the A/A control's pooled change per phase (log scale); ``sd`` is their
    root mean square, ``df`` how many there are. Each value is drift *plus* its own within-run
    noise, so this over-states the drift, on purpose: the method-of-moments estimate (less the
    cells' squared standard errors, floored at 0) gave identical arms a direction in 6% of 200
    synthetic pilots at 25% per-request noise, above the nominal 5%; this one in 0.5%
    (``tests/test_aa_calibration.py``). Longer phases shrink the over-statement.
    """

    sd: float
    df: int
    source: str
    values: tuple[float, ...] = ()

    @classmethod
    def from_control(cls, aa: Sequence[PairedComparison], source: str) -> Drift | None:
        vals = tuple(
            float(c.log_change) for c in aa if c.task_group == ALL and c.log_change is not None
        )
        if not vals:
            return None
        return cls(float(np.sqrt(np.mean(np.square(vals)))), len(vals), source, vals)


@dataclass(frozen=True)
class AAControl:
    """The control arm against the baseline: same config twice, so any direction is drift."""

    baseline_arm: str
    control_arm: str
    cells: int
    directional: tuple[str, ...]  # "phase/group: +3.1% (slower)" of each directional cell
    largest: float | None  # the largest |task-time change| of a pooled cell
    drift: Drift | None
    drift_added: bool = True  # False: the episode design, whose units carry the variance

    @property
    def stable(self) -> bool:
        return not self.directional

    @property
    def persistent(self) -> bool:
        """The control differed from the baseline the same way in every phase (two or more,
        some cell directional): two engine processes of one config that differ for their whole
        life, not a machine drifting over time (the interleaved order alternates from phase to
        phase, so time drift changes sign). Seen on the AMD EPYC AVX-512 BF16 kind,
        2026-12-02: one default pilot's control ran 14.5-18.4% faster than its baseline in all
        three phases (the next pilot's: -1.3%, +2.0%, +9.6%), and four identical builtin
        engines ran up to 6% apart, each steadily (``benchmarks/engine_instances.py``)."""
        v = self.drift.values if self.drift is not None else ()
        return (
            bool(self.directional)
            and len(v) >= 2
            and (all(x > 0 for x in v) or all(x < 0 for x in v))
        )

    @property
    def text(self) -> str:
        d = self.drift
        drift = (
            "processes and episodes are the units of every interval (no drift term added)"
            if not self.drift_added
            else f"between-run drift sd {d.sd:.1%} (from {d.df} phases) is added to every interval"
            if d is not None
            else "no drift estimate (no pooled A/A cell)"
        )
        head = f"A/A control ({self.control_arm} vs {self.baseline_arm}, the same config twice): "
        if self.stable:
            big = f"; largest pooled change {self.largest:+.1%}" if self.largest is not None else ""
            return head + f"no directional cell of {self.cells}{big}; {drift}"
        return (
            head
            + f"{len(self.directional)} of {self.cells} cells directional ("
            + "; ".join(self.directional[:4])
            + (f"; {len(self.directional) - 4} more" if len(self.directional) > 4 else "")
            + f"): the measurement is unstable; {drift}"
            + (
                "; the same sign in every phase: two engines of one config that differ for "
                "their whole life (not drift over time), a difference every compared pair of "
                "engines can carry; with episodes.processes: N each arm runs on N engines "
                "and the difference is drawn N times"
                if self.persistent
                else ""
            )
        )


def aa_control(aa: Sequence[PairedComparison], baseline: str, control: str) -> AAControl:
    """The A/A result from the control-vs-baseline comparisons (within-run noise only)."""
    directional = tuple(
        f"{c.phase}/{c.task_group}: {c.task_rel_change.estimate:+.1%} ({c.outcome})"
        for c in aa
        if c.outcome in ("faster", "slower") and c.task_rel_change.estimate is not None
    )
    pooled = [c.task_rel_change.estimate for c in aa if c.task_group == ALL]
    largest = max((x for x in pooled if x is not None), key=abs, default=None)
    drift = Drift.from_control(aa, f"A/A control {control} vs {baseline}")
    return AAControl(baseline, control, len(aa), directional, largest, drift)
