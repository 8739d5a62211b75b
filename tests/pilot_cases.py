"""Hand-built pilots for the analysis and report tests (no model, no store).

``case(...)`` writes a three-arm pilot from per-(group, phase) latency factors: every request of
the baseline gets a seeded latency, the same schedule slot in a candidate arm gets that latency
times the cell's factor times a little seeded noise, so the expected outcome of each paired
comparison is known by construction (factor 0.7: faster; 1.3: slower; 1.0: no difference).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from specpilot.records import (
    ArmRecord,
    ConsistencyRecord,
    HardwareFacts,
    MetricSnapshot,
    PhaseRecord,
    PilotData,
    PilotRecord,
    QualityRecord,
    RequestRecord,
    RequestRounds,
    ResourceBudget,
    StrategySpec,
    VerifyCostPoint,
)

TRACE_CONFIG = {
    "workload": {
        "phases": [
            {"name": "off_peak", "arrival": {"kind": "trace"}},
            {"name": "peak", "arrival": {"kind": "trace"}},
        ]
    }
}
SYNTHETIC_CONFIG = {"workload": {"phases": [{"name": "off_peak", "arrival": {"kind": "poisson"}}]}}
PHASES = {"off_peak": 1.0, "peak": 4.0}
XEON = HardwareFacts(
    cpu_model="Intel(R) Xeon(R) Processor",
    cpu_flags=["avx512_bf16", "amx_tile"],
    cpu_logical_cores=2,
)


def arms(alternative: bool = True, k: int = 3, control: bool = True) -> list[ArmRecord]:
    out = [
        ArmRecord(
            "p",
            "run-base",
            "base",
            "baseline",
            "builtin",
            manifest={"dtype": "bf16", "capacity": {"max_slots": 4}},
            budget=ResourceBudget(memory_bytes=2 << 30, cores=2),
            run_order=0,
        ),
        ArmRecord(
            "p",
            "run-spec",
            "spec",
            "speculative",
            "builtin",
            manifest={"dtype": "bf16", "capacity": {"max_slots": 4}},
            strategy=StrategySpec("draft", k=k, draft_id="d4"),
            run_order=1,
        ),
    ]
    if alternative:
        out.append(
            ArmRecord(
                "p",
                "run-alt",
                "alt",
                "alternative",
                "builtin",
                manifest={"dtype": "bf16", "capacity": {"max_slots": 6}},
                budget=ResourceBudget(
                    matched_against="spec", notes=["draft memory -> 2 more slots"]
                ),
                run_order=2,
            )
        )
    if control:  # the A/A copy of the baseline, run last
        out.append(
            ArmRecord(
                "p",
                "run-ctl",
                "ctl",
                "control",
                "builtin",
                manifest={"dtype": "bf16", "capacity": {"max_slots": 4}},
                budget=ResourceBudget(memory_bytes=2 << 30, cores=2),
                run_order=3,
            )
        )
    return out


# seconds between a cell's requests: longer than any request, so no two are on the server at
# once and each pair is its own busy period (analysis.clusters); a case of queued requests
# builds its own times
SPACING = 20.0


@dataclass
class Cell:
    """One (group, phase): how the candidate arms behave relative to the baseline."""

    spec: float = 0.7  # candidate E2E / baseline E2E
    alt: float = 1.0
    n: int = 60
    base_e2e: float = 2.0
    spec_status: Mapping[int, str] = field(default_factory=dict)  # request index -> status
    retrieval_s: float = 0.0
    decode_share: float = 0.8  # of the server-side E2E
    noise: float = 0.03  # log-scale sd of each request's own latency noise, per arm


def _requests(
    arm: str,
    run: str,
    group: str,
    phase: str,
    c: Cell,
    factor: float,
    rng: np.random.Generator,
    base_lat: np.ndarray,
    start: int,
) -> list[RequestRecord]:
    out = []
    noise = rng.lognormal(0, c.noise, c.n)
    for i in range(c.n):
        e2e = float(base_lat[i] * factor * noise[i])
        status = c.spec_status.get(i, "ok") if arm == "spec" else "ok"
        t0 = float(start + i) * SPACING
        decode = e2e * c.decode_share
        rid = f"{phase}-{start + i:06d}"
        out.append(
            RequestRecord(
                run,
                arm,
                phase,
                group,
                rid,
                t0,
                status,
                sent_t=t0,
                first_content_t=t0 + 0.1 * e2e,
                done_t=t0 + e2e if status == "ok" else None,
                output_tokens=200 if status == "ok" else None,
                prompt_tokens=100,
                deadline_s=c.base_e2e * 1.5,
                ttft_slo_s=c.base_e2e,
                queue_s=0.0,
                prefill_s=e2e - decode,
                decode_s=decode,
                client_stages={"retrieval": c.retrieval_s} if c.retrieval_s else {},
                prompt_id=f"{group}-{i}",
            )
        )
    return out


def case(
    cells: Mapping[tuple[str, str], Cell],
    *,
    config: Mapping | None = None,
    alternative: bool = True,
    control: bool = True,
    drift: Mapping[tuple[str, str], float] | None = None,
    quality: list[QualityRecord] | None = None,
    consistency: list[ConsistencyRecord] | None = None,
    rounds: bool = True,
    verify_ratio: float = 1.05,
    seed: int = 0,
) -> PilotData:
    """A pilot with arms base / spec (/ alt) (/ ctl, the A/A control) over the given (group,
    phase) cells; ``drift`` multiplies an (arm, phase)'s latencies (the machine slower during
    that arm's run of the phase)."""
    rng = np.random.default_rng(seed)
    ctl_rng = np.random.default_rng([seed, 1])  # its own stream: the other arms' draws unchanged
    reqs: list[RequestRecord] = []
    start: dict[str, int] = {}
    for (group, phase), c in cells.items():
        s = start.get(phase, 0)
        base_lat = c.base_e2e * rng.lognormal(0, 0.25, c.n)
        for arm, run, f in (
            ("base", "run-base", 1.0),
            ("spec", "run-spec", c.spec),
            ("alt", "run-alt", c.alt),
            ("ctl", "run-ctl", 1.0),
        ):
            if (arm == "alt" and not alternative) or (arm == "ctl" and not control):
                continue
            f *= (drift or {}).get((arm, phase), 1.0)
            r = ctl_rng if arm == "ctl" else rng
            reqs += _requests(arm, run, group, phase, c, f, r, base_lat, s)
        start[phase] = s + c.n
    phases = [
        PhaseRecord(
            run,
            arm,
            ph,
            0.0,
            float(start[ph]) * SPACING,
            PHASES.get(ph, 1.0),
            start[ph],
            actual_start_t=0.0,
            actual_end_t=float(start[ph]) * SPACING,
            status="complete",
        )
        for arm, run in (
            ("base", "run-base"),
            ("spec", "run-spec"),
            ("alt", "run-alt"),
            ("ctl", "run-ctl"),
        )
        for ph in start
        if (alternative or arm != "alt") and (control or arm != "ctl")
    ]
    groups = sorted({g for g, _ in cells})
    data = PilotData(
        pilot=PilotRecord(
            "p", "case", dict(config or TRACE_CONFIG), "sha", "0.1.0", 0.0, hardware=XEON
        ),
        arms=arms(alternative, control=control),
        phases=phases,
        requests=reqs,
        quality=quality or [],
        consistency=consistency or [],
        snapshots=snapshots(),
    )
    if rounds:
        data.request_rounds = round_aggregates(cells, groups)
        data.verify_costs = [
            VerifyCostPoint("spec", "calibration", 1, 1, 20, 0.010, dtype="bf16"),
            VerifyCostPoint("spec", "calibration", 4, 1, 20, 0.010 * verify_ratio, dtype="bf16"),
        ]
    return data


def round_aggregates(
    cells: Mapping[tuple[str, str], Cell], groups: list[str]
) -> list[RequestRounds]:
    """Per request: plain 20 ms/token; spec k=3 with 2.5 tokens/round and a cost per token
    set so decode speed-up = 1 / cell.spec."""
    out = []
    for (group, phase), c in cells.items():
        for i in range(c.n):
            rid = f"{phase}-{i:06d}"
            out.append(
                RequestRounds(
                    "run-base", "base", phase, group, rid, 100, 0, 0, 0, 100, 0.0, 1.8, 0.2
                )
            )
            t = 2.0 * c.spec * 100 / 100  # seconds for 100 committed tokens
            out.append(
                RequestRounds(
                    "run-spec",
                    "spec",
                    phase,
                    group,
                    rid,
                    40,
                    40,
                    120,
                    60,
                    100,
                    0.15 * t,
                    0.75 * t,
                    0.10 * t,
                    pos_proposed=[40, 40, 40],
                    pos_accepted=[30, 20, 10],
                    accepted_hist=[10, 10, 10, 10],
                )
            )
    return out


def snapshots() -> list[MetricSnapshot]:
    gib = 1 << 30
    return [
        MetricSnapshot(
            "run-base",
            "base",
            "peak",
            "after",
            0.0,
            "builtin",
            rss_bytes=2 * gib,
            target_weight_bytes=gib // 2,
            kv_allocated_bytes=gib // 4,
        ),
        MetricSnapshot(
            "run-spec",
            "spec",
            "peak",
            "after",
            0.0,
            "builtin",
            rss_bytes=2 * gib + 300 * (1 << 20),
            target_weight_bytes=gib // 2,
            draft_weight_bytes=100 * (1 << 20),
            draft_kv_bytes=50 * (1 << 20),
            kv_allocated_bytes=gib // 4 + 50 * (1 << 20),  # the target's KV + the draft's
        ),
    ]


def key_checks(
    arm: str, group: str, passed: int, failed: int, reason: str = "amount field missing"
) -> list[QualityRecord]:
    return [
        QualityRecord(
            f"run-{arm}",
            arm,
            group,
            f"{group}-{i}",
            "amount",
            "required",
            "key",
            i < passed,
            [] if i < passed else [reason],
        )
        for i in range(passed + failed)
    ]


def full_case(drill_status: str = "not_possible") -> PilotData:
    """A pilot with every kind of record, so every section and plot of the report has data."""
    from specpilot.records import ChunkGaps, CompatRecord, DrillRecord

    cs = {
        (g, p): Cell(spec=0.7 if g != "code" else 1.2, n=40) for g in ("code", "zh") for p in PHASES
    }
    # code: slower and key failures (rejected either way); zh: faster, quality intact
    q = key_checks("base", "code", 10, 0) + key_checks("spec", "code", 4, 6)
    q += key_checks("base", "zh", 10, 0) + key_checks("spec", "zh", 10, 0)
    d = case(cs, quality=q)
    d.chunk_gaps = [
        ChunkGaps(f"run-{arm}", arm, p, g, [0.02, 0.05, 0.04], [1, 3, 2])
        for arm in ("base", "spec", "alt")
        for g in ("code", "zh")
        for p in PHASES
    ]
    d.compat = [
        CompatRecord(f"run-{arm}", arm, feature, status, evidence=f"{feature} on {arm}")
        for arm in ("base", "spec", "alt")
        for feature, status in (
            ("streaming", "pass"),
            ("stop_in_round", "pass" if arm == "alt" else "fail"),  # both compared arms fail
            ("tool_call", "unsupported"),
        )
    ]
    d.drills = [
        DrillRecord(
            "run-spec",
            "spec",
            "peak",
            "none" if drill_status == "not_possible" else "runtime_switch",
            drill_status,
            reason="arm given only by URL" if drill_status == "not_possible" else "",
            switch_in_force_s=None if drill_status == "not_possible" else 0.02,
            recovery_s=None if drill_status == "not_possible" else 3.5,
        )
    ]
    return d


def compare(t, base, cand, *, offered_rates=None, drift=None, **settings):
    """``paired.compare_arms`` with the analysis config's defaults, ``settings`` replacing some
    (resamples, seed, level, min_pairs, equivalence_margin, ...)."""
    import dataclasses

    from specpilot.analysis.config import AnalysisConfig
    from specpilot.analysis.paired import CompareSettings, compare_arms

    st = dataclasses.replace(CompareSettings.of(AnalysisConfig()), **settings)
    return compare_arms(t, base, cand, st, drift=drift, offered_rates=offered_rates)


# -- the embedded default at fixed rates (the tests of looks, budgets and memory) -------------
BUILTIN_DEADLINES = {"zh_business": 20.0, "code": 25.0, "structured": 12.0, "longform": 60.0}


def at_fixed_rates(data: dict, off_rate: float = 1.0, peak_rate: float = 2.0) -> dict:
    """The default pilot's mapping with its levels at absolute rates (44 s and 22 s) and the
    builtin groups' deadlines: nothing waits for the capacity probe, so a test of what comes
    after it (the design, the looks, the budget) starts no probe engine."""
    data["episodes"] = {**data["episodes"], "fit_budget": False}
    for p, rate, dur in zip(
        data["workload"]["phases"], (off_rate, peak_rate), (44, 22), strict=True
    ):
        p["duration_s"] = dur
        p["arrival"].pop("target_utilization", None)
        p["arrival"]["target_rate"] = rate
    for name, g in data["workload"]["groups"].items():
        g["slo"] = {**g["slo"], "deadline_s": BUILTIN_DEADLINES[name]}
        g["slo"].pop("unloaded_x", None)
    return data
