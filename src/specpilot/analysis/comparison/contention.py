"""Which measured phases shared the machine unevenly: the cores that processes outside the pilot
used and the CPU time the hypervisor stole, per phase record (``backends.facts.cpu_sample``),
against the phases each is compared with. A verdict names such a phase and stays a pilot
hypothesis; the simulator's gate names the phase its calibration cannot carry to; the planner
does not keep such a pilot's noise (``pilot.plan.noise``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# a phase with this much more beside it than the least loaded of the phases it is compared
# with was measured on a machine shared unevenly
CONTENDED_CORES = 0.25  # mean cores used by processes outside the pilot
CONTENDED_STEAL = 0.05  # share of the machine's time the hypervisor gave to other tenants


class _Phase(Protocol):
    @property
    def arm(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def warmup(self) -> bool: ...
    @property
    def other_cpu_cores(self) -> float | None: ...
    @property
    def steal_fraction(self) -> float | None: ...


def contended(
    phases: Sequence[_Phase], arms: Sequence[str], across: str = "arms"
) -> tuple[str, ...]:
    """The measured phases of ``arms`` that shared the machine more than the phases they are
    compared with: ``across="arms"`` (a verdict) the other arms' runs of the same phase, where
    load that hit one arm's run is drift the episodes' balanced order did not spread;
    ``across="phases"`` (a simulation) the same arm's other phases, where the calibration's
    speed and the predicted phase's would differ. A machine loaded evenly is not named (the
    A/A control measures that). An arm whose several processes (runs) shared the machine at
    one phase is named once, by its most loaded run.

        >>> from types import SimpleNamespace as P
        >>> ph = [P(arm=a, phase="peak", warmup=False, other_cpu_cores=c, steal_fraction=0.01)
        ...       for a, c in (("b", 0.9), ("s", 0.05))]
        >>> contended(ph, ["b", "s"])
        ('b/peak: 0.90 cores used outside the pilot (0.05 beside s/peak)',)
        >>> contended(ph, ["b", "s"], across="phases")
        ()
    """
    mine = [p for p in phases if p.arm in arms and not p.warmup]
    out: dict[tuple[str, str], tuple[float, str]] = {}  # (arm, phase) -> (excess, text)
    for p in mine:
        group = [q for q in mine if (q.phase == p.phase if across == "arms" else q.arm == p.arm)]
        what, excess = [], 0.0
        for field, limit, num, label in (
            ("other_cpu_cores", CONTENDED_CORES, "{:.2f}", "cores used outside the pilot"),
            ("steal_fraction", CONTENDED_STEAL, "{:.0%}", "of the CPU stolen by the hypervisor"),
        ):
            v = getattr(p, field)
            rest = [
                (getattr(q, field), q)
                for q in group
                if q is not p and (across != "arms" or q.arm != p.arm)
            ]
            rest = [(x, q) for x, q in rest if x is not None]
            if v is None or not rest:
                continue
            low, q = min(rest, key=lambda t: t[0])
            if v - low > limit:
                what.append(f"{num.format(v)} {label} ({num.format(low)} beside {q.arm}/{q.phase})")
                excess = max(excess, (v - low) / limit)
        key = (p.arm, p.phase)
        if what and excess > out.get(key, (0.0, ""))[0]:
            out[key] = (excess, f"{p.arm}/{p.phase}: " + ", ".join(what))
    return tuple(text for _, text in out.values())
