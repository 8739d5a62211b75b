"""The report's simulation section: each compared arm's simulation validated against the
pilot's own phases (calibrated on the first, predicting the others), and, where both arms of a
pair pass the gate, the simulated crossover over rates from the lowest measured level to twice
the highest. A pair with an arm that misses the gate gets no crossover: the verdict never rests
on an unvalidated simulation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from specpilot.errors import SpecpilotError
from specpilot.records import PilotData, RequestRecord, RequestRounds
from specpilot.simulate.costs import calibrate
from specpilot.simulate.crossover import crossover
from specpilot.simulate.kschedule import check, k_schedule
from specpilot.simulate.predict import measured, measured_phases
from specpilot.simulate.validation import Validation, validate

RATES = 8
MAX_REQUESTS = 200_000  # above this the report leaves simulation to `specpilot simulate`


def pilot_simulation(
    data: PilotData, pairs: Sequence[tuple[str, str]], *, requests: int = 1500
) -> dict[str, Any]:
    out: dict[str, Any] = {"validations": [], "crossovers": [], "k_schedules": [], "notes": []}
    cols = data.request_columns
    n = len(cols["request_id"]) if cols is not None else len(data.requests)
    if n > MAX_REQUESTS:
        out["notes"].append(
            f"{n} requests: the report does not simulate at this scale (it would read every "
            "request as a record); run specpilot simulate on the file"
        )
        return out
    data = with_records(data)
    arms = list(dict.fromkeys(a for pair in pairs for a in pair))
    done, out["notes"] = _validate_arms(data, arms)
    out["validations"] = [v.to_dict() for v in done.values()]
    for b, c in pairs:
        ks = _k_schedule_entry(data, b, c, done, requests)
        if ks is not None:
            out["k_schedules"].append(ks)
        if b in done and c in done:
            x = _crossover_entry(data, b, c, done, requests)
            if x is not None:
                out["crossovers"].append(x)
    return out


def _validate_arms(data: PilotData, arms: Sequence[str]) -> tuple[dict[str, Validation], list[str]]:
    """Each arm's simulation calibrated on its first measured phase and validated on the
    others; notes for the arms with one phase or that could not be simulated."""
    done: dict[str, Validation] = {}
    notes: list[str] = []
    for arm in arms:
        phases = measured_phases(data, arm)
        if len(phases) < 2:
            notes.append(f"{arm}: one measured phase, nothing to validate a simulation on")
            continue
        try:
            done[arm] = validate(data, arm, phases[:1], phases[1:])
        except SpecpilotError as exc:
            notes.append(f"{arm}: not simulated ({exc.message})")
    return done, notes


def _k_schedule_entry(
    data: PilotData, b: str, c: str, done: dict[str, Validation], requests: int
) -> dict[str, object] | None:
    """The candidate's k per batch size against the baseline, checked step by step and marked
    NOT validated unless both arms' simulations passed the gate; None without a schedule."""
    try:
        ks = k_schedule(data, b, c)
    except SpecpilotError:
        return None
    try:
        chk = check(data, b, c, ks, n=requests // 5, seeds=(0, 1, 2)).to_dict()
    except SpecpilotError as exc:
        chk = {"text": f"not checked ({exc.message})", "rows": []}
    ok = b in done and c in done and done[b].validated and done[c].validated
    if not ok:  # modelled from costs whose simulation missed its gate: no evidence
        chk["text"] += " (NOT validated: the simulation of these arms missed its gate)"
    return {
        "baseline_arm": b,
        "candidate_arm": c,
        "ranges": [list(r) for r in ks.ranges],
        "text": f"{c}: {ks.text}",
        "check": chk,
        "validated": ok,
        "vllm_speculative_config": ks.vllm_speculative_config(),
        "notes": list(ks.notes),
    }


def _crossover_entry(
    data: PilotData, b: str, c: str, done: dict[str, Validation], requests: int
) -> dict[str, object] | None:
    """The simulated crossover over rates from the baseline's lowest measured level to twice
    its highest, or why there is none (an arm not validated); None without a measured rate."""
    if not (done[b].validated and done[c].validated):
        bad = [a for a in (b, c) if not done[a].validated]
        return {
            "baseline_arm": b,
            "candidate_arm": c,
            "bracket": None,
            "validated": False,
            "text": f"{c} vs {b}: no simulated crossover, the simulation of {', '.join(bad)} "
            "is not validated (simulated figures are no evidence here)",
        }
    rates = [p.offered_rate for p in data.phases if p.arm == b and not p.warmup]
    rates = [r for r in rates if r > 0]
    if not rates:
        return None
    grid = np.geomspace(min(rates), 2 * max(rates), RATES).round(4).tolist()
    template, _ = measured(data, b, measured_phases(data, b)[-1])
    x = crossover(calibrate(data, b), calibrate(data, c), template, grid, n=requests)
    return {
        "baseline_arm": b,
        "candidate_arm": c,
        "bracket": x.bracket,
        "validated": True,
        "rates": list(x.rates),
        "ratio_p50": [list(r) for r in x.ratio_p50],
        "outcome": list(x.outcome),
        "text": f"{x.text} (simulated, validated on this pilot's phases)",
    }


_REQUEST_FIELDS = tuple(
    [
        "prompt_tokens",
        "output_tokens",
        "sent_t",
        "first_content_t",
        "done_t",
        "deadline_s",
        "ttft_slo_s",
        "prefill_s",
        "decode_s",
    ]
)


def with_records(data: PilotData) -> PilotData:
    """``data`` with its requests and round aggregates as records: a reader at scale hands them
    over as columns only (``columns=True``, ``specpilot report``)."""
    import dataclasses
    import math

    from specpilot.store.aggregates import as_lists
    from specpilot.store.codec import records_of

    out = data
    if not data.request_rounds and data.request_rounds_columns is not None:
        rr = records_of(RequestRounds, as_lists(data.request_rounds_columns))
        out = dataclasses.replace(out, request_rounds=rr)
    cols = data.request_columns
    if not data.requests and cols is not None:

        def val(x: Any) -> Any:
            return None if isinstance(x, float) and math.isnan(x) else x

        n = len(cols["request_id"])
        reqs = [
            RequestRecord(
                str(cols["run_id"][i]),
                str(cols["arm"][i]),
                str(cols["phase"][i]),
                str(cols["task_group"][i]),
                str(cols["request_id"][i]),
                float(cols["scheduled_t"][i]),
                str(cols["status"][i]),
                warmup=bool(cols["warmup"][i]),
                **{f: val(cols[f][i].item()) for f in _REQUEST_FIELDS},
            )
            for i in range(n)
        ]
        for r in reqs:
            for f in ("prompt_tokens", "output_tokens"):
                v = getattr(r, f)
                if v is not None:
                    setattr(r, f, int(v))
        out = dataclasses.replace(out, requests=reqs)
    return out
