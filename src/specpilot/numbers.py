"""The one home of the percent formats every floor writes (the analysis's sentences, the
report's tables): a missing or non-finite figure is "n/a", never "nan%" or "inf%".

    >>> pct(0.1234), signed_pct(0.1234), pct(-0.05, 0), signed_pct(None), pct(float("inf"))
    ('12.3%', '+12.3%', '-5%', 'n/a', 'n/a')
"""

from __future__ import annotations

import math

NA = "n/a"


def pct(x: float | None, digits: int = 1) -> str:
    return NA if x is None or not math.isfinite(x) else f"{x:.{digits}%}"


def signed_pct(x: float | None, digits: int = 1) -> str:
    return NA if x is None or not math.isfinite(x) else f"{x:+.{digits}%}"


__all__ = ["NA", "pct", "signed_pct"]
