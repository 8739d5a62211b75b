"""Where a speculative arm stops beating the baseline over simulated rates (``crossover``):
Poisson arrivals at each rate with the measured prompts, outputs and groups resampled, both
arms' calibrated costs, several seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specpilot.simulate.costs import ArmCosts
from specpilot.simulate.predict import Workload, poisson_workload, run_arm


@dataclass(frozen=True)
class Crossover:
    """Where the candidate's p50 E2E beats the baseline's over the simulated rates. The p50 is
    over every simulated request with the unfinished ones (gave up, timed out) counted as the
    slowest, so an overloaded arm is not judged on its survivors; a rate is "beats" when the
    candidate's is lower in most seeds, "loses" when it is not lower in most, else "mixed".
    ``bracket``: the last rate it beats and the next rate, where it stops (None: it beats at
    every rate, or at none, or the pattern is not one crossing)."""

    baseline: str
    candidate: str
    rates: tuple[float, ...]
    ratio_p50: tuple[tuple[float | None, ...], ...]  # per seed, per rate: candidate / baseline
    outcome: tuple[str, ...]  # per rate: beats | loses | mixed
    bracket: tuple[float, float] | None
    text: str


def _p50_all(e2e: np.ndarray, ok: np.ndarray) -> float:
    """The median request's E2E, an unfinished one counting as inf (no interpolation: inf
    minus inf is not a number)."""
    if not len(e2e):
        return float("nan")
    return float(np.quantile(np.where(ok, e2e, np.inf), 0.5, method="inverted_cdf"))


def crossover(
    base: ArmCosts,
    cand: ArmCosts,
    template: Workload,
    rates: Sequence[float],
    *,
    n: int = 2000,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
) -> Crossover:
    table: list[tuple[float | None, ...]] = []
    for s in seeds:
        row: list[float | None] = []
        for rate in rates:
            w = poisson_workload(template, rate, n, np.random.default_rng([s, int(rate * 1e6)]))
            rb, rc = run_arm(base, w, seed=s), run_arm(cand, w, seed=s)
            b, c = _p50_all(rb.e2e, rb.ok), _p50_all(rc.e2e, rc.ok)
            ratio = c / b if np.isfinite(b) and b > 0 else (0.0 if np.isfinite(c) else None)
            row.append(None if ratio is None or not np.isfinite(ratio) else float(ratio))
        table.append(tuple(row))
    outcome = []
    for j in range(len(rates)):
        col = [r[j] for r in table]
        wins = sum(1 for x in col if x is not None and x < 1.0)
        losses = sum(1 for x in col if x is None or x >= 1.0)
        outcome.append(
            "beats" if wins > len(col) / 2 else "loses" if losses > len(col) / 2 else "mixed"
        )
    fmt = lambda xs: ", ".join(f"{x:.3g}" for x in xs)  # noqa: E731
    won = [float(r) for r, o in zip(rates, outcome, strict=True) if o == "beats"]
    lost = [float(r) for r, o in zip(rates, outcome, strict=True) if o == "loses"]
    bracket = None
    k = len(won)
    if 0 < k < len(rates) and outcome[:k] == ["beats"] * k and "beats" not in outcome[k:]:
        bracket = (float(rates[k - 1]), float(rates[k]))  # one crossing: beats below, not above
    head = f"{cand.arm} vs {base.arm} on p50 E2E (unfinished requests counted as slowest; {len(seeds)} seeds)"
    if not won:
        text = f"{head}: it beats the baseline at no simulated rate ({fmt(rates)} req/s)"
    elif not lost and "mixed" not in outcome:
        text = f"{head}: it beats the baseline at every simulated rate ({fmt(rates)} req/s)"
    elif bracket is not None:
        text = (
            f"{head}: it beats the baseline up to {bracket[0]:.3g} req/s and stops between "
            f"{bracket[0]:.3g} and {bracket[1]:.3g} req/s"
        )
    else:
        text = (
            f"{head}: it beats the baseline at {fmt(won)} req/s"
            + (f", not at {fmt(lost)}" if lost else "")
            + (
                f" (mixed over seeds at {fmt([float(r) for r, o in zip(rates, outcome, strict=True) if o == 'mixed'])})"
                if "mixed" in outcome
                else ""
            )
        )
    return Crossover(base.arm, cand.arm, tuple(rates), tuple(table), tuple(outcome), bracket, text)
