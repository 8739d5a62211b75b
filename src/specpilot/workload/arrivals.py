"""Arrival processes: when requests are sent, in seconds from the start of a phase.

Each process is a small class with a seed; ``times(duration_s)`` builds a fresh
``numpy.random.Generator`` from that seed on every call, so the same object (or an equal one)
always returns the same arrivals, and no global random state is touched.

- :class:`Constant`: one request every ``1/rate`` s, starting at 0.
- :class:`Poisson`: exponential gaps with mean ``1/rate`` (counts in any window are Poisson).
- :class:`Gamma`: gamma gaps with mean ``1/rate`` and coefficient of variation ``cv``, the
  burstiness: ``cv = 1`` is Poisson, ``cv > 1`` clusters arrivals into bursts, ``cv < 1`` is
  smoother than Poisson (shape ``1/cv**2``).
- :class:`Steps`: piecewise rates, e.g. 30 s at 0.5/s then 10 s at 4/s, each step drawn by
  one of the processes above.
- :class:`TraceReplay`: the arrivals (and token counts) of a trace window, time-scaled.

    >>> from specpilot.workload.arrivals import Gamma, Poisson, Steps
    >>> a = Poisson(rate=2.0, seed=1).times(60.0)
    >>> bool((a == Poisson(rate=2.0, seed=1).times(60.0)).all()), 80 < a.size < 160
    (True, True)
    >>> Steps([(10, 0.5), (5, 2.0)], kind="constant").times(15.0).tolist()
    [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 10.5, 11.0, 11.5, 12.0, 12.5, 13.0, 13.5, 14.0, 14.5]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from specpilot.errors import ConfigError
from specpilot.workload.trace import Trace


class ArrivalProcess(Protocol):
    def times(self, duration_s: float) -> np.ndarray:
        """Ascending send times in [0, duration_s)."""
        ...

    def describe(self) -> dict[str, Any]: ...


def _check_rate(rate: float) -> None:
    if not rate > 0:
        raise ConfigError(
            f"rate must be > 0 requests/s, got {rate}", fix="use steps with rate 0 for a pause"
        )


def _renewal(gaps: Any, rate: float, duration_s: float) -> np.ndarray:
    """Cumulative sums of gaps drawn in blocks until they pass ``duration_s``."""
    out: list[np.ndarray] = []
    t = 0.0
    block = int(rate * duration_s + 4 * np.sqrt(rate * duration_s) + 16)
    while t < duration_s:
        g = np.cumsum(gaps(block)) + t
        out.append(g)
        t = float(g[-1])
    a = np.concatenate(out) if out else np.empty(0)
    return a[a < duration_s]


@dataclass(frozen=True)
class Constant:
    rate: float
    offset_s: float = 0.0

    def __post_init__(self) -> None:
        _check_rate(self.rate)

    def times(self, duration_s: float) -> np.ndarray:
        n = int(np.ceil((duration_s - self.offset_s) * self.rate - 1e-9))
        return self.offset_s + np.arange(max(n, 0)) / self.rate

    def describe(self) -> dict[str, Any]:
        return {"kind": "constant", "rate": self.rate}


@dataclass(frozen=True)
class Poisson:
    rate: float
    seed: int = 0

    def __post_init__(self) -> None:
        _check_rate(self.rate)

    def times(self, duration_s: float) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        return _renewal(lambda n: rng.exponential(1.0 / self.rate, n), self.rate, duration_s)

    def describe(self) -> dict[str, Any]:
        return {"kind": "poisson", "rate": self.rate, "seed": self.seed}


@dataclass(frozen=True)
class Gamma:
    """Gamma renewal process: mean rate ``rate``, gap coefficient of variation ``cv``."""

    rate: float
    cv: float = 2.0
    seed: int = 0

    def __post_init__(self) -> None:
        _check_rate(self.rate)
        if not self.cv > 0:
            raise ConfigError(
                f"cv (burstiness) must be > 0, got {self.cv}", fix="1 is Poisson, above 1 bursty"
            )

    @property
    def shape(self) -> float:
        return 1.0 / self.cv**2

    def times(self, duration_s: float) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        scale = 1.0 / (self.rate * self.shape)
        return _renewal(lambda n: rng.gamma(self.shape, scale, n), self.rate, duration_s)

    def describe(self) -> dict[str, Any]:
        return {"kind": "gamma", "rate": self.rate, "cv": self.cv, "seed": self.seed}


@dataclass(frozen=True)
class Steps:
    """Piecewise-constant rates: ``steps`` is a list of (duration_s, rate); rate 0 is a pause.

    Each step is drawn by ``kind`` (constant | poisson | gamma, with ``cv``) with its own seed
    derived from ``seed`` and the step's index.
    """

    steps: Sequence[tuple[float, float]]
    kind: str = "poisson"
    cv: float = 2.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "poisson", "gamma"):
            raise ConfigError(
                f"steps kind {self.kind!r} is unknown", fix="use constant, poisson or gamma"
            )
        if not self.steps or any(d <= 0 or r < 0 for d, r in self.steps):
            raise ConfigError(
                f"steps {list(self.steps)}: need at least one step, each duration_s > 0 and rate >= 0"
            )

    @property
    def total_s(self) -> float:
        return float(sum(d for d, _ in self.steps))

    def _step(self, i: int, rate: float) -> ArrivalProcess:
        seed = int(np.random.SeedSequence([self.seed, i]).generate_state(1)[0])
        if self.kind == "constant":
            return Constant(rate)
        if self.kind == "gamma":
            return Gamma(rate, self.cv, seed)
        return Poisson(rate, seed)

    def times(self, duration_s: float) -> np.ndarray:
        out, t0 = [], 0.0
        for i, (d, rate) in enumerate(self.steps):
            if t0 >= duration_s:
                break
            if rate > 0:
                out.append(t0 + self._step(i, rate).times(min(d, duration_s - t0)))
            t0 += d
        return np.concatenate(out) if out else np.empty(0)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "steps",
            "step_kind": self.kind,
            "steps": [list(s) for s in self.steps],
            "seed": self.seed,
        }


@dataclass(frozen=True)
class TraceReplay:
    """Replay a trace window: its arrival times (times ``time_scale``) and token counts.

    ``target_rate``, when given, sets ``time_scale`` so the window's mean rate becomes it.
    Use :meth:`events` for times with lengths; ``times`` keeps to the common protocol.
    """

    trace: Trace = field(repr=False)
    time_scale: float = 1.0
    length_scale: float = 1.0
    target_rate: float | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    window: tuple[float, float] | None = None  # seconds of the original trace

    def _cut(self) -> Trace:
        return self.trace if self.window is None else self.trace.window(*self.window)

    def scaled_trace(self) -> Trace:
        return self._cut().scaled(
            self.effective_time_scale,
            self.length_scale,
            max_input_tokens=self.max_input_tokens,
            max_output_tokens=self.max_output_tokens,
        )

    @property
    def effective_time_scale(self) -> float:
        if self.target_rate is None:
            return self.time_scale
        _check_rate(self.target_rate)
        tr = self._cut()
        if tr.n == 0:
            return self.time_scale
        span = (self.window[1] - self.window[0]) if self.window else tr.duration_s
        return (tr.n / span) / self.target_rate

    @property
    def duration_s(self) -> float:
        """The replayed span: the window's length (or the trace's), time-scaled."""
        span = (self.window[1] - self.window[0]) if self.window else self.trace.duration_s
        return span * self.effective_time_scale

    def events(self, duration_s: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(times, input_tokens, output_tokens) of the arrivals before ``duration_s``."""
        tr = self.scaled_trace()
        if duration_s is None:  # the whole window; a whole trace keeps its last arrival too
            keep = tr.t <= self.duration_s if self.window is None else tr.t < self.duration_s
        else:
            keep = tr.t < duration_s
        return tr.t[keep], tr.input_tokens[keep], tr.output_tokens[keep]

    def times(self, duration_s: float) -> np.ndarray:
        return self.events(duration_s)[0]

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "trace",
            "source": self.trace.source,
            "window": list(self.window) if self.window else None,
            "time_scale": round(self.effective_time_scale, 6),
            "length_scale": self.length_scale,
            "max_input_tokens": self.max_input_tokens,
            "max_output_tokens": self.max_output_tokens,
        }
