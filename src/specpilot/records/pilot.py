"""Records: what was run: the pilot, its hardware, arms, strategies, budgets and phases (see ``specpilot.records``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# -- the pilot: what was run -------------------------------------------------------------


@dataclass
class HardwareFacts:
    """The machine a pilot ran on (the verdict depends on it: DESIGN.md, "Hardware")."""

    cpu_model: str = ""
    cpu_flags: list[str] = field(default_factory=list)  # e.g. avx2, avx512_bf16, amx_tile
    cpu_logical_cores: int | None = None
    cpu_affinity: int | None = None  # cores this process may use
    memory_bytes: int | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)  # name, memory_bytes, driver
    os: str = ""
    python: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PilotRecord:
    """One pilot: the config as given (and its sha256), the version and the machine."""

    pilot_id: str
    name: str
    config: dict[str, Any]
    config_sha256: str
    specpilot_version: str
    created_unix: float
    finished_unix: float | None = None
    status: str = "running"  # running | complete | interrupted | failed
    hardware: HardwareFacts = field(default_factory=HardwareFacts)
    schedule: dict[str, Any] | None = None  # the schedule every arm replays (Schedule.to_dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StrategySpec:
    """The one speculative switch an arm turns on (R6), or none.

    kind: ``none`` | ``draft`` (an independent draft model: draft_id, draft_sha256, k) |
    ``ngram`` (an engine's n-gram / prompt-lookup mode: ngram_type, params; a different
    resource structure, never costed with the draft-model estimate) | ``hybrid`` |
    ``other`` (EAGLE, MTP...: named in ``params``).
    """

    kind: str = "none"
    k: int | None = None
    draft_id: str | None = None
    draft_sha256: str | None = None
    ngram_type: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ResourceBudget:
    """What an arm may use, and what that was matched against (R6: equal total budget).

    matched_against: the arm whose budget this one equals (e.g. the alternative matches the
    speculative arm: the draft's memory and cores given to target capacity), with the
    accounting in ``notes``.
    """

    memory_bytes: int | None = None
    cores: int | None = None
    devices: list[str] = field(default_factory=list)
    matched_against: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# control: a second instance of the baseline's exact config, on processes of its own: the
# pilot's A/A measurement (analysis.comparison.aa)
# planted: the baseline's processes through a proxy that dilates latency by a known factor
# within: a speculative arm's own processes with speculation switched off at run time
ARM_ROLES = ("baseline", "speculative", "alternative", "control", "extra", "planted", "within")
# the engines an arm can run on (``ArmRecord.engine``); ``TOTALS_ENGINES`` report per-request
# speculative totals, not rounds (store.aggregates turns them into round-summary rows)
ENGINES = ("builtin", "llamacpp", "vllm", "sglang", "openai")
TOTALS_ENGINES = ("llamacpp",)
# engines whose rounds come as counts without times: their round rows carry times derived from
# the request's generation time (``backends.vllm``), so no draft / verify split is measured
DERIVED_TIMES_ENGINES = ("vllm",)


@dataclass
class ArmRecord:
    """One execution of one arm (``run_id``): role, engine, frozen manifest, strategy, budget.

    manifest: the backend's ``describe()`` (model files with sha256, tokenizer hash, engine
    version, launch flags, hardware) plus the frozen settings the pilot checks across arms:
    sampling defaults, context limit, parallelism, threads, dtype. ``manifest_sha256`` hashes
    the frozen part, so quality results compare like with like after a model upgrade.
    cold_start_s: start to healthy (model load), timed apart from the steady state.
    load_summary: the load generator's own account of the run (``LoadSummary.to_dict()``:
    dispatch lag, trustworthy and why not, stop reason, cut phases).
    """

    pilot_id: str
    run_id: str
    arm: str
    role: str  # one of ARM_ROLES
    engine: str
    manifest: dict[str, Any] = field(default_factory=dict)
    manifest_sha256: str = ""
    strategy: StrategySpec = field(default_factory=StrategySpec)
    budget: ResourceBudget = field(default_factory=ResourceBudget)
    run_order: int = 0
    repetition: int = 0
    status: str = "planned"  # planned | running | complete | failed | interrupted
    cold_start_s: float | None = None
    started_unix: float | None = None
    finished_unix: float | None = None
    error: str | None = None
    load_summary: dict[str, Any] = field(default_factory=dict)
    completed_steps: list[str] = field(default_factory=list)  # load, drill, compat, quality

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PhaseRecord:
    """One phase of one run: planned edges on the schedule clock, actual edges, anchor.

    planned_start_s / planned_end_s: seconds from the run's timeline start (``t_run``).
    actual_start_t / actual_end_t: monotonic (``time.perf_counter``) like every request time;
    ``actual_end_t`` is when the phase's last request ended (None: cut by an interruption,
    ``status`` says so, and ``cut_t`` is when the cut came). ``t_run`` is the monotonic instant
    of schedule time 0 and ``wall_t_run`` the same instant in Unix time:
    wall = wall_t_run + (t - t_run).

    ``other_cpu_cores``: the mean number of cores that processes outside the pilot (its own
    process and the engines it started) used while the phase ran, from ``/proc/stat``;
    ``steal_fraction``: the share of the machine's CPU time the hypervisor gave to other
    tenants meanwhile. Either is drift that the balanced arm order cannot spread over the arms
    when it hits one arm-phase only (None: not measured, e.g. not Linux or cut).
    """

    run_id: str
    arm: str
    phase: str
    planned_start_s: float
    planned_end_s: float
    offered_rate: float  # scheduled requests / planned duration (req/s)
    scheduled: int  # requests scheduled in the phase
    t_run: float | None = None
    wall_t_run: float | None = None
    actual_start_t: float | None = None
    actual_end_t: float | None = None
    status: str = "planned"  # planned | running | complete | interrupted
    warmup: bool = False
    cut_t: float | None = None
    other_cpu_cores: float | None = None
    steal_fraction: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
