"""Hand-built pilots for the analysis and report tests (no model, no store).

``case(...)`` writes a pilot of the episode design (``pilot.design``) from per-(group, phase)
latency factors. Each level is replayed as ``EPISODES`` episodes (phases ``level~01`` ...), each
served by one of ``PROCESSES`` engine processes per arm: the speculative arm's processes serve
the baseline too, switched off in place (``episodes.in_place``, the default pilot's design),
and the equal-budget alternative and the A/A control run processes of their own. Every request
of the baseline gets a seeded latency, the same schedule slot in a candidate arm gets that
latency times the cell's factor times a little seeded noise, so the expected outcome of each
paired comparison is known by construction (factor 0.7: faster; 1.3: slower; 1.0: no
difference).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from specpilot.pilot.design import crossed
from specpilot.records import (
    EPISODE_SEP,
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
    level_of,
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


# per level and per arm: two pools of 4 processes leave a pooled cell of 4 task groups
# 14 - 7 - 3 = 4 degrees of freedom for the episode noise (``analysis.episodes.celltest``); in place,
# a process component kept by the sometimes-pool test (1 time in 4 where there is none) has 3
EPISODES = 14
PROCESSES = 4


def run_of(arm: str, process: int) -> str:
    """The run id of an arm's process (its first keeps the plain ``run-<arm>``)."""
    return f"run-{arm}" if process == 0 else f"run-{arm}.p{process}"


def arms(
    alternative: bool = True, k: int = 3, control: bool = True, processes: int = PROCESSES
) -> list[ArmRecord]:
    """Each arm's runs, one per process; the baseline's reach the speculative arm's processes
    (switched off in place: ``analysis.episodes.celltest.physical_of``)."""
    first = {
        "base": ArmRecord(
            "p", "run-base", "base", "baseline", "builtin",
            manifest={"dtype": "bf16", "capacity": {"max_slots": 4}},
            budget=ResourceBudget(memory_bytes=2 << 30, cores=2),
        ),
        "spec": ArmRecord(
            "p", "run-spec", "spec", "speculative", "builtin",
            manifest={"dtype": "bf16", "capacity": {"max_slots": 4}},
            strategy=StrategySpec("draft", k=k, draft_id="d4"),
        ),
        "alt": ArmRecord(
            "p", "run-alt", "alt", "alternative", "builtin",
            manifest={"dtype": "bf16", "capacity": {"max_slots": 6}},
            budget=ResourceBudget(matched_against="spec", notes=["draft memory -> 2 more slots"]),
        ),
        "ctl": ArmRecord(  # the A/A copy of the baseline, on processes of its own
            "p", "run-ctl", "ctl", "control", "builtin",
            manifest={"dtype": "bf16", "capacity": {"max_slots": 4}},
            budget=ResourceBudget(memory_bytes=2 << 30, cores=2),
        ),
    }  # fmt: skip
    out = []
    for name, rec in first.items():
        if (name == "alt" and not alternative) or (name == "ctl" and not control):
            continue
        for j in range(processes):
            manifest = dict(rec.manifest)
            if name == "base":
                manifest["within"] = {"of_run": run_of("spec", j)}
            out.append(
                dataclasses.replace(
                    rec,
                    run_id=run_of(name, j),
                    manifest=manifest,
                    run_order=len(out),
                    status="complete",
                )
            )
    return out


# seconds between a cell's requests: longer than any request, so no two are on the server at
# once; a case of queued requests builds its own times
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


@dataclass(frozen=True)
class Slot:
    """Where the ``i``-th request of a level sits: its episode phase and request id; episodes
    take the level's requests in turn."""

    phase: str
    index: int
    episodes: int = EPISODES

    @property
    def episode(self) -> int:
        return self.index % self.episodes + 1

    @property
    def episode_phase(self) -> str:
        return f"{self.phase}{EPISODE_SEP}{self.episode:02d}"

    @property
    def request_id(self) -> str:
        return f"{self.episode_phase}-{self.index:06d}"


def serving(episodes: int, processes: int) -> dict[str, list[int]]:
    """Per arm, the process serving each episode: the pilot's own crossing
    (``pilot.design.crossed``), the baseline on the speculative arm's processes (in place)."""
    spec, alt, ctl = crossed(episodes, processes, 3, 0)
    return {"base": spec, "spec": spec, "alt": alt, "ctl": ctl}


def _requests(
    arm: str,
    group: str,
    slots: list[Slot],
    c: Cell,
    factor: float,
    rng: np.random.Generator,
    base_lat: np.ndarray,
    procs: list[int],
    machine: tuple[np.ndarray, np.ndarray],
) -> list[RequestRecord]:
    """``machine``: the arm's factor per process and per episode of this level."""
    out = []
    noise = rng.lognormal(0, c.noise, c.n)
    per_process, per_episode = machine
    for i, slot in enumerate(slots):
        p = procs[slot.episode - 1]
        e2e = float(
            base_lat[i] * factor * noise[i] * per_process[p] * per_episode[slot.episode - 1]
        )
        status = c.spec_status.get(i, "ok") if arm == "spec" else "ok"
        t0 = float(slot.index) * SPACING
        decode = e2e * c.decode_share
        out.append(
            RequestRecord(
                run_of(arm, p),
                arm,
                slot.episode_phase,
                group,
                slot.request_id,
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
    episodes: int = EPISODES,
    processes: int = PROCESSES,
    process_sd: float = 0.0,
    episode_sd: float = 0.0,
) -> PilotData:
    """A pilot with arms base / spec (/ alt) (/ ctl, the A/A control) over the given (group,
    phase) cells, ``episodes`` per level on ``processes`` per arm (module docstring);
    ``drift`` multiplies an (arm, phase)'s latencies (that arm slower at that level). The
    machine, log-normal with these sds: each process's lasting speed (the baseline's is the
    speculative arm's process, in place), and each arm's part of each episode."""
    rng = np.random.default_rng(seed)
    ctl_rng = np.random.default_rng([seed, 3])  # its own stream: the other arms' draws unchanged
    reqs: list[RequestRecord] = []
    slots: dict[str, list[Slot]] = {}
    names = ["base", "spec"] + ["alt"] * alternative + ["ctl"] * control
    serve = serving(episodes, processes)
    m_rng = np.random.default_rng([seed, 2])
    per_process = {a: m_rng.lognormal(0, process_sd, processes) for a in ("spec", "alt", "ctl")}
    per_process["base"] = per_process["spec"]
    phases = list(dict.fromkeys(p for _, p in cells))
    per_episode = {
        (a, p): m_rng.lognormal(0, episode_sd, episodes)
        for a in ("base", "spec", "alt", "ctl")
        for p in phases
    }
    for (group, phase), c in cells.items():
        mine = slots.setdefault(phase, [])
        cell = [Slot(phase, len(mine) + i, episodes) for i in range(c.n)]
        mine += cell
        base_lat = c.base_e2e * rng.lognormal(0, 0.25, c.n)
        for arm in ("base", "spec", "alt", "ctl"):
            if arm not in names:
                continue
            f = {"spec": c.spec, "alt": c.alt}.get(arm, 1.0) * (drift or {}).get((arm, phase), 1.0)
            r = ctl_rng if arm == "ctl" else rng
            machine = (per_process[arm], per_episode[(arm, phase)])
            reqs += _requests(arm, group, cell, c, f, r, base_lat, serve[arm], machine)
    data = PilotData(
        pilot=PilotRecord(
            "p", "case", dict(config or TRACE_CONFIG), "sha", "0.1.0", 0.0, hardware=XEON
        ),
        arms=arms(alternative, control=control, processes=processes),
        phases=[p for arm in names for p in _phases(arm, slots, serve[arm])],
        requests=reqs,
        quality=quality or [],
        consistency=consistency or [],
        snapshots=snapshots(),
    )
    if rounds:
        data.request_rounds = round_aggregates(cells, reqs)
        data.verify_costs = [
            VerifyCostPoint("spec", "calibration", 1, 1, 20, 0.010, dtype="bf16"),
            VerifyCostPoint("spec", "calibration", 4, 1, 20, 0.010 * verify_ratio, dtype="bf16"),
        ]
    return data


def _phases(arm: str, slots: Mapping[str, list[Slot]], procs: list[int]) -> list[PhaseRecord]:
    """One record per (process, episode) of the arm: planned to last its requests / the level's
    rate (so the folded level offers ``PHASES``' rate), run when its requests were."""
    out = []
    for phase, xs in slots.items():
        rate = PHASES.get(phase, 1.0)
        start = 0.0
        by_episode: dict[str, list[Slot]] = {}
        for x in xs:
            by_episode.setdefault(x.episode_phase, []).append(x)
        for ep, mine in sorted(by_episode.items()):
            dur = len(mine) / rate
            t = [x.index * SPACING for x in mine]
            out.append(
                PhaseRecord(
                    run_of(arm, procs[mine[0].episode - 1]), arm, ep, start, start + dur, rate, len(mine),
                    actual_start_t=min(t), actual_end_t=max(t) + SPACING, status="complete",
                )
            )  # fmt: skip
            start += dur
    return out


def round_aggregates(
    cells: Mapping[tuple[str, str], Cell], requests: list[RequestRecord]
) -> list[RequestRounds]:
    """Per base and spec request: plain 20 ms/token; spec k=3 with 2.5 tokens/round and a cost
    per token set so decode speed-up = 1 / cell.spec."""
    out = []
    for q in requests:
        c = cells[(q.task_group, level_of(q.phase))]
        if q.arm == "base":
            out.append(
                RequestRounds(
                    q.run_id, "base", q.phase, q.task_group, q.request_id,
                    100, 0, 0, 0, 100, 0.0, 1.8, 0.2,
                )
            )  # fmt: skip
        elif q.arm == "spec":
            t = 2.0 * c.spec * 100 / 100  # seconds for 100 committed tokens
            out.append(
                RequestRounds(
                    q.run_id, "spec", q.phase, q.task_group, q.request_id,
                    40, 40, 120, 60, 100, 0.15 * t, 0.75 * t, 0.10 * t,
                    pos_proposed=[40, 40, 40],
                    pos_accepted=[30, 20, 10],
                    accepted_hist=[10, 10, 10, 10],
                )
            )  # fmt: skip
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


def table(data: PilotData):
    """The pilot's requests as the analysis sees them: by load level (``analysis.base.fold``)."""
    from specpilot.analysis.base.fold import fold
    from specpilot.analysis.base.requests import RequestTable

    return RequestTable.build(fold(data).requests, data.quality, data.arms)


def compare(t, base, cand, *, offered_rates=None, **settings):
    """``paired.compare_arms`` with the analysis config's defaults, ``settings`` replacing some
    (resamples, seed, level, min_pairs, equivalence_margin, ...), the baseline's runs on the
    speculative arm's processes (``case``'s in-place design)."""
    import dataclasses

    from specpilot.analysis.comparison.paired import CompareSettings, compare_arms
    from specpilot.analysis.config import AnalysisConfig

    st = dataclasses.replace(CompareSettings.of(AnalysisConfig()), **settings)
    physical = {run_of("base", j): run_of("spec", j) for j in range(PROCESSES)}  # in place
    return compare_arms(t, base, cand, st, offered_rates=offered_rates, physical=physical)


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


def decode_stalled(
    conditions: list[dict],
    engine: str = "builtin",
    stalled: int = 3,
    stall: float = 5.0,
    seed: int = 3,
) -> PilotData:
    """One group (``code``) at both levels, the speculative arm faster (0.7), except that
    ``stalled`` of its 60 peak requests spend ``stall`` x their decode time: its p99 TPOT there
    lands among them, its p50 does not move. Every arm on ``engine``; the group's SLO (TTFT 2 s,
    deadline 3 s and the percentile ``conditions``) as the schedule carries it."""
    d = case({("code", p): Cell(spec=0.7, n=60) for p in PHASES}, seed=seed)
    peak = sorted(
        (r for r in d.requests if r.arm == "spec" and level_of(r.phase) == "peak"),
        key=lambda r: r.request_id,
    )
    slow = {r.request_id for r in peak[:stalled]}
    d.requests = [
        dataclasses.replace(r, done_t=r.first_content_t + (r.done_t - r.first_content_t) * stall)
        if r.arm == "spec" and r.request_id in slow and r.first_content_t and r.done_t
        else r
        for r in d.requests
    ]
    d.arms = [dataclasses.replace(a, engine=engine) for a in d.arms]
    slo = {"ttft_s": 2.0, "deadline_s": 3.0, "conditions": conditions}
    d.pilot.schedule = {"groups": {"code": {"slo": slo}}}
    return d
