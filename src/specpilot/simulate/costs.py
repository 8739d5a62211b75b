"""The simulator's cost model, calibrated from a pilot file: what one engine step, one prefill
and the time outside the engine cost for an arm, and how many tokens a speculative round
commits, per task group. Every fit carries its error and the points it came from.

- step time(b): one decode step (a plain token, or a whole speculative round: draft, verify,
  overhead) at b requests decoding. Where the file has the rounds' start times
  (``PilotData.step_cadence``), the measured step-to-step time at each b (median, steps with a
  prefill between left out): that includes the engine loop's work outside the round, which the
  rounds' own times miss (10-20% here at 4 rows). Otherwise (engines that report per-request
  totals) each request's round rows give its round time x its mean batch size. A
  least-squares line in b covers batch sizes that were not measured.
- prefill time(n): the prefill records (the target's and the draft's, each row's share of its
  batch) against prompt tokens; for engines without them, the server's own prefill timings.
- overhead: the time a served request spends outside the engine (client, HTTP, tokenizer),
  the 10th percentile of E2E - (prefill + decode) over ok requests that report both (the low
  end: queueing is the simulator's to add, not the overhead's).
- committed tokens per round, per task group: the measured histogram of accepted drafts
  (``RequestRounds.accepted_hist``: P(a = j), committed j + 1), never an i.i.d. alpha; an arm
  without a histogram (llama.cpp totals) commits its mean tokens per decode step.

    >>> f = fit_linear(np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.12, 0.14]))
    >>> round(f(4), 3), f.rel_rmse < 1e-9
    (0.16, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specpilot.errors import ConfigError
from specpilot.records import DRILL_PHASE, PilotData, RequestRecord, RequestRounds


@dataclass(frozen=True)
class Linear:
    """y = a + b x over the points it was fitted on (``x_range``); ``rel_rmse``: the fit's
    root-mean-square error relative to the mean of y."""

    a: float
    b: float
    n: int
    rel_rmse: float
    x_range: tuple[float, float]

    def __call__(self, x: float) -> float:
        return max(0.0, self.a + self.b * x)


def fit_linear(x: np.ndarray, y: np.ndarray) -> Linear:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) == 0:
        raise ValueError("no points to fit")
    if len(np.unique(x)) < 2:
        a, b = float(np.mean(y)), 0.0
    else:
        b, a = (float(v) for v in np.polyfit(x, y, 1))
    resid = y - (a + b * x)
    mean = float(np.mean(y)) or 1.0
    rel = float(np.sqrt(np.mean(resid**2)) / abs(mean))
    return Linear(a, b, len(x), rel, (float(x.min()), float(x.max())))


@dataclass(frozen=True)
class StepCurve:
    """Step seconds by batch size: the measured medians where there are (``points``, with
    their samples), the line through them elsewhere; or (``interpolate``, a hardware profile's
    curve) linear between the points and the last segment extended beyond them.

        >>> c = StepCurve({1: 0.01, 8: 0.024}, fit_linear(np.array([1, 8]), np.array([0.01, 0.024])),
        ...               interpolate=True)
        >>> round(c(4), 4), round(c(16), 4)
        (0.016, 0.04)
    """

    points: dict[int, float]
    line: Linear
    samples: int = 0
    source: str = "rounds"  # "cadence": step-to-step times; "rounds": the rounds' own times
    interpolate: bool = False

    def __call__(self, b: float) -> float:
        if self.interpolate and len(self.points) > 1:
            xs = np.array(sorted(self.points), dtype=float)
            ys = np.array([self.points[int(x)] for x in xs])
            if xs[0] <= b <= xs[-1]:
                return float(np.interp(b, xs, ys))
            lo, hi = (0, 1) if b < xs[0] else (-2, -1)
            slope = (ys[hi] - ys[lo]) / (xs[hi] - xs[lo])
            return max(float(ys[lo] + slope * (b - xs[lo])), 1e-9)
        v = self.points.get(int(b)) if float(b).is_integer() else None
        return v if v is not None else self.line(b)

    @property
    def rel_rmse(self) -> float:
        return self.line.rel_rmse


def _cadence_curve(data: PilotData, arm: str, phases: set[str]) -> StepCurve | None:
    """The step-to-step medians of ``phases`` pooled per batch size (weighted by steps)."""
    pts = [c for c in data.step_cadence if c.arm == arm and c.phase in phases and c.samples > 0]
    if not pts:
        return None
    by_b: dict[int, list[tuple[float, int]]] = {}
    for c in pts:
        by_b.setdefault(c.batch_size, []).append((c.median_s, c.samples))
    points = {
        b: float(np.average([m for m, _ in v], weights=[n for _, n in v])) for b, v in by_b.items()
    }
    xs = np.repeat([float(c.batch_size) for c in pts], [c.samples for c in pts])
    ys = np.repeat([c.median_s for c in pts], [c.samples for c in pts])
    return StepCurve(points, fit_linear(xs, ys), int(sum(c.samples for c in pts)), "cadence")


@dataclass(frozen=True)
class ArmCosts:
    arm: str
    engine: str
    step: StepCurve
    prefill: Linear
    overhead_s: float
    slots: int
    k: int | None  # drafts per speculative round (None: plain)
    # task group -> (committed tokens per round, their probabilities); "*" pools every group
    committed: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    phases: tuple[str, ...] = ()
    profile: str = ""  # where the figures come from (file, arm, phases, CPU)

    def mean_committed(self, group: str) -> float:
        v, p = self.committed.get(group) or self.committed.get("*") or (np.ones(1), np.ones(1))
        return float(np.dot(v, p))


def _slots(data: PilotData, arm: str) -> int:
    from specpilot.analysis.service.capacity import target_slots

    rec = next((a for a in data.arms if a.arm == arm), None)
    return target_slots(rec) or 1


def _served(data: PilotData, arm: str, phases: set[str]) -> list[RequestRecord]:
    """The arm's measured requests answered ok in ``phases`` (warm-up left out)."""
    return [
        q
        for q in data.requests
        if q.arm == arm and q.phase in phases and q.status == "ok" and not q.warmup
    ]


def calibrate(data: PilotData, arm: str, phases: Sequence[str] | None = None) -> ArmCosts:
    """The arm's costs from its measured requests of ``phases`` (None: every measured phase)."""
    rec = next((a for a in data.arms if a.arm == arm), None)
    if rec is None:
        raise ConfigError(f"no arm {arm!r} in the pilot ({', '.join(a.arm for a in data.arms)})")
    wanted = (
        set(phases) if phases else {p.phase for p in data.phases if p.arm == arm and not p.warmup}
    )
    wanted.discard(DRILL_PHASE)
    step, rr = _step(data, arm, wanted)
    prefill = _prefill(data, arm, wanted)
    spec = [r for r in rr if r.proposed > 0]
    rounds_with_drafts = sum(r.spec_rounds for r in spec)
    if rounds_with_drafts:
        k: int | None = round(sum(r.proposed for r in spec) / rounds_with_drafts)
    elif spec:  # totals only (llama.cpp): which steps drafted is not reported; the arm's label
        k = rec.strategy.k if rec.strategy.kind != "none" else None
    else:
        k = None
    cpu = data.pilot.hardware.cpu_model if data.pilot.hardware else "unknown CPU"
    return ArmCosts(
        arm=arm,
        engine=rec.engine,
        step=step,
        prefill=prefill,
        overhead_s=_overhead(data, arm, wanted, rr, prefill),
        slots=_slots(data, arm),
        k=k or None,
        committed=_committed(spec, [r for r in rr if r.proposed == 0]),
        phases=tuple(sorted(wanted)),
        profile=f"pilot {data.pilot.pilot_id}, arm {arm}, phases {', '.join(sorted(wanted))}, {cpu}",
    )


def _step(data: PilotData, arm: str, wanted: set[str]) -> tuple[StepCurve, list[RequestRounds]]:
    """The decode step's cost curve, and the round aggregates it came from (a plain engine that
    reports no rounds: one round per decoded token, from each request's decode time)."""
    rr = [r for r in data.request_rounds if r.arm == arm and r.phase in wanted and r.rounds > 0]
    if rr:
        x = np.array([r.mean_batch_size for r in rr])
        y = np.array(
            [(r.draft_s + r.verify_s + r.overhead_s) / r.rounds * r.mean_batch_size for r in rr]
        )
        return _cadence_curve(data, arm, wanted) or StepCurve({}, fit_linear(x, y), len(rr)), rr
    # a plain engine that reports no rounds (vLLM without speculation, any endpoint)
    x, y = _request_steps(data, arm, wanted)
    if not len(x):
        raise ConfigError(
            f"arm {arm!r} has no round records and no ok requests with a decode time in "
            f"phases {sorted(wanted)}"
        )
    rr = [
        RequestRounds(
            run_id=q.run_id,
            arm=q.arm,
            phase=q.phase,
            task_group=q.task_group,
            request_id=q.request_id,
            rounds=int(q.output_tokens or 1) - 1,
            spec_rounds=0,
            proposed=0,
            accepted=0,
            committed=int(q.output_tokens or 1) - 1,
            draft_s=0.0,
            verify_s=float(q.decode_s or 0.0),
            overhead_s=0.0,
        )
        for q in _served(data, arm, wanted)
        if q.decode_s is not None and (q.output_tokens or 0) > 1
    ]
    return StepCurve({}, fit_linear(x, y), len(x), "requests"), rr


def _prefill(data: PilotData, arm: str, wanted: set[str]) -> Linear:
    """Prefill time against prompt tokens: from the engine's prefill records, else from each
    request's prefill time."""
    pre = [p for p in data.prefills if p.arm == arm and p.phase in wanted]
    if pre:
        # a batched prefill's rows each carry the batch's time: a request's share is 1/batch
        return fit_linear(
            np.array([p.prompt_tokens for p in pre]),
            np.array([(p.target_s + p.draft_s) / max(1, p.batch_size) for p in pre]),
        )
    reqs = [
        q
        for q in data.requests
        if q.arm == arm and q.phase in wanted and q.prefill_s is not None and q.prompt_tokens
    ]
    if not reqs:
        return Linear(0.0, 0.0, 0, float("nan"), (0.0, 0.0))
    return fit_linear(
        np.array([q.prompt_tokens for q in reqs]), np.array([q.prefill_s for q in reqs])
    )


def _overhead(
    data: PilotData, arm: str, wanted: set[str], rr: Sequence[RequestRounds], prefill: Linear
) -> float:
    """Per request, what E2E holds beyond its prefill and decode (HTTP, queue hand-off,
    streaming): the 10th percentile of the residual, never below 0."""
    by_id = {r.request_id: r for r in rr}
    resid = []
    for q in _served(data, arm, wanted):
        if q.sent_t is None or q.done_t is None:
            continue
        r = by_id.get(q.request_id)
        decode = q.decode_s
        if r is not None and decode is None:
            decode = (r.draft_s + r.verify_s + r.overhead_s) * r.mean_batch_size
        engine = q.prefill_s if q.prefill_s is not None else prefill(q.prompt_tokens or 0)
        if decode is not None:
            resid.append(q.done_t - q.sent_t - engine - decode)
    return max(0.0, float(np.percentile(resid, 10))) if resid else 0.0


def _request_steps(data: PilotData, arm: str, phases: set[str]) -> tuple[np.ndarray, np.ndarray]:
    """(mean batch size, step seconds) per ok request of a plain arm from its own timings: its
    decode time per token after the first, against the time-weighted number of the arm's
    requests decoding while it did (its decode window counted from the first content)."""
    reqs = [
        q
        for q in _served(data, arm, phases)
        if q.decode_s
        and (q.output_tokens or 0) > 1
        and q.first_content_t is not None
        and q.done_t is not None
    ]
    # per run: the number of the arm's requests decoding, N(t), and its running integral F at
    # every start / end; a request's overlap is F(done) - F(first content) (itself included)
    integral: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    runs: dict[str, list[tuple[float, float]]] = {}
    for q in data.requests:
        if q.arm == arm and q.first_content_t is not None and q.done_t is not None:
            runs.setdefault(q.run_id, []).append((float(q.first_content_t), float(q.done_t)))
    for run, spans in runs.items():
        t = np.array([x for s_, e in spans for x in (s_, e)])
        step = np.array([d for _ in spans for d in (1.0, -1.0)])
        order = np.argsort(t, kind="stable")
        t, step = t[order], step[order]
        level = np.cumsum(step)  # N just after each breakpoint
        area = np.concatenate(([0.0], np.cumsum(level[:-1] * np.diff(t))))
        integral[run] = (t, area)
    xs, ys = [], []
    for q in reqs:
        a, b = float(q.first_content_t or 0.0), float(q.done_t or 0.0)
        if b <= a:
            continue
        t, area = integral[q.run_id]
        overlap = float(np.interp(b, t, area) - np.interp(a, t, area))
        xs.append(overlap / (b - a))
        ys.append(float(q.decode_s or 0.0) / (int(q.output_tokens or 2) - 1))
    return np.array(xs), np.array(ys)


def _committed(
    spec: list[RequestRounds], plain: list[RequestRounds]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    groups = [*sorted({r.task_group for r in spec}), "*"]
    for g in groups:
        mine = [r for r in spec if g == "*" or r.task_group == g]
        hist = [r.accepted_hist for r in mine if r.accepted_hist]
        if hist:
            width = max(len(h) for h in hist)
            h = np.zeros(width)
            for one in hist:
                h[: len(one)] += one
            if h.sum() > 0:
                out[g] = (np.arange(1, width + 1, dtype=float), h / h.sum())
                continue
        rounds = sum(r.rounds for r in mine)
        if rounds:  # totals only: the mean tokens per decode step
            out[g] = (np.array([sum(r.committed for r in mine) / rounds]), np.ones(1))
    if not spec and plain:
        out["*"] = (np.ones(1), np.ones(1))
    return out


def rounds_needed(
    tokens: np.ndarray, values: np.ndarray, probs: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Decode steps to commit ``tokens`` (after the prefill's first token) when each step
    commits one of ``values`` with ``probs`` (a single value: deterministic).

        >>> rounds_needed(np.array([0, 4, 9]), np.array([3.0]), np.array([1.0]), None)
        array([0, 2, 3])
    """
    need = np.maximum(np.asarray(tokens, dtype=np.int64), 0)
    if len(values) == 1:
        return np.ceil(need / float(values[0])).astype(np.int64)
    return draw_rounds(need, values, probs, rng)[0]


DRAW_BUDGET = 20_000_000  # values drawn at once (160 MB of int64)
DRAW_SIGMAS = 6.0  # draws beyond the mean need, in standard deviations of the sum


def draw_rounds(
    need: np.ndarray,
    values: np.ndarray,
    probs: np.ndarray,
    rng: np.random.Generator,
    keep: bool = False,
) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """(steps to commit ``need`` tokens per row, and with ``keep`` each row's drawn values in
    order, at least those steps), each step committing one of ``values`` (>= 1) with ``probs``.

    Rows go in order of their need (a stable sort) in blocks; a block draws, per row, as many
    values as its largest need takes with 6 standard deviations to spare (not the need itself:
    2-3x fewer draws at 1.8 tokens a step), and the rare row still short draws the rest. The
    step-by-step model (``simulate.stepwise``) calls this with the same seed to draw the same
    values per request.
    """
    n = len(need)
    rounds = np.zeros(n, dtype=np.int64)
    seqs: list[np.ndarray] | None = [np.zeros(0, dtype=np.int64)] * n if keep else None
    vals = np.asarray(values).astype(np.int64)
    probs = np.asarray(probs, dtype=float)
    live = vals[probs > 0]
    if n == 0 or int(need.max()) <= 0:
        return rounds, seqs
    if live.min() < 1:
        raise ValueError(f"every step commits at least one token, got values {vals.tolist()}")
    mean = float(np.dot(vals, probs))
    sd = float(np.sqrt(max(0.0, float(np.dot(vals.astype(float) ** 2, probs)) - mean**2)))
    vmin = int(live.min())

    def width(m: int) -> int:
        sure = -(-m // vmin)  # never short
        spare = DRAW_SIGMAS * sd * np.sqrt(m / mean) / mean
        return max(1, min(sure, int(np.ceil(m / mean + spare)) + 2))

    order = np.argsort(need, kind="stable")
    s = 0
    while s < n:
        rows = max(1, DRAW_BUDGET // width(int(need[order[min(n, s + 65536) - 1]])))
        idx = order[s : s + min(rows, 65536)]
        s += len(idx)
        nn = need[idx]
        w = width(int(nn.max()))
        draws = rng.choice(vals, size=(len(idx), w), p=probs)
        total = np.cumsum(draws, axis=1)
        r = np.where(nn > 0, np.argmax(total >= nn[:, None], axis=1) + 1, 0)
        short = np.flatnonzero(total[:, -1] < nn)
        extra = None
        if len(short):
            rem = nn[short] - total[short, -1]
            extra = rng.choice(vals, size=(len(short), -(-int(rem.max()) // vmin)), p=probs)
            r[short] = w + np.argmax(np.cumsum(extra, axis=1) >= rem[:, None], axis=1) + 1
        rounds[idx] = r
        if seqs is not None:
            for j, i in enumerate(idx.tolist()):
                seqs[i] = draws[j]
            if extra is not None:
                for j, row in zip(short.tolist(), extra, strict=True):
                    seqs[int(idx[j])] = np.concatenate([draws[j], row])
    return rounds, seqs
