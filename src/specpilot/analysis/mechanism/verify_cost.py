"""The verify-cost curve, a first-class result: v(n) = median target forward time for n new
tokens per row / for 1 token, per arm, source and batch size (DESIGN.md).

It alone decides whether speculation can pay on a machine: about 1.05 at 2-7 tokens on a CPU
with AVX-512 BF16, 1.4x at 2 and 2.2x at 4 on an AVX2-only CPU, about 1.0 on a GPU. Points come
from the engine's calibration at load (``source="calibration"``) or from a run's rounds
(``source="rounds"``: a speculative round verifies k + 1 tokens, a plain round 1).

    >>> from specpilot.records import VerifyCostPoint as P
    >>> c = verify_curves([P("spec", "calibration", 1, 1, 20, 0.010), P("spec", "calibration", 4, 1, 20, 0.022)])[0]
    >>> round(c.ratio_at(4), 6), c.ratio_at(3)
    (2.2, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specpilot.records import VerifyCostPoint


@dataclass(frozen=True)
class CurvePoint:
    tokens: int
    median_s: float
    ratio: float | None  # median_s / the 1-token reference (None without a reference)
    samples: int
    p10_s: float | None = None
    p90_s: float | None = None


@dataclass(frozen=True)
class VerifyCurve:
    arm: str
    source: str
    batch_size: int
    dtype: str | None
    one_token_s: float | None
    reference: str  # where v(1) came from: "same arm" or "<arm> (<source>)"
    points: tuple[CurvePoint, ...]

    def ratio_at(self, tokens: int) -> float | None:
        for p in self.points:
            if p.tokens == tokens:
                return p.ratio
        return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify_curves(
    points: Sequence[VerifyCostPoint], reference_arm: str | None = None
) -> list[VerifyCurve]:
    """One curve per (arm, source, batch size), sorted by tokens.

    A speculative arm's rounds never verify a single token, so its 1-token reference is taken
    from ``reference_arm`` (the plain baseline on the same engine) at the same batch size and
    source ``rounds``, then from the same arm's calibration; the curve names which it used.
    """
    cells: dict[tuple[str, str, int], list[VerifyCostPoint]] = {}
    for p in points:
        cells.setdefault((p.arm, p.source, p.batch_size), []).append(p)
    out = []
    for (arm, source, bs), pts in sorted(cells.items()):
        pts = sorted(pts, key=lambda p: p.tokens)
        one, ref = _reference(cells, arm, source, bs, reference_arm)
        out.append(
            VerifyCurve(
                arm=arm,
                source=source,
                batch_size=bs,
                dtype=next((p.dtype for p in pts if p.dtype), None),
                one_token_s=one,
                reference=ref,
                points=tuple(
                    CurvePoint(
                        p.tokens,
                        p.median_s,
                        p.median_s / one if one else None,
                        p.samples,
                        p.p10_s,
                        p.p90_s,
                    )
                    for p in pts
                ),
            )
        )
    return out


def _reference(
    cells: dict[tuple[str, str, int], list[VerifyCostPoint]],
    arm: str,
    source: str,
    bs: int,
    reference_arm: str | None,
) -> tuple[float | None, str]:
    candidates = [((arm, source, bs), "same arm")]
    if reference_arm and reference_arm != arm:
        candidates.append(((reference_arm, source, bs), f"{reference_arm} ({source})"))
        candidates.append(((reference_arm, "rounds", bs), f"{reference_arm} (rounds)"))
    candidates.append(((arm, "calibration", bs), f"{arm} (calibration)"))
    for key, label in candidates:
        for p in cells.get(key, []):
            if p.tokens == 1 and p.median_s > 0:
                return p.median_s, label
    return None, "no 1-token measurement"


def curve_for(
    curves: Sequence[VerifyCurve], arm: str, tokens: int, batch_size: float = 1.0
) -> tuple[float | None, str]:
    """v(tokens) for an arm, preferring calibration, at the batch size nearest ``batch_size``.

    Returns (ratio, label of where it came from) or (None, why not).
    """
    usable = [c for c in curves if c.arm == arm and c.ratio_at(tokens) is not None]
    if not usable:
        return None, f"no verify-cost point for {tokens} tokens on {arm}"
    usable.sort(key=lambda c: (c.source != "calibration", abs(c.batch_size - batch_size)))
    best = usable[0]
    if best.source != "calibration" or best.dtype is None:
        return best.ratio_at(tokens), f"{best.source}, batch {best.batch_size}"
    # Every arm on the same target format calibrated the same forward pass at its start: the
    # median over them is steadier than one start's few repeats (seen 2.6x and 3.7x for one
    # point on two arms of one pilot at one thread).
    same = [
        r
        for c in curves
        if c.source == "calibration"
        and c.dtype == best.dtype
        and c.batch_size == best.batch_size
        and (r := c.ratio_at(tokens)) is not None
    ]
    where = f"calibration, batch {best.batch_size}"
    if len(same) > 1:
        where += f", median of {len(same)} arms' calibrations in {best.dtype}"
    return float(np.median(same)), where
