"""The engine's calibration as data: measured formats, the choice rule, and the on-disk cache.

``--dtype auto`` picks the target's weight format by measurement (``engine.calibrate`` runs the
measurements; this module holds the pure parts):

1. every candidate format is compared with the fp32 reference on a fixed set of conversations:
   top-1 agreement (share of positions whose argmax equals fp32's) and mean KL(fp32 || format)
   in nats; a format is *within tolerance* when top-1 >= ``min_top1`` and KL <= ``max_kl``;
2. its forward time is measured at the objective points: (batch, new tokens) for batch 1 and the
   server's batch, and tokens 1 (plain decoding) and k+1 (a verify of k drafts); the objective
   is the sum of those median times. A prefill (batch 1, 64 tokens) is timed as well;
3. among formats within tolerance whose prefill takes at most ``max_prefill_ratio`` (3x) the
   best one's (the prefill guard: time to first token), the fastest objective wins; a format
   within ``margin`` (5%) of the fastest, or within the timings' own noise when that is larger
   (the relative range of the repeated calls, ``FormatResult.noise``), and closer to fp32
   (smaller KL) is preferred: a difference the machine's noise can produce never decides, so
   the choice is the same from run to run on a noisy machine and never trades precision for
   nothing.

The full verify-cost curve (tokens 1..8 at each batch) of the chosen format is recorded. The
draft's format, among those with the target's activation dtype (they share the embedding), is
the one with the best expected speed-up (``choose_draft``): its next-token agreement with the
fp32 target on the same conversations stands in for the acceptance rate, its step time over the
target's for the cost ratio (R3: speed and acceptance together, no separate tolerance).

    >>> a = FormatResult("fp32", top1=1.0, kl=0.0, curve={(1, 1): 0.085, (1, 4): 0.270})
    >>> b = FormatResult("int8-bf16", top1=0.99, kl=0.004, curve={(1, 1): 0.075, (1, 4): 0.093})
    >>> choose_format([a, b], Tolerance(), [(1, 1), (1, 4)])[0]
    'int8-bf16'
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# 2: bf16 runs prepacked oneDNN weights where the CPU has native bf16 (engine.formats)
CALIBRATION_VERSION = 2
MODES = ("auto", "force", "skip")
ENV_MODE = "SPECPILOT_CALIBRATION"

Point = tuple[int, int]  # (batch, new tokens)

# status of a format after choose_format
CHOSEN, ELIGIBLE, OUT_OF_TOLERANCE = "chosen", "eligible", "out_of_tolerance"
PRUNED, UNAVAILABLE, MEASURED, SLOW_PREFILL = "pruned", "unavailable", "measured", "slow_prefill"


@dataclass(frozen=True)
class Tolerance:
    """How far from fp32 a format may be: top-1 agreement and mean KL (nats) per position.

    On the fixed conversations (486 positions of SmolLM2-135M, prefill and few-row decode
    paths) bf16 measured 0.990 / 0.0016, q4-bf16 0.975 / 0.0066, int8-bf16 0.971 / 0.0076,
    int8-fp32 0.977 / 0.0049; a per-row int8 head instead of the GGUF's Q8_0 groups lost 2
    points of top-1, 4-bit groups of the head 10.
    """

    min_top1: float = 0.96
    max_kl: float = 0.02

    def admits(self, top1: float | None, kl: float | None) -> bool:
        return top1 is not None and kl is not None and top1 >= self.min_top1 and kl <= self.max_kl


@dataclass
class FormatResult:
    """One candidate format's measurements for one model (target or draft)."""

    format: str
    top1: float | None = None
    kl: float | None = None
    positions: int = 0
    curve: dict[Point, float] = field(default_factory=dict)  # (batch, tokens) -> median s
    prefill_s: float | None = None  # median s of a (1, 64) prefill, last position's logits
    status: str = MEASURED
    note: str = ""
    noise: float | None = None  # largest (max - min) / median of the repeated calls of a point

    def objective(self, points: Sequence[Point]) -> float | None:
        """Sum of the median times at ``points``; None when one is missing."""
        if not points or any(p not in self.curve for p in points):
            return None
        return sum(self.curve[p] for p in points)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["curve"] = [
            {"batch": b, "tokens": n, "seconds": s} for (b, n), s in sorted(self.curve.items())
        ]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FormatResult:
        curve = {(int(r["batch"]), int(r["tokens"])): float(r["seconds"]) for r in d["curve"]}
        return cls(**{**d, "curve": curve})


def choose_format(
    results: Sequence[FormatResult],
    tolerance: Tolerance,
    points: Sequence[Point],
    margin: float = 0.05,
    max_prefill_ratio: float = 3.0,
    fallback: str = "fp32",
) -> tuple[str, str]:
    """Pick a format (see the module docstring); sets each result's ``status``. -> (name, reason)."""
    timed: list[tuple[float, FormatResult]] = []
    for r in results:
        if r.status in (UNAVAILABLE, PRUNED):
            continue
        obj = r.objective(points)
        if not tolerance.admits(r.top1, r.kl):
            r.status = OUT_OF_TOLERANCE
        elif obj is None:
            r.status, r.note = PRUNED, r.note or "objective points not measured"
        else:
            r.status = ELIGIBLE
            timed.append((obj, r))
    prefills = [r.prefill_s for _, r in timed if r.prefill_s is not None]
    if prefills:
        limit = max_prefill_ratio * min(prefills)
        for _, r in timed:
            if r.prefill_s is not None and r.prefill_s > limit:
                r.status = SLOW_PREFILL
                r.note = f"prefill {r.prefill_s / min(prefills):.1f}x the fastest format's"
        timed = [(o, r) for o, r in timed if r.status != SLOW_PREFILL]
    if not timed:
        return fallback, f"no format was measured within tolerance: {fallback}, the reference"
    best_obj = min(obj for obj, _ in timed)
    fastest = min(timed, key=lambda t: t[0])[1]
    noise = max((r.noise or 0.0 for _, r in timed), default=0.0)
    margin = max(margin, noise)
    close = [(r.kl or 0.0, obj, r) for obj, r in timed if obj <= best_obj * (1 + margin)]
    _, obj, win = min(close, key=lambda t: (t[0], t[1]))
    win.status = CHOSEN
    where = " + ".join(f"b={b},n={n}" for b, n in points)
    parts = [
        f"{win.format}: {obj * 1e3:.1f} ms at {where}, top-1 {win.top1:.3f} >= "
        f"{tolerance.min_top1}, KL {win.kl:.4f} <= {tolerance.max_kl}"
    ]
    for o, r in sorted(timed, key=lambda t: t[0]):
        if r is not win:
            parts.append(f"{r.format} {o / obj:.2f}x")
    for r in results:
        if r.status == OUT_OF_TOLERANCE:
            parts.append(f"{r.format} out of tolerance (top-1 {r.top1:.3f}, KL {r.kl:.4f})")
        elif r.status in (PRUNED, UNAVAILABLE, SLOW_PREFILL):
            parts.append(f"{r.format} {r.status}: {r.note}")
    if win is not fastest:
        parts.insert(
            1,
            f"within {margin:.0%} of the fastest ({fastest.format}; the margin is the larger "
            f"of 5% and the timings' noise, {noise:.0%}) and closer to fp32",
        )
    return win.format, "; ".join(parts)


def expected_speedup(alpha: float, k: int, c: float, v: float) -> float:
    """Leviathan's walltime factor with a measured verify cost: E[c] / (k c + v(k+1))."""
    committed = k + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
    return committed / (k * c + v)


def choose_draft(
    results: Sequence[FormatResult],
    target_step_s: float,
    verify_ratio: float,
    k: int,
    fallback: str,
) -> tuple[str, str]:
    """The draft format with the best expected speed-up (R3: speed and acceptance together).

    ``top1`` of a draft result is its next-token agreement with the fp32 *target*, the greedy
    acceptance proxy alpha; its cost ratio c = draft step (batch 1) / target step.
    """
    scored: list[tuple[float, float, FormatResult]] = []
    for r in results:
        if r.status in (UNAVAILABLE, PRUNED) or r.top1 is None or (1, 1) not in r.curve:
            continue
        c = r.curve[(1, 1)] / target_step_s
        r.status = ELIGIBLE
        scored.append((expected_speedup(r.top1, k, c, verify_ratio), c, r))
    if not scored:
        return fallback, f"no draft format was measured: {fallback}"
    s, c, win = max(scored, key=lambda t: t[0])
    win.status = CHOSEN
    parts = [
        f"{win.format}: Leviathan factor {s:.2f} at k={k} with alpha = {win.top1:.3f} (its "
        f"agreement with the target on fixed answers, below the acceptance on the target's own "
        f"outputs), c = {c:.3f}, v({k + 1}) = {verify_ratio:.2f}"
    ]
    parts += [
        f"{r.format} {o:.2f}" for o, _, r in sorted(scored, key=lambda t: -t[0]) if r is not win
    ]
    parts += [
        f"{r.format} {r.status}: {r.note}" for r in results if r.status in (PRUNED, UNAVAILABLE)
    ]
    return win.format, "; ".join(parts)


@dataclass
class RoleCalibration:
    """The formats measured for one model and the one chosen."""

    role: str  # "target" | "draft"
    results: list[FormatResult]
    chosen: str
    reason: str
    points: list[Point]

    def result(self, name: str) -> FormatResult | None:
        return next((r for r in self.results if r.format == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "chosen": self.chosen,
            "reason": self.reason,
            "points": [list(p) for p in self.points],
            "formats": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RoleCalibration:
        return cls(
            role=d["role"],
            results=[FormatResult.from_dict(r) for r in d["formats"]],
            chosen=d["chosen"],
            reason=d["reason"],
            points=[(int(b), int(n)) for b, n in d["points"]],
        )


@dataclass
class Calibration:
    """What the engine measured at load and chose; the manifest's ``calibration`` entry."""

    mode: str  # "measured" (auto), "fixed" (an explicit --dtype, its curve measured), "skipped"
    key: str
    hardware: dict[str, Any]
    tolerance: Tolerance
    target: RoleCalibration
    draft: RoleCalibration | None = None
    seconds: float = 0.0
    cached: bool = False
    created: str = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    )
    version: int = CALIBRATION_VERSION

    def verify_ratio(self) -> dict[int, dict[int, float]]:
        """batch -> {tokens: t(tokens) / t(1)} of the chosen target format (the DESIGN's v(n))."""
        r = self.target.result(self.target.chosen)
        out: dict[int, dict[int, float]] = {}
        if r is None:
            return out
        for (b, n), s in sorted(r.curve.items()):
            one = r.curve.get((b, 1))
            if one:
                out.setdefault(b, {})[n] = s / one
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "mode": self.mode,
            "key": self.key,
            "created": self.created,
            "cached": self.cached,
            "seconds": self.seconds,
            "hardware": self.hardware,
            "tolerance": asdict(self.tolerance),
            "target": self.target.to_dict(),
            "draft": self.draft.to_dict() if self.draft is not None else None,
            "verify_ratio": {
                str(b): {str(n): v for n, v in c.items()} for b, c in self.verify_ratio().items()
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        return cls(
            mode=d["mode"],
            key=d["key"],
            hardware=d["hardware"],
            tolerance=Tolerance(**d["tolerance"]),
            target=RoleCalibration.from_dict(d["target"]),
            draft=RoleCalibration.from_dict(d["draft"]) if d.get("draft") else None,
            seconds=float(d["seconds"]),
            cached=bool(d.get("cached", False)),
            created=d["created"],
            version=int(d["version"]),
        )


# ---------------------------------------------------------------------------- cache
def resolve_mode(flag: str | None = None) -> str:
    """``auto`` (use the cache), ``force`` (measure again) or ``skip``; flag, else $SPECPILOT_CALIBRATION."""
    mode = flag or os.environ.get(ENV_MODE) or "auto"
    if mode not in MODES:
        src = "--calibration" if flag else f"${ENV_MODE}"
        raise ValueError(f"{src} must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def cache_dir() -> Path:
    from specpilot import cache_root

    return cache_root() / "calibration"


def cache_key(fields: dict[str, Any]) -> str:
    """sha256 of everything a calibration depends on (model hashes, hardware, torch, settings)."""
    blob = json.dumps({"version": CALIBRATION_VERSION, **fields}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def load_cached(key: str) -> Calibration | None:
    """The stored calibration for ``key``; None when absent or unreadable (it is then redone)."""
    path = cache_dir() / f"{key[:32]}.json"
    try:
        cal = Calibration.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if cal.key != key or cal.version != CALIBRATION_VERSION:
        return None
    cal.cached = True
    return cal


def store(cal: Calibration) -> Path | None:
    """Write the calibration to the cache (a read-only cache only costs the next start time)."""
    path = cache_dir() / f"{cal.key[:32]}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({**cal.to_dict(), "cached": False}, indent=1) + "\n")
        tmp.replace(path)
    except OSError:
        return None
    return path
