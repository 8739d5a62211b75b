"""A phase plan becomes one deterministic schedule: what to send, when, with which limits.

    >>> from specpilot.workload import build_schedule, parse_workload
    >>> cfg = parse_workload({"seed": 3, "groups": {"code": {}, "structured": {}},
    ...     "phases": [{"name": "peak", "duration_s": 20, "arrival": {"kind": "poisson", "rate": 1}}]})
    >>> s = build_schedule(cfg)
    >>> s.to_json() == build_schedule(cfg).to_json()   # same seed: byte-identical
    True
    >>> r = s.requests[0]
    >>> r.phase, r.group in ("code", "structured"), r.max_tokens > 0, r.deadline_s > 0
    ('peak', True, True, True)

Contract with the load generator (``specpilot.loadgen``) and the store:

- ``Schedule.requests`` is a list of :class:`~specpilot.records.ScheduledRequest`, ordered by
  phase (in plan order) then ``send_t``. ``index`` is unique over the whole schedule (0..N-1),
  so ``f"{phase}-{index:06d}"`` is a stable request id across arms and runs.
- ``send_t`` is seconds from the start of the request's phase. Phases run in plan order;
  ``PhaseInfo.start_s`` is the nominal offset of each phase when they run back to back.
- A warm-up phase named ``warmup`` (requests flagged ``warmup=True``) comes first when the
  YAML asks for warm-up requests; analysis excludes them.
- ``client_stages`` maps each stage the request runs to the seconds to wait before sending:
  drawn for a simulated stage, ``0.0`` for a real one. The real ones (a BM25 search, whose
  passages are already in ``messages``) are listed in ``measured_stages``: they do their work
  at send time and are timed then, so their ``0.0`` is "nothing planned", not a duration.
  ``Schedule.stages`` holds each stage's spec; run them with
  :class:`specpilot.workload.stages.StageRunner`.
- ``ignore_eos`` / ``input_tokens_target`` are set by trace-replay phases only.
- A request-log phase's requests carry ``api``, ``prompt`` (completions) and ``body_sha256``
  (absent from the JSON elsewhere): they are sent to the route they were logged on. Its
  ``PhaseInfo.arrival`` describes the log by counts, lengths and hashes (``not_replayed``: the
  body fields left out, by name); the prompts are only in the requests.
- ``seed`` is set for sampled groups (temperature > 0) so every arm samples with the same
  per-request seed; greedy groups leave it ``None``.

Determinism: every random choice comes from a ``numpy`` generator seeded from
``SeedSequence([seed, phase, purpose])``; prompts of a group are taken in a seeded shuffled
cycle (every prompt is used before any repeats). ``to_json()`` is canonical (sorted keys,
times rounded to microseconds), so the same config and seed give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specpilot.errors import ConfigError, InputFileError
from specpilot.records import ScheduledRequest
from specpilot.workload.assign import RequestFactory, unreplayed_fields
from specpilot.workload.config import WorkloadConfig, WorkloadError, load_workload, parse_workload
from specpilot.workload.phases import ArrivalPlanner, plan_phases
from specpilot.workload.resolve import groups_section, prompt_cycles, resolve_groups
from specpilot.workload.stages import StagePlanner

SCHEDULE_VERSION = 1


@dataclass(frozen=True)
class PhaseInfo:
    name: str
    start_s: float
    duration_s: float
    requests: int
    arrival: dict[str, Any]
    groups: dict[str, float]
    warmup: bool = False
    window: dict[str, Any] | None = None  # trace replay: the window found in the trace

    @property
    def offered_rate(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0


@dataclass
class Schedule:
    """The deterministic schedule every arm replays (see the module docstring)."""

    name: str
    seed: int
    config_sha256: str
    phases: list[PhaseInfo]
    groups: dict[str, dict[str, Any]]
    stages: dict[str, dict[str, Any]]
    requests: list[ScheduledRequest]
    version: int = SCHEDULE_VERSION
    base_dir: str | None = field(default=None, compare=False)  # resolves stage paths; not in JSON

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[ScheduledRequest]:
        return iter(self.requests)

    @property
    def phase_names(self) -> list[str]:
        return [p.name for p in self.phases]

    def phase(self, name: str) -> list[ScheduledRequest]:
        if name not in self.phase_names:
            raise ConfigError(
                f"no phase {name!r} in the schedule (phases: {', '.join(self.phase_names)})"
            )
        return [r for r in self.requests if r.phase == name]

    def select(
        self, phases: Sequence[str] | None = None, *, warmup: bool = True
    ) -> list[ScheduledRequest]:
        """Requests of the named phases (all when None), with or without warm-up requests."""
        for n in phases or ():
            self.phase(n)
        keep = set(phases) if phases else set(self.phase_names)
        if warmup and phases:
            keep.add("warmup")
        return [r for r in self.requests if r.phase in keep and (warmup or not r.warmup)]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "seed": self.seed, "requests": len(self.requests)}
        out["phases"] = [
            {
                "name": p.name,
                "duration_s": p.duration_s,
                "requests": p.requests,
                "offered_rate": round(p.offered_rate, 4),
                "arrival": p.arrival.get("kind"),
            }
            for p in self.phases
        ]
        counts: dict[str, int] = {}
        for r in self.requests:
            counts[r.group] = counts.get(r.group, 0) + 1
        out["by_group"] = dict(sorted(counts.items()))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "name": self.name,
            "seed": self.seed,
            "config_sha256": self.config_sha256,
            "phases": [asdict(p) for p in self.phases],
            "groups": self.groups,
            "stages": self.stages,
            "requests": [r.to_dict() for r in self.requests],
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False, indent=indent)

    def sha256(self) -> str:
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    def change_from(self, stored: dict[str, Any]) -> str | None:
        """None when ``stored`` (a pilot file's copy) is this schedule, else what differs in a
        few words: the first phase whose request count or duration moved."""
        if Schedule.from_dict(stored).sha256() == self.sha256():
            return None
        before = {p["name"]: p for p in stored.get("phases", [])}
        for p in self.phases:
            q = before.get(p.name)
            if q is None:
                return f"phase {p.name} is new"
            if q.get("requests") != p.requests or q.get("duration_s") != p.duration_s:
                return (
                    f"phase {p.name}: {q.get('requests')} requests in {q.get('duration_s')} s "
                    f"then, {p.requests} in {p.duration_s} s now"
                )
        return "the requests themselves (prompts, lengths or arrival times)"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def from_dict(cls, d: dict[str, Any], base_dir: str | None = None) -> Schedule:
        if d.get("version") != SCHEDULE_VERSION:
            raise InputFileError(
                f"schedule version {d.get('version')!r}: this specpilot reads {SCHEDULE_VERSION}",
                fix="rebuild it with `specpilot schedule WORKLOAD.yaml --out FILE`",
            )
        return cls(
            name=d["name"],
            seed=d["seed"],
            config_sha256=d["config_sha256"],
            phases=[PhaseInfo(**p) for p in d["phases"]],
            groups=d["groups"],
            stages=d["stages"],
            requests=[ScheduledRequest(**r) for r in d["requests"]],
            base_dir=base_dir,
        )

    @classmethod
    def from_json(cls, text: str, base_dir: str | None = None) -> Schedule:
        return cls.from_dict(json.loads(text), base_dir)

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        """A schedule file written by :meth:`save` (``specpilot schedule --out``)."""
        p = Path(path)
        try:
            return cls.from_json(p.read_text("utf-8"), base_dir=str(p.parent))
        except InputFileError:
            raise
        except OSError as exc:
            raise InputFileError(f"schedule {p}: {exc.strerror or exc}") from None
        except (ValueError, KeyError, TypeError) as exc:  # json errors are ValueErrors
            raise InputFileError(
                f"schedule {p}: not a specpilot schedule ({type(exc).__name__}: {exc})",
                fix="rebuild it with `specpilot schedule WORKLOAD.yaml --out FILE`",
            ) from None


# -- building -------------------------------------------------------------------------


def _described(arrival: dict[str, Any], plan: Any, capacity_rps: float | None) -> dict[str, Any]:
    """The arrival's description, with the utilization it was given and the capacity that
    made its rate (only where the phase gives ``target_utilization``: an unchanged schedule
    keeps its JSON, so pilots started before this field resume)."""
    u = getattr(plan.model.arrival, "target_utilization", None) if plan.model else None
    if u is None or capacity_rps is None:
        return arrival
    return {**arrival, "target_utilization": u, "capacity_rps": round(float(capacity_rps), 6)}


def build_schedule(
    config: WorkloadConfig | dict[str, Any] | str | Path,
    *,
    seed: int | None = None,
    base_dir: str | Path | None = None,
    capacity_rps: float | None = None,
) -> Schedule:
    """Build the schedule of a workload (a config, a dict, or a YAML path).

    ``seed`` overrides the config's seed; ``base_dir`` resolves relative paths (default: the
    YAML's directory, or the current directory for a config object); ``capacity_rps``, the
    baseline's measured sustainable rate, turns each ``target_utilization`` into a rate (a
    phase that gives one needs it). The concerns live in
    their own modules: groups (:mod:`.resolve`), arrivals per phase (:mod:`.phases`), prompts
    and lengths per request (:mod:`.assign`), client stages (:mod:`.stages`).
    """
    cfg, base = _config(config, base_dir)
    seed = cfg.seed if seed is None else seed
    groups = resolve_groups(cfg, base)
    cycles = prompt_cycles(cfg, groups, seed)
    stage_specs = {n: s.model_dump(mode="json") for n, s in cfg.stages.items()}
    factory = RequestFactory(cfg, groups, cycles, seed, StagePlanner(stage_specs, base))
    arrivals = ArrivalPlanner(cfg, seed, base, capacity_rps)
    requests: list[ScheduledRequest] = []
    phases: list[PhaseInfo] = []
    start = 0.0
    for plan in plan_phases(cfg):
        arr = arrivals.arrivals(plan)
        new = factory.phase_requests(arr, first_index=len(requests))
        if not new and not plan.warmup:
            raise WorkloadError(_empty_phase(plan.name, arr))
        requests += new
        arrival = _described(arr.process.describe(), plan, capacity_rps)
        if arr.logged is not None:
            arrival["not_replayed"] = unreplayed_fields(arr.logged)
        phases.append(
            PhaseInfo(
                name=plan.name,
                start_s=round(start, 6),
                duration_s=round(float(arr.duration_s), 6),
                requests=len(new),
                arrival=arrival,
                groups=dict(plan.weights),
                warmup=plan.warmup,
                window=arr.window,
            )
        )
        start += float(arr.duration_s)
    return Schedule(
        name=cfg.name,
        seed=seed,
        config_sha256=cfg.sha256(),
        phases=phases,
        groups=groups_section(cfg, groups, cycles),
        stages=stage_specs,
        requests=requests,
        base_dir=str(base),
    )


def _empty_phase(name: str, arr: Any) -> str:
    """The error for a measured phase without a single request: what it replays, and the fix."""
    desc = arr.process.describe()
    where = f"{desc.get('kind', 'arrival')} arrivals"
    if desc.get("kind") == "request_log":
        lo, hi = desc.get("window") or (0.0, float(arr.duration_s))
        return (
            f"phases.{name}: the request-log window {lo:g}-{hi:g} s of {desc.get('source')} "
            f"holds no request ({desc.get('requests_in_log')} in the log): a phase with nothing "
            "scheduled measures nothing; choose a window with requests (specpilot "
            "trace-windows LOG lists them, in the log's seconds) or a longer duration_s"
        )
    if desc.get("window"):
        lo, hi = desc["window"]
        where = f"the trace window {lo:g}-{hi:g} s of {desc.get('source', 'the trace')}"
    return (
        f"phases.{name}: {where} give no request in its {float(arr.duration_s):g} s: a phase "
        "with nothing scheduled measures nothing; choose a window with arrivals "
        "(specpilot trace-windows TRACE.csv lists them), a longer duration_s or a higher rate"
    )


def _config(
    config: WorkloadConfig | dict[str, Any] | str | Path, base_dir: str | Path | None
) -> tuple[WorkloadConfig, Path]:
    if isinstance(config, (str, Path)):
        base = Path(base_dir) if base_dir is not None else Path(config).resolve().parent
        return load_workload(config), base
    cfg = config if isinstance(config, WorkloadConfig) else parse_workload(config)
    return cfg, Path(base_dir) if base_dir is not None else Path.cwd()
