"""The workload YAML (pydantic, the edge): groups, client stages, warm-up and a phase plan.

Validation errors become one :class:`WorkloadError` (a ``ValueError``) whose lines name the
field and the fix, e.g. ``phases[1].arrival.rate: field required -> add 'rate: <requests/s>'``.
Unknown keys are errors (a typo must not silently fall back to a default). Relative paths
resolve against the YAML file's directory.

A complete example: ``examples/workload.yaml``. The smallest useful one::

    seed: 1
    groups: {code: {}, structured: {weight: 2}}
    phases:
      - {name: peak, duration_s: 30, arrival: {kind: poisson, rate: 1.0}}
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from specpilot import validation
from specpilot.errors import ConfigError, InputFileError
from specpilot.validation import FieldProblem, StrictModel
from specpilot.workload.checks import CHECK_KINDS, CheckModel
from specpilot.workload.groups import BUILTIN_GROUPS
from specpilot.workload.logconfig import RequestLogArrival
from specpilot.workload.slo import SLOModel
from specpilot.yamlpos import LineMap, yaml_error_text


class WorkloadError(ConfigError):
    """A workload file that does not validate; the message lists field -> fix."""


_Model = StrictModel  # unknown keys refused, frozen (specpilot.validation)


class LengthModel(_Model):
    mean: int = Field(ge=1, description="median/typical max_tokens")
    dist: Literal["fixed", "uniform", "lognormal"] = "fixed"
    min: int = Field(1, ge=1)
    max: int | None = Field(None, ge=1)
    sigma: float = Field(0.5, gt=0)
    ignore_eos: bool = Field(
        False,
        description="run every request to its max_tokens (equal work in both arms of a pair: "
        "a sampled answer that stops early in one arm only is not a speed difference)",
    )


class SamplingModel(_Model):
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: list[str] = Field(default_factory=list)


class SourceModel(_Model):
    format: Literal["openai_jsonl", "sharegpt", "specbench", "specpilot_jsonl"]
    path: str
    categories: list[str] | None = None
    limit: int | None = Field(None, ge=1)


class GroupModel(_Model):
    weight: float = Field(1.0, ge=0.0)
    split: Literal["eval", "dev", "train", "train+dev", "all"] = "eval"
    source: SourceModel | None = None
    description: str | None = None
    output: LengthModel | None = None
    sampling: SamplingModel | None = None
    slo: SLOModel | None = None
    # Quality checks for every prompt of the group (added to a built-in group's own). An
    # imported group without checks is compared between arms for consistency only.
    checks: list[CheckModel] = Field(default_factory=list)


class SimulatedStageModel(_Model):
    kind: Literal["simulated"]
    dist: Literal["fixed", "uniform", "lognormal"] = "lognormal"
    median_s: float | None = Field(None, ge=0)
    sigma: float = Field(0.5, gt=0)
    min_s: float | None = Field(None, ge=0)
    max_s: float | None = Field(None, ge=0)
    groups: list[str] | None = None  # None: every group
    probability: float = Field(1.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _params(self) -> SimulatedStageModel:
        if self.dist == "uniform" and (self.min_s is None or self.max_s is None):
            raise ValueError("a uniform stage needs min_s and max_s")
        if self.dist != "uniform" and self.median_s is None:
            raise ValueError(f"a {self.dist} stage needs median_s (seconds)")
        return self


class BM25StageModel(_Model):
    kind: Literal["bm25"]
    docs: str = "builtin"
    top_k: int = Field(3, ge=1)
    groups: list[str] | None = None
    probability: float = Field(1.0, ge=0.0, le=1.0)


StageModel = Annotated[SimulatedStageModel | BM25StageModel, Field(discriminator="kind")]


# A load level as a fraction of what the baseline sustains on this machine (the pilot's
# capacity probe measures it before the episodes): 0.3 is off-peak, 0.8 near peak; above 1 an
# overload by intent, past 1.5 a queue that only grows (refused).
UTILIZATION = Field(
    None, gt=0, le=1.5, description="fraction of the measured sustainable rate (capacity probe)"
)


class _RateArrival(_Model):
    """An arrival at ``rate`` requests/s or at ``target_utilization`` of the measured capacity:
    exactly one of the two."""

    rate: float | None = Field(None, gt=0)
    target_utilization: float | None = UTILIZATION

    @model_validator(mode="after")
    def _one_rate(self) -> _RateArrival:
        if self.rate is None and self.target_utilization is None:
            raise ValueError(
                "rate missing -> add rate: (requests/s), or target_utilization: (a fraction of "
                "the baseline's capacity, measured by the pilot's probe, e.g. 0.3)"
            )
        if self.rate is not None and self.target_utilization is not None:
            raise ValueError(
                "rate and target_utilization both given -> keep one: rate (requests/s) or "
                "target_utilization (a fraction of the measured capacity)"
            )
        return self


class ConstantArrival(_RateArrival):
    kind: Literal["constant"]


class PoissonArrival(_RateArrival):
    kind: Literal["poisson"]


class GammaArrival(_RateArrival):
    kind: Literal["gamma"]
    cv: float = Field(2.0, gt=0, description="burstiness: coefficient of variation of the gaps")


class StepModel(_Model):
    duration_s: float = Field(gt=0)
    rate: float = Field(ge=0)


class StepsArrival(_Model):
    kind: Literal["steps"]
    steps: list[StepModel] = Field(min_length=1)
    step_kind: Literal["constant", "poisson", "gamma"] = "poisson"
    cv: float = Field(2.0, gt=0)


class TraceArrival(_Model):
    kind: Literal["trace"]
    path: str
    window: Literal["off_peak", "peak", "burst", "all"] | tuple[float, float] = "peak"
    window_s: float = Field(
        300.0, gt=0, description="length of off_peak/peak windows (trace seconds)"
    )
    burst_s: float = Field(10.0, gt=0)
    context_s: float = Field(120.0, gt=0)
    time_scale: float = Field(1.0, gt=0)
    target_rate: float | None = Field(None, gt=0)
    target_utilization: float | None = UTILIZATION
    length_scale: float = Field(1.0, gt=0)
    max_input_tokens: int | None = Field(None, ge=1)
    max_output_tokens: int | None = Field(None, ge=1)
    use_lengths: Literal["none", "output", "both"] = "output"
    ignore_eos: bool = False

    @model_validator(mode="after")
    def _one_rate(self) -> TraceArrival:
        if self.target_rate is not None and self.target_utilization is not None:
            raise ValueError(
                "give at most one of target_rate (requests/s) and target_utilization (a "
                "fraction of the measured capacity)"
            )
        return self


ArrivalModel = Annotated[
    ConstantArrival
    | PoissonArrival
    | GammaArrival
    | StepsArrival
    | TraceArrival
    | RequestLogArrival,
    Field(discriminator="kind"),
]


class PhaseModel(_Model):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    duration_s: float | None = Field(None, gt=0)
    arrival: ArrivalModel
    groups: dict[str, float] | None = None  # weights for this phase (default: the groups')

    @model_validator(mode="after")
    def _duration(self) -> PhaseModel:
        if self.duration_s is None and self.arrival.kind not in ("steps", "trace", "request_log"):
            raise ValueError(f"phase {self.name!r} needs duration_s (seconds)")
        return self


class WarmupModel(_Model):
    requests: int = Field(0, ge=0)
    rate: float = Field(1.0, gt=0)


class WorkloadConfig(_Model):
    name: str = "workload"
    seed: int = 0
    groups: dict[str, GroupModel] = Field(min_length=1)
    stages: dict[str, StageModel] = Field(default_factory=dict)
    warmup: WarmupModel = Field(default_factory=lambda: WarmupModel())
    phases: list[PhaseModel] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> WorkloadConfig:
        for name, grp in self.groups.items():
            if grp.source is None and name not in BUILTIN_GROUPS:
                raise ValueError(
                    f"group {name!r} is not built in ({', '.join(BUILTIN_GROUPS)}): give it a source"
                )
            if grp.source is not None and (grp.output is None or grp.slo is None):
                raise ValueError(f"group {name!r} is imported: set its output and slo")
        names = [p.name for p in self.phases]
        if len(set(names)) != len(names):
            raise ValueError("phase names must be unique")
        if "warmup" in names and self.warmup.requests:
            raise ValueError("'warmup' is reserved for warm-up requests: rename the phase")
        for i, p in enumerate(self.phases):
            for gname in p.groups or {}:
                if gname not in self.groups:
                    raise ValueError(
                        f"phase {p.name!r} uses group {gname!r}, which is not under groups"
                    )
            if sum((p.groups or {n: m.weight for n, m in self.groups.items()}).values()) <= 0:
                raise ValueError(f"phase {p.name!r}: the group weights sum to 0")
            self._check_routes(i, p)
        for s, st in self.stages.items():
            for gname in st.groups or []:
                if gname not in self.groups:
                    raise ValueError(
                        f"stage {s!r} names group {gname!r}, which is not under groups"
                    )
        return self

    def _check_routes(self, i: int, p: PhaseModel) -> None:
        """A request log's routes lead to groups of this workload."""
        if not isinstance(p.arrival, RequestLogArrival):
            return
        for value, group in (p.arrival.routes or {}).items():
            if group not in self.groups:
                raise FieldProblem(
                    f"routes sends {value!r} to group {group!r}, which is not under groups",
                    fix=f"add {group!r} under groups (a built-in group, or one with a source), "
                    f"or route {value!r} to one of {', '.join(self.groups)}",
                    path=("phases", i, "arrival", "routes", value),
                )

    def utilization_phases(self) -> list[str]:
        """The phases whose rate is a fraction of the measured capacity (``target_utilization``):
        their schedule needs a capacity (``build_schedule(capacity_rps=...)``)."""
        return [p.name for p in self.phases if getattr(p.arrival, "target_utilization", None)]

    def unloaded_slo_groups(self) -> dict[str, float]:
        """group -> its ``slo.unloaded_x``: the deadlines a pilot's capacity probe sets."""
        return {n: g.slo.unloaded_x for n, g in self.groups.items() if g.slo and g.slo.unloaded_x}

    def with_deadlines(self, seconds: dict[str, float]) -> WorkloadConfig:
        """A copy whose named groups' SLO deadlines are ``seconds`` (their ``unloaded_x`` made
        seconds from the baseline's measured unloaded task time)."""
        groups = {}
        for n, g in self.groups.items():
            if n in seconds and g.slo is not None:
                slo = g.slo.model_copy(update={"deadline_s": float(seconds[n]), "unloaded_x": None})
                g = g.model_copy(update={"slo": slo})
            groups[n] = g
        return self.model_copy(update={"groups": groups})

    def with_durations(self, seconds: dict[str, float]) -> WorkloadConfig:
        """A copy whose named phases play for ``seconds`` (a pilot's levels fitted to its
        budget, ``pilot.plan.fit``); the other phases as they are."""
        phases = [
            p.model_copy(update={"duration_s": float(seconds[p.name])}) if p.name in seconds else p
            for p in self.phases
        ]
        return self.model_copy(update={"phases": phases})

    def sha256(self) -> str:
        """Hash of the validated config (independent of YAML formatting and key order)."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


_FIXES = {"union_tag_not_found": "add 'kind:'"}  # an invalid kind: the fix lists the kinds


_TAGS = frozenset(
    (
        "constant",
        "poisson",
        "gamma",
        "steps",
        "trace",
        "request_log",
        "simulated",
        "bm25",
        *CHECK_KINDS,
    )
)


def format_errors(
    exc: ValidationError,
    where: str = "workload",
    *,
    lines: Any = None,
    prefix: tuple[Any, ...] = (),
    root: type[BaseModel] | None = None,
) -> str:
    return validation.format_errors(
        exc,
        where,
        root=root or WorkloadConfig,
        lines=lines,
        prefix=prefix,
        tags=_TAGS,
        fixes=_FIXES,
        special=_meta_ref,
    )


def _meta_ref(e: Any) -> tuple[str, str] | None:
    """A value that looks like a meta reference but is not one."""
    if e["type"] == "string_pattern_mismatch" and "meta:" in str(
        (e.get("ctx") or {}).get("pattern")
    ):
        return (
            "not a meta reference",
            "write the value itself, or meta:KEY to read it from each prompt",
        )
    return None


def parse_workload(
    data: Any, where: str = "workload", *, lines: Any = None, prefix: tuple[Any, ...] = ()
) -> WorkloadConfig:
    if not isinstance(data, dict):
        raise WorkloadError(f"{where}: expected a mapping at the top level (groups:, phases:, ...)")
    try:
        return WorkloadConfig.model_validate(data)
    except ValidationError as exc:
        raise WorkloadError(format_errors(exc, where, lines=lines, prefix=prefix)) from None


def missing_trace_lines(
    cfg: WorkloadConfig, base_dir: Path, where: str, lines: Any, prefix: tuple[Any, ...] = ()
) -> list[str]:
    """One line per trace or request-log arrival whose file is not there, at its ``path:``
    line (empty: none), so a missing file is refused when the workload is read, not when its
    phase is built."""
    out = []
    for i, phase in enumerate(cfg.phases):
        a = phase.arrival
        if not isinstance(a, TraceArrival | RequestLogArrival):
            continue
        file = Path(a.path) if Path(a.path).is_absolute() else base_dir / a.path
        if file.is_file():
            continue
        what = "trace" if isinstance(a, TraceArrival) else "request log"
        path = (*prefix, "phases", i, "arrival", "path")
        line = lines.line(path) if lines is not None else None
        at = f"{where}:{line}" if line is not None else where
        out.append(
            f"  {at}: {validation.dotted(path)}: {what} not found: {file} -> fix the path: a "
            f"relative path starts at {base_dir} (the workload's directory), or give an "
            "absolute one"
        )
    return [f"{where}: {len(out)} trace or request-log file(s) missing", *out] if out else []


def load_workload(path: str | Path) -> WorkloadConfig:
    """Read and validate a workload YAML (the file may also be a pilot YAML with ``workload:``)."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(
            f"workload file not found: {p}",
            fix="check the path (a pilot's workload: path is relative to the pilot file)",
        )
    text = p.read_text("utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        msg, fix = yaml_error_text(p, exc)
        raise WorkloadError(msg, fix=fix) from None
    prefix: tuple[str, ...] = ()
    if isinstance(data, dict) and "workload" in data and "phases" not in data:
        data, prefix = data["workload"], ("workload",)
    lines = LineMap.from_text(text)
    cfg = parse_workload(data, str(p), lines=lines, prefix=prefix)
    missing = missing_trace_lines(cfg, p.parent, str(p), lines, prefix)
    if missing:
        raise WorkloadError("\n".join(missing))
    return cfg
