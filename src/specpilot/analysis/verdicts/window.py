"""Where speculation pays along the load axis: one function for the verdict's window
(``analysis.verdicts.decision``) and the capacity section's crossover (``analysis.verdict.crossover``),
so the two can never tell a reader different things.

Each load level (a phase at its offered rate) is one of: *pays* (decided faster, and the
equal-budget alternative not faster there), *does not pay* (decided slower, no difference
inside the margin, or the alternative better) or *not measured* (undecided: too few pairs or
an interval neither beyond 0 nor inside the margin). A not-measured level decides nothing and
breaks no run.

    >>> w = load_window([("off", 0.3, PAYS), ("mid", 0.8, NOT_MEASURED), ("peak", 1.4, NOT_PAYING)])
    >>> w.pays_up_to_rps, w.stops_at_rps, w.windows
    (0.3, 1.4, ('off',))
    >>> w.summary
    'pays at 0.3 req/s, not at 1.4; not measured between'
    >>> load_window([("off", 0.3, NOT_MEASURED)]).summary
    'undecided at every measured load (0.3 req/s)'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PAYS, NOT_PAYING, NOT_MEASURED = "pays", "does not pay", "not measured"
Level = tuple[str, float, str]  # (phase, offered rate, PAYS | NOT_PAYING | NOT_MEASURED)


def level_status(outcome: str, alternative_outcome: str | None = None) -> str:
    """A load level's status from the candidate's outcome against the baseline and, where
    measured, against the equal-budget alternative (its "slower": the alternative is faster)."""
    if outcome == "insufficient":
        return NOT_MEASURED
    if outcome == "faster" and alternative_outcome != "slower":
        return PAYS
    return NOT_PAYING


@dataclass(frozen=True)
class Window:
    levels: tuple[Level, ...]  # by offered rate
    windows: tuple[str, ...]  # the phases where it pays
    pays_up_to_rps: float | None  # the last paying rate below stops_at_rps (or the highest)
    stops_at_rps: float | None  # the first decided not-paying rate above the lowest paying one
    summary: str

    @property
    def everywhere(self) -> bool:
        return bool(self.levels) and all(lv[2] == PAYS for lv in self.levels)

    @property
    def undecided(self) -> bool:
        return all(lv[2] == NOT_MEASURED for lv in self.levels)  # none at all: undecided


def load_window(levels: Sequence[Level]) -> Window:
    """The paying window along the load axis (module docstring)."""
    lv = tuple(sorted(levels, key=lambda x: (x[1], x[0])))
    pays = [x for x in lv if x[2] == PAYS]
    windows = tuple(x[0] for x in pays)
    if not lv:
        return Window(lv, (), None, None, "no load level measured")
    rates = f"{_rate(lv[0][1])}" if len(lv) == 1 else f"{_rate(lv[0][1])} to {_rate(lv[-1][1])}"
    if all(x[2] == NOT_MEASURED for x in lv):
        return Window(lv, (), None, None, f"undecided at every measured load ({rates})")
    if not pays:
        open_ = [x[0] for x in lv if x[2] == NOT_MEASURED]
        return Window(
            lv,
            (),
            None,
            None,
            f"does not pay at any decided load ({rates})"
            + (f"; undecided in {', '.join(open_)}" if open_ else ""),
        )
    if len(pays) == len(lv):
        return Window(lv, windows, pays[-1][1], None, f"pays at every measured load ({rates})")
    stop = next((x for x in lv if x[2] == NOT_PAYING and x[1] > pays[0][1]), None)
    if stop is None:
        open_ = [x[0] for x in lv if x[2] != PAYS]
        return Window(
            lv,
            windows,
            pays[-1][1],
            None,
            f"pays in {', '.join(windows)}; "
            + ("undecided" if all(x[2] == NOT_MEASURED for x in lv if x[2] != PAYS) else "not")
            + f" in {', '.join(open_)}",
        )
    up_to = max(x[1] for x in pays if x[1] < stop[1])
    return Window(
        lv,
        windows,
        up_to,
        stop[1],
        f"pays at {up_to:.3g} req/s, not at {stop[1]:.3g}; not measured between",
    )


def _rate(x: float) -> str:
    return f"{x:.3g} req/s"
