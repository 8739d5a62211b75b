"""The capacity probe: what the baseline sustains on this machine, measured before the episodes.

A pilot whose phases give ``target_utilization`` (a fraction of the sustainable rate, e.g. 0.3
off-peak and 0.8 peak) needs that rate before its schedule exists, and the schedule comes
before the design, the plan and the budget check. So the probe runs on a baseline process of
its own, started and stopped before the first episode process (the episodes' processes then
serve nothing but the pilot), in three parts on the workload's own requests (its groups, its
prompts, its output lengths):

1. one warm-up request (the first request of a fresh process pays its first-call costs);
2. the synchronous pass: ``per_group`` requests of every group, one after another;
3. the saturating burst: ``2 x slots`` requests at once.

``simulate.sustain`` turns these into the sustainable rate (the highest Poisson rate at which
every group's 90th-percentile task time stays within its SLO and within 2x its unloaded
latency); a short open-loop segment at that rate confirms it: where the measured 90th
percentile overshoots a limit by more than ``TOLERANCE``, the rate is lowered in proportion and
the report says so. On the AMD EPYC AVX-512 kind the whole probe of the default pilot takes
about 30 s, the engine start included (``docs/MEASUREMENTS.md``).

A baseline that misses a group's SLO unloaded has no sustainable rate: the pilot is refused
with the latency measured and the deadline it missed. An arm by URL is probed only where its
file says ``probe: true`` (the probe sends load to a service someone else may be using).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from specpilot.analysis.service.capacity import slots_in
from specpilot.backends.protocol import request_headers
from specpilot.loadgen import LoadConfig, LoadRunner
from specpilot.loadgen.client import served_model
from specpilot.pilot.config.file import PilotConfigError
from specpilot.pilot.plan.engines import make_backend
from specpilot.pilot.run.drill import RuntimeSwitch
from specpilot.records import RequestRecord, ScheduledRequest
from specpilot.simulate.sustain import (
    FACTOR,
    QUANTILE,
    Sample,
    Sustained,
    sustainable,
    unloaded_medians,
)

if TYPE_CHECKING:
    from specpilot.backends import ResponseParser
    from specpilot.pilot.config.file import PilotConfig
    from specpilot.pilot.config.settings import LoadSettings
    from specpilot.pilot.plan.arms import ArmPlan
    from specpilot.pilot.run.context import ProbeContext
    from specpilot.workload import Schedule
    from specpilot.workload.config import WorkloadConfig

PER_GROUP = 2  # requests of each group in the synchronous pass
CONFIRM_S = 12.0  # seconds of the open-loop segment at the rate found
TOLERANCE = 1.25  # the confirmation's 90th percentile may overshoot a limit by this much
FAILED_OVER = 2.0  # a group with an unanswered request in the confirmation: its rate halved
METHOD = (
    "synchronous pass + saturating burst (GuideLLM's sweep ends), the sustainable rate from the "
    "simulator calibrated on both, confirmed by an open-loop segment"
)


# replays requests on the baseline open-loop (max concurrency or None) and returns every record
Run = Callable[[list[ScheduledRequest], int | None], list[RequestRecord]]


class NoSustainableRate(ValueError):
    """The baseline misses a group's SLO even unloaded."""


def pick(
    requests: Sequence[ScheduledRequest], per_group: int = PER_GROUP
) -> list[ScheduledRequest]:
    """``per_group`` measured requests of every group, the first ones in schedule order
    (deterministic: a resumed or repeated probe sends the same)."""
    out: list[ScheduledRequest] = []
    seen: dict[str, int] = {}
    for r in requests:
        if r.warmup or seen.get(r.group, 0) >= per_group:
            continue
        seen[r.group] = seen.get(r.group, 0) + 1
        out.append(r)
    return out


def _as(
    reqs: Sequence[ScheduledRequest], phase: str, times: Sequence[float]
) -> list[ScheduledRequest]:
    return [
        dataclasses.replace(r, phase=phase, index=i, send_t=float(t), deadline_s=None)
        for i, (r, t) in enumerate(zip(reqs, times, strict=True))
    ]


def _samples(records: Sequence[RequestRecord], t0: float | None = None) -> list[Sample]:
    out = []
    for r in records:
        if r.status != "ok" or r.sent_t is None or r.done_t is None or not r.output_tokens:
            continue
        start = r.sent_t if t0 is None else t0
        first = r.first_content_t if r.first_content_t is not None else r.done_t
        out.append(
            Sample(
                r.task_group,
                int(r.output_tokens),
                int(r.prompt_tokens or 0),
                first - start,
                r.done_t - start,
            )
        )
    return out


def unloaded_misses(unloaded: dict[str, float], deadlines: dict[str, float]) -> list[str]:
    """The groups whose unloaded median misses their SLO deadline, in words (empty: none).

    >>> unloaded_misses({"code": 3.1, "chat": 0.4}, {"code": 2.0, "chat": 5.0})
    ["group 'code': unloaded task time 3.10 s (median of the synchronous pass) > its slo.deadline_s 2 s"]
    """
    return [
        f"group {g!r}: unloaded task time {u:.2f} s (median of the synchronous pass) > its "
        f"slo.deadline_s {deadlines[g]:g} s"
        for g, u in unloaded.items()
        if g in deadlines and u > deadlines[g]
    ]


def probe(
    run: Run,
    requests: Sequence[ScheduledRequest],
    *,
    slots: int,
    deadlines: dict[str, float],
    factor: float = FACTOR,
    confirm_s: float = CONFIRM_S,
    unloaded_x: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The probe's figures (``report.json``'s ``capacity.probe``): ``run(requests,
    max_concurrency)`` replays requests on the baseline open-loop and returns every record.
    Raises :class:`NoSustainableRate` when the baseline misses an SLO unloaded."""
    t0 = time.perf_counter()
    chosen = pick(requests)
    if not chosen:
        raise ValueError("the capacity probe needs measured requests in the schedule")
    run(_as(chosen[:1], "probe_warmup", [0.0]), None)
    sync = _samples(run(_as(chosen, "probe_sync", [0.0] * len(chosen)), 1))
    unloaded = unloaded_medians(sync) if len(sync) == len(chosen) else {}
    # the deadlines given as multiples of the unloaded task time (slo.unloaded_x), in seconds
    derived = {g: round(x * unloaded[g], 3) for g, x in (unloaded_x or {}).items() if g in unloaded}
    deadlines = {**deadlines, **derived}
    missed = unloaded_misses(unloaded, deadlines)
    if missed:  # before the burst: no load for a baseline that misses unloaded
        raise NoSustainableRate("; ".join(missed))
    burst, span = _burst(run, chosen, slots, complete=len(sync) == len(chosen))
    est = sustainable(
        sync, burst, burst_span_s=span, slots=slots, factor=factor, deadlines=deadlines
    )
    if est.sustainable_rps <= 0:  # the p90 misses a limit at a tenth of the saturated rate
        raise NoSustainableRate(
            "at any rate the simulator tried, a group's p90 task time exceeds its limit ("
            + ", ".join(f"{g} limit {v:.2f} s" for g, v in est.limit_s.items())
            + f"; unloaded medians {', '.join(f'{g} {v:.2f} s' for g, v in unloaded.items())})"
        )
    figures: dict[str, Any] = {
        "method": METHOD,
        "factor": factor,
        "quantile": QUANTILE,
        **est.to_dict(),
        "simulated_rps": round(est.sustainable_rps, 4),
        **({"deadlines_s": derived} if derived else {}),
    }
    figures["sustainable_rps"] = round(_confirmed(run, chosen, est, confirm_s, figures), 4)
    figures["unloaded_s_all"] = round(statistics.median(s.e2e_s for s in sync), 4)
    figures["probe_s"] = round(time.perf_counter() - t0, 2)
    return figures


def _burst(
    run: Run, chosen: Sequence[ScheduledRequest], slots: int, complete: bool
) -> tuple[list[Sample], float]:
    """Twice the engine's slots sent at once: the saturated samples and the burst's span;
    ``complete``: the synchronous pass answered every request (else refused here too)."""
    n = 2 * max(slots, 1)
    burst_reqs = [chosen[i % len(chosen)] for i in range(n)]
    recs = run(_as(burst_reqs, "probe_burst", [0.0] * n), None)
    sent = [r.sent_t for r in recs if r.sent_t is not None]
    done = [r.done_t for r in recs if r.done_t is not None and r.status == "ok"]
    if not complete or len(done) < n or not sent:
        bad = [r for r in recs if r.status != "ok"]
        why = f"{bad[0].status}: {bad[0].error}" if bad else "requests not answered"
        raise RuntimeError(f"capacity probe: the baseline did not answer every request ({why})")
    return _samples(recs, min(sent)), max(done) - min(sent)


def _confirmed(
    run: Run,
    chosen: Sequence[ScheduledRequest],
    est: Sustained,
    confirm_s: float,
    figures: dict[str, Any],
) -> float:
    """The simulated rate, lowered by how far an open-loop segment at it overshot a limit
    (``figures`` gets the segment and the note)."""
    rate = float(est.sustainable_rps)
    confirm = _confirm(run, chosen, rate, confirm_s, est.limit_s) if rate > 0 else None
    if confirm is None:
        return rate
    figures["confirm"] = confirm
    worst = max(confirm["over_limit"].values(), default=1.0)
    if worst > TOLERANCE:
        rate = rate / worst
        figures["note"] = (
            f"the open-loop segment at {est.sustainable_rps:.3g} req/s overshot a limit "
            f"{worst:.2f}x: the rate lowered to {rate:.3g} req/s"
        )
    return rate


def _confirm(
    run: Run,
    chosen: Sequence[ScheduledRequest],
    rate: float,
    seconds: float,
    limits: dict[str, float],
) -> dict[str, Any]:
    rng = np.random.default_rng(len(chosen))
    n = max(round(rate * seconds), 2 * len(chosen))
    gaps = rng.exponential(1.0 / rate, n)
    times = np.concatenate([[0.0], np.cumsum(gaps[:-1])])  # the first at once
    reqs = [chosen[i % len(chosen)] for i in range(n)]
    got = _samples(run(_as(reqs, "probe_confirm", times.tolist()), None))
    p90 = {
        g: float(np.quantile([s.e2e_s for s in got if s.group == g], QUANTILE))
        for g in dict.fromkeys(s.group for s in got)
    }
    over = {g: round(v / limits[g], 3) for g, v in p90.items() if g in limits}
    # a request that failed or timed out is the slowest of all: a group missing answers is
    # over its limit by at least FAILED_OVER, never left out
    for g in dict.fromkeys(r.group for r in reqs):
        sent = sum(r.group == g for r in reqs)
        if sum(s.group == g for s in got) < sent:
            over[g] = max(over.get(g, 0.0), FAILED_OVER)
    return {
        "rate_rps": round(rate, 4),
        "requests": n,
        "answered": len(got),
        "p90_s": {g: round(v, 4) for g, v in p90.items()},
        "over_limit": over,
    }


def replayer(
    url: str,
    model: str,
    s: LoadSettings,
    arm: str,
    response_extras: ResponseParser | None = None,
    headers: Mapping[str, str] | None = None,
) -> Run:
    """``run(requests, max_concurrency)`` for :func:`probe`: the load generator replays the
    requests open-loop against ``url`` with the pilot's load settings ``s`` and returns every
    record (the probe's runs are not stored: they serve no arm's comparison); ``headers``:
    the endpoint's credentials (a baseline by URL)."""

    def run(reqs: list[ScheduledRequest], cap: int | None) -> list[RequestRecord]:
        cfg = LoadConfig.build(
            url,
            api=s.api,
            model=model,
            run_id="capacity-probe",
            arm=arm,
            timeout_s=s.timeout_s,
            max_concurrency=cap,
            include_usage=s.include_usage,
            response_extras=response_extras,
            headers=dict(headers or {}),
            progress=False,
        )
        return LoadRunner(reqs, cfg).run().records

    return run


def slots_of(plan: ArmPlan, described: dict[str, Any]) -> int:
    """Sequences the engine batches at once: the arm's capacity settings (``max_slots``,
    ``n_parallel``, ...), else what the engine describes, else 8."""
    for caps in (plan.capacity or {}, described.get("capacity") or {}):
        got = slots_in(caps)
        if got is not None:
            return got
    return 8


def slo_deadlines(schedule: Schedule) -> dict[str, float]:
    """Each group's SLO deadline (seconds) from the schedule's groups, where it has one."""
    return {
        n: float(g["slo"]["deadline_s"])
        for n, g in schedule.groups.items()
        if (g.get("slo") or {}).get("deadline_s")
    }


def baseline_probe(
    pilot: ProbeContext,
    plan: ArmPlan,
    schedule: Schedule,
    unloaded_x: dict[str, float] | None = None,
    in_place: ArmPlan | None = None,
) -> dict[str, Any]:
    """Start the baseline ``plan`` on a process of its own (``pilot``: the ``Pilot``; a
    baseline by URL is only reached), probe it on ``schedule``'s measured requests, stop it;
    the figures, with the engine start's seconds (``start_s``); ``unloaded_x``: the groups
    whose deadline is that multiple of their unloaded task time (``deadlines_s`` then).
    ``in_place``: the speculative arm whose processes serve the baseline in the episodes
    (``episodes.in_place``): the probe starts one of those, speculation switched off, so it
    measures the baseline exactly as the episodes serve it, and the weight-format calibration
    of a fresh machine runs once, for the probe and the episodes alike."""
    start = in_place if in_place is not None else plan
    backend = make_backend(start, files=pilot.files.get(start.name, {}))
    pilot.progress.step(plan.name, "capacity probe: starting a baseline process")
    t0 = time.perf_counter()
    backend.start(pilot.load_settings.start_timeout_s)
    start_s = time.perf_counter() - t0
    try:
        url = backend.endpoint
        if in_place is not None:  # the baseline: the same process with speculation off
            RuntimeSwitch(url, pilot.admin_token).off()
        headers = request_headers(backend)
        model = plan.spec.model_name or served_model(url, headers)
        slots = slots_of(plan, backend.describe().to_dict())
        run = replayer(url, model, pilot.load_settings, plan.name, backend.response_extras, headers)
        pilot.progress.step(plan.name, "capacity probe: synchronous pass, burst, confirmation")
        figures = probe(
            run,
            schedule.requests,
            slots=slots,
            deadlines=slo_deadlines(schedule),
            unloaded_x=unloaded_x,
        )
    finally:
        backend.stop()
    return {
        **figures,
        "start_s": round(start_s, 2),
        "arm": plan.name,
        "by_url": plan.url is not None,
        **({"process_of": start.name} if in_place is not None else {}),
    }


def wants_probe(cfg: PilotConfig, wl: WorkloadConfig) -> bool:
    """Whether the pilot probes capacity (``load.capacity_probe``; None: where a phase gives
    ``target_utilization``). ``false`` with such a phase is refused (``PilotConfigError``)."""
    want = cfg.load.capacity_probe
    needs = wl.utilization_phases()
    slo = sorted(wl.unloaded_slo_groups())
    waiting = [
        (slo, "group", "slo.unloaded_x, a multiple of the unloaded task time",
         "give that group slo.deadline_s (seconds)"),
        (needs, "phase", "target_utilization, a fraction of the capacity",
         "give that phase a rate (rate:, target_rate:)"),
    ]  # fmt: skip
    for names, kind, what, fix in waiting:
        if want is False and names:
            raise PilotConfigError(
                f"load.capacity_probe is false, and {kind} {names[0]!r} gives {what} the probe "
                "measures",
                fix=f"remove capacity_probe: false, or {fix}",
                at=("load", "capacity_probe"),
            )
    return bool(needs or slo) if want is None else want


def refuse_unprobed(cfg: PilotConfig, base: ArmPlan) -> None:
    """A baseline by URL is probed only where its arm says ``probe: true``."""
    if base.url is None or getattr(base.spec, "probe", False):
        return
    i = [a.name for a in cfg.arms].index(base.name)
    raise PilotConfigError(
        f"arm {base.name!r} is given by URL ({base.url}), and the capacity probe would send it "
        f"a synchronous pass, a burst of requests and an open-loop segment (about a minute of "
        "load) to measure what target_utilization is a fraction of",
        fix=f"add 'probe: true' to arm {base.name!r} to allow that load, or give the phases "
        "rates (rate:, target_rate:)",
        at=("arms", i, "url"),
    )


def capacity_note(f: dict[str, Any]) -> str:
    """The probe's result in one line for the terminal."""
    if f.get("given"):
        return f"capacity of {f['arm']}: {f['sustainable_rps']:.3g} req/s as given (--capacity)"
    where = (
        f" (on a {f['process_of']} process with speculation off, as the episodes serve it)"
        if f.get("process_of")
        else ""
    )
    return (
        f"capacity of {f['arm']}{where}: {f['sustainable_rps']:.3g} req/s sustained (unloaded "
        f"{f['unloaded_s_all']:.2f} s a request; {f['sync_rps']:.3g} req/s one at a time, "
        f"{f['max_rps']:.3g} req/s saturated), measured in {f['probe_s'] + f['start_s']:.0f} s"
    )


def over_capacity(schedule: Schedule, capacity_rps: float) -> list[str]:
    """One note per measured phase offered more than the capacity: kept (an overload may be
    meant), said before the first episode."""
    return [
        f"phase {p.name}: {p.offered_rate:.3g} req/s is {p.offered_rate / capacity_rps:.2f}x "
        f"the capacity measured ({capacity_rps:.3g} req/s): kept as an overload by intent, "
        "its requests will queue"
        for p in schedule.phases
        if not p.warmup and capacity_rps > 0 and p.offered_rate > capacity_rps
    ]


def given_capacity(rps: float, arm: str) -> dict[str, Any]:
    """The capacity record of a figure given on the command line (``--capacity``): stated as
    given, with nothing measured beside it."""
    if not rps > 0:
        raise PilotConfigError(
            f"--capacity {rps:g}: the baseline's sustainable rate must be above 0 requests/s",
            fix="give the rate a previous pilot's report states (capacity.probe), or leave "
            "--capacity out to measure it",
        )
    return {
        "method": "given on the command line (--capacity), not measured",
        "sustainable_rps": round(float(rps), 4),
        "arm": arm,
        "given": True,
    }
