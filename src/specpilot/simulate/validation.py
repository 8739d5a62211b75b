"""The validation gate (``validate``): calibrate on some of the pilot's phases, replay the others'
measured arrivals, prompts and output lengths through the simulator (``simulate.predict``), and
compare p50 / p99 of E2E and TTFT and the goodput with what was measured. Within ``tolerance``
(15%) on p50 and p99 E2E the arm's simulation is *validated*; otherwise it is reported as not
validated with its misses, and nothing downstream may use it as evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specpilot.analysis.comparison.contention import contended
from specpilot.errors import ConfigError
from specpilot.records import PilotData
from specpilot.simulate.costs import calibrate
from specpilot.simulate.predict import measured, measured_interval, predict

TOLERANCE = 0.15


@dataclass(frozen=True)
class Check:
    phase: str
    metric: str
    measured: float | None
    predicted: float | None
    rel_error: float | None
    gated: bool  # part of the gate (p50 and p99 E2E)
    within: bool | None
    # the measured quantile's own distribution-free 95% interval (``stats.quantile_interval``;
    # None: a side its requests cannot bound); None for goodput
    measured_low: float | None = None
    measured_high: float | None = None

    @property
    def coarse(self) -> bool:
        """The measurement's own interval is wider than the gate on a side: the figure cannot
        tell a prediction within the tolerance from one outside it."""
        m = self.measured
        if not self.metric.endswith(("_p50", "_p99")) or not m:
            return False
        lo, hi = self.measured_low, self.measured_high
        return lo is None or hi is None or lo < m * (1 - TOLERANCE) or hi > m * (1 + TOLERANCE)


@dataclass(frozen=True)
class Validation:
    arm: str
    calibrated_on: tuple[str, ...]
    predicted_on: tuple[str, ...]
    tolerance: float
    checks: tuple[Check, ...]
    validated: bool
    profile: str
    # the A/A control's measured p50 / p99 E2E against the baseline's on the predicted phases:
    # the largest relative difference between identical arms (None: no control in the pilot)
    aa_floor: float | None = None
    # the arm's phases (calibration and predicted) that shared the machine more than the others
    # (analysis.comparison.contention.contended)
    contended: tuple[str, ...] = ()
    # the largest change of the machine's own step time between the calibration phases and a
    # predicted one: every arm's median decode step at batch 1, the median over arms (None:
    # no step cadence in the file); the balanced arm order keeps arms comparable within a phase, not
    # the machine's speed from phase to phase, which a calibration carries over
    phase_speed: float | None = None

    @property
    def text(self) -> str:
        gated = [c for c in self.checks if c.gated and c.rel_error is not None]
        worst = max(gated, key=lambda c: abs(c.rel_error or 0), default=None)
        miss = (
            f"; largest miss {worst.metric} at {worst.phase}: {worst.rel_error:+.0%}"
            if worst
            else ""
        )
        state = "validated" if self.validated else "NOT validated"
        floor = ""
        if self.aa_floor is not None:
            floor = f"; identical arms (A/A) differ by up to {self.aa_floor:.0%} on these figures"
            if self.aa_floor > self.tolerance and self.validated:
                floor += ", more than the gate allows: the agreement may be luck"
            elif self.aa_floor > self.tolerance:
                floor += ", more than the gate allows: this file cannot validate a simulation"
        if self.phase_speed is not None and abs(self.phase_speed) > self.tolerance:
            floor += (
                f"; the machine's step time at batch 1 moved {self.phase_speed:+.0%} between "
                "the calibration and a predicted phase (the median over arms), more than the gate "
                "allows: a miss here is the machine's drift as much as the model's"
            )
        coarse = [c for c in self.checks if c.gated and c.coarse]
        if coarse:
            c = coarse[0]
            hi = "unbounded" if c.measured_high is None else f"{c.measured_high:.3g} s"
            lo = "unbounded" if c.measured_low is None else f"{c.measured_low:.3g} s"
            floor += (
                f"; the measured figure's own 95% interval is wider than the gate on "
                f"{len(coarse)} of {sum(c.gated for c in self.checks)} gated checks (e.g. {c.metric} at {c.phase}: "
                f"{c.measured:.3g} s, {lo} to {hi}): there a pass is weak evidence and a miss "
                "is the measurement's few requests as much as the model"
            )
        shared = f"; measured on a shared machine: {'; '.join(self.contended)}" * bool(
            self.contended
        )
        return (
            f"simulation of {self.arm} {state} (calibrated on {', '.join(self.calibrated_on)}, "
            f"predicting {', '.join(self.predicted_on)}, p50/p99 E2E within "
            f"{self.tolerance:.0%}){miss}{floor}{shared}"
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["text"] = self.text
        return d


def validate(
    data: PilotData,
    arm: str,
    calibrate_on: Sequence[str],
    predict_on: Sequence[str],
    *,
    tolerance: float = TOLERANCE,
    seed: int = 0,
) -> Validation:
    costs = calibrate(data, arm, calibrate_on)
    checks = []
    for phase in predict_on:
        w, meas = measured(data, arm, phase)
        pred = predict(costs, w, seed=seed)
        for metric, gated in (
            ("e2e_p50", True),
            ("e2e_p99", True),
            ("ttft_p50", False),
            ("ttft_p99", False),
            ("goodput", False),
        ):
            m, p = getattr(meas, metric), getattr(pred, metric)
            rel = (p - m) / m if m and p is not None else None
            within = None if rel is None else abs(rel) <= tolerance
            lo, hi = measured_interval(data, arm, phase, metric)
            checks.append(Check(phase, metric, m, p, rel, gated, within, lo, hi))
    gate = [c for c in checks if c.gated]
    ok = bool(gate) and all(c.within for c in gate)
    on = set(calibrate_on) | set(predict_on)
    shared = contended([p for p in data.phases if p.phase in on], [arm], across="phases")
    return Validation(
        arm=arm,
        calibrated_on=tuple(calibrate_on),
        predicted_on=tuple(predict_on),
        tolerance=tolerance,
        checks=tuple(checks),
        validated=ok,
        profile=costs.profile,
        aa_floor=aa_floor(data, predict_on),
        contended=shared,
        phase_speed=phase_speed(data, calibrate_on, predict_on),
    )


SPEED_SAMPLES = 20  # batch-1 steps a phase needs for its median to count (fewer: too noisy)


def phase_speed(
    data: PilotData, calibrate_on: Sequence[str], predict_on: Sequence[str]
) -> float | None:
    """The largest relative change, from the calibration phases to a predicted one, of the
    median over arms of each arm's median decode step at batch 1 (``PilotData.step_cadence``,
    ``SPEED_SAMPLES`` steps or more in both): how much faster or slower the machine itself ran
    (None: no arm has both)."""
    cal, worst = set(calibrate_on), None
    arms = {c.arm for c in data.step_cadence}
    for phase in predict_on:
        ratios = []
        for arm in arms:
            at = {
                c.phase: c.median_s
                for c in data.step_cadence
                if c.arm == arm and c.batch_size == 1 and c.samples >= SPEED_SAMPLES
            }
            base = [at[p] for p in cal if p in at]
            if base and phase in at and min(base) > 0:
                ratios.append(at[phase] / float(np.mean(base)) - 1.0)
        if ratios:
            r = float(np.median(ratios))
            worst = r if worst is None or abs(r) > abs(worst) else worst
    return worst


def aa_floor(data: PilotData, phases: Sequence[str]) -> float | None:
    """The largest relative difference of measured p50 / p99 E2E between the A/A control and
    the baseline (the same configuration twice) on ``phases``: how closely this file can check
    any prediction."""
    roles = {a.role: a.arm for a in data.arms}
    base, ctrl = roles.get("baseline"), roles.get("control")
    if base is None or ctrl is None:
        return None
    worst: float | None = None
    for phase in phases:
        try:
            _, b = measured(data, base, phase)
            _, c = measured(data, ctrl, phase)
        except ConfigError:
            continue
        for m in ("e2e_p50", "e2e_p99"):
            x, y = getattr(b, m), getattr(c, m)
            if x and y is not None:
                d = abs(y - x) / x
                worst = d if worst is None else max(worst, d)
    return worst
