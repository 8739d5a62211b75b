"""``pilot.yaml``: arms, the workload they all replay, quality, drill and report settings.

Validated by pydantic at the edge; every error names the line, the field and the fix, e.g.
``pilot.yaml:14: arms[1].options.k: Input should be greater than or equal to 1 -> use a
larger value``. Unknown keys are errors (a typo must not fall back to a default).

The smallest useful pilot (the embedded default is ``specpilot/data/pilots/default.yaml``)::

    name: my-pilot
    workload: workload.yaml            # or the workload inline (groups:, phases:, ...)
    arms:
      - {name: baseline, role: baseline, engine: builtin, options: {draft: null}}
      - {name: speculative, role: speculative, engine: builtin,
         options: {draft: "shipped:smollm2-135m-instruct-d4", k: 3}}
      - {name: alternative, role: alternative, engine: builtin, options: {draft: null},
         budget: {matched_against: speculative, derive: kv_slots}}

``--quick`` deep-merges the file's ``quick:`` section over the rest (shorter phases, fewer
quality samples) and records that the run was the quick profile.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from specpilot import validation
from specpilot.analysis.config import AnalysisConfig
from specpilot.errors import ConfigError, InputFileError
from specpilot.quality.config import QualityConfig
from specpilot.records import ENGINES
from specpilot.validation import StrictModel
from specpilot.yamlpos import LineMap, yaml_error_text

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class PilotConfigError(ConfigError):
    """A pilot file that does not validate; each line is ``file:line: field: problem -> fix``."""


_Model = StrictModel


# -- engine options ------------------------------------------------------------------------


class BuiltinOptions(_Model):
    """``specpilot serve`` (the reference engine). ``draft: null`` loads no draft (k = 0)."""

    target: str | None = None  # GGUF file or checkpoint dir; None: the default target
    draft: str | None = None  # "shipped:NAME", "truncate:I,J,..." or a path; None: no draft
    k: int = Field(0, ge=0, le=16)
    dtype: str = "auto"  # auto | bfloat16 | float32 | what the engine offers
    threads: int | None = Field(None, ge=1)
    max_slots: int = Field(4, ge=1)
    max_batch_size: int | None = Field(None, ge=1)
    max_seq_len: int = Field(2048, ge=64)
    max_queued: int = Field(64, ge=0)
    queue_timeout_s: float = Field(60.0, gt=0)
    extra_args: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _draft_k(self) -> BuiltinOptions:
        if self.draft is None and self.k:
            raise ValueError(f"k = {self.k} needs a draft: set options.draft or k: 0")
        if self.draft is not None and not self.k:
            raise ValueError("a draft with k = 0 never proposes: set k >= 1 or draft: null")
        return self


class LlamaCppOptions(_Model):
    """llama.cpp through ``xllamacpp``; ``draft: shipped:NAME`` is exported to GGUF first."""

    model: str | None = None  # GGUF; None: the default target
    draft: str | None = None
    spec_type: (
        Literal["draft-simple", "ngram-simple", "ngram-mod", "ngram-map-k", "ngram-cache"] | None
    ) = None
    draft_n_max: int = Field(3, ge=1)
    draft_n_min: int = Field(0, ge=0)
    draft_p_min: float | None = Field(None, ge=0, le=1)
    n_ctx: int = Field(4096, ge=64)
    n_parallel: int = Field(2, ge=1)
    threads: int | None = Field(None, ge=1)
    ngram: dict[str, int] = Field(default_factory=dict)
    # synthetic acceptance (invalid text by design): checks that the quality gates say no
    synth_rates: list[Annotated[float, Field(ge=0, le=1)]] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _spec(self) -> LlamaCppOptions:
        if self.spec_type == "draft-simple" and self.draft is None:
            raise ValueError("spec_type draft-simple needs options.draft")
        if self.draft is not None and self.spec_type not in (None, "draft-simple"):
            raise ValueError(
                f"a draft and spec_type {self.spec_type} are two strategies: one switch at a time"
            )
        return self


class VllmOptions(_Model):
    """``vllm serve`` on a GPU, or on the CPU from ``specpilot engines install vllm``'s venv.
    Typed fields become flags or variables; ``extra_args`` are passed verbatim.

    ``model``: a Hugging Face directory or hub id in the local cache; a ``.gguf`` file or None
    (the default target) is converted to a Hugging Face directory first (vLLM loads no GGUF),
    and so is a ``shipped:NAME`` or specpilot draft directory given as ``draft``.
    """

    model: str | None = None
    draft: str | None = None
    k: int = Field(3, ge=1)
    method: str = "draft_model"
    speculative_config: dict[str, Any] | None = None
    dtype: str | None = None
    max_model_len: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    tensor_parallel_size: int | None = Field(None, ge=1)
    served_model_name: str | None = None
    enforce_eager: bool = False  # no torch.compile: starts in ~40 s instead of ~3 min on a CPU
    per_request_metrics: Literal["summary", "detailed"] | None = "detailed"  # recent vLLM
    per_request_timings: bool = True  # --enable-per-request-metrics (recent vLLM)
    executable: str | None = None
    venv: str | None = None  # where `specpilot engines install vllm` put it (.venv-vllm)
    kv_space_gib: int | None = Field(None, ge=1)  # CPU: VLLM_CPU_KVCACHE_SPACE (whole GiB)
    threads_bind: str | None = None  # CPU: VLLM_CPU_OMP_THREADS_BIND, e.g. "0-1"
    env: dict[str, str] = Field(default_factory=dict)
    extra_args: list[str] = Field(default_factory=list)


class SglangOptions(_Model):
    model: str
    draft: str | None = None
    k: int = Field(3, ge=1)
    algorithm: str = "STANDALONE"
    extra_args: list[str] = Field(default_factory=list)


class BudgetModel(_Model):
    """The arm's resource budget (R6). The alternative declares what it matched and changed.

    derive: ``kv_slots`` sets the builtin alternative's ``max_slots`` from the speculative
    arm's measured draft memory (weights + KV) divided by one target KV slot, so the memory the
    draft took buys target concurrency instead.
    """

    matched_against: str | None = None
    memory_bytes: int | None = Field(None, ge=0)
    cores: int | None = Field(None, ge=1)
    devices: list[str] = Field(default_factory=list)
    changes: list[str] = Field(default_factory=list)  # capacity settings changed vs the reference
    derive: Literal["none", "kv_slots"] = "none"
    notes: list[str] = Field(default_factory=list)


# engine -> its options model: the one vocabulary of engine options (pilot files' arms[].options,
# `specpilot load --start --engine-opt`)
EngineOptions = BuiltinOptions | LlamaCppOptions | VllmOptions | SglangOptions
OPTIONS: dict[str, type[EngineOptions]] = {
    "builtin": BuiltinOptions,
    "llamacpp": LlamaCppOptions,
    "vllm": VllmOptions,
    "sglang": SglangOptions,
}


class _ArmBase(_Model):
    name: str = Field(pattern=NAME_PATTERN)
    role: Literal["baseline", "speculative", "alternative", "control", "extra"]
    url: str | None = None  # an endpoint someone else runs: no start, no drill, partial manifest
    compare_to: str | None = None
    budget: BudgetModel = Field(default_factory=lambda: BudgetModel())
    drill: bool | None = None  # None: drill the speculative arm
    model_name: str | None = None  # the model id sent in requests (default: the endpoint's)


class BuiltinArm(_ArmBase):
    engine: Literal["builtin"]
    options: BuiltinOptions = Field(default_factory=lambda: BuiltinOptions())


class LlamaCppArm(_ArmBase):
    engine: Literal["llamacpp"]
    options: LlamaCppOptions = Field(default_factory=lambda: LlamaCppOptions())


class VllmArm(_ArmBase):
    engine: Literal["vllm"]
    options: VllmOptions | None = None  # None only with url


class SglangArm(_ArmBase):
    engine: Literal["sglang"]
    options: SglangOptions | None = None


class OpenAIArm(_ArmBase):
    engine: Literal["openai"]
    url: str  # required: specpilot cannot start a managed API
    options: None = None


Arm = Annotated[
    BuiltinArm | LlamaCppArm | VllmArm | SglangArm | OpenAIArm, Field(discriminator="engine")
]
# engine -> its arm model (an arm specpilot starts)
ARM_MODELS: dict[str, type[BuiltinArm | LlamaCppArm | VllmArm | SglangArm]] = {
    "builtin": BuiltinArm,
    "llamacpp": LlamaCppArm,
    "vllm": VllmArm,
    "sglang": SglangArm,
}


# -- the rest of the pilot -------------------------------------------------------------------


class LoadSettings(_Model):
    api: Literal["chat", "completions"] = "chat"
    timeout_s: float = Field(120.0, gt=0)
    enforce_deadlines: bool = True
    max_concurrency: int | None = Field(None, ge=1)
    lag_threshold_ms: float = Field(10.0, gt=0)
    start_timeout_s: float = Field(600.0, gt=0)


class DrillSettings(_Model):
    """The rollback drill (R8): replay ``phase`` once more on each drilled arm, switch
    speculation off ``switch_after_s`` into it, back on ``hold_s`` after the switch is in force."""

    enabled: bool = True
    phase: str = "peak"
    switch_after_s: float = Field(5.0, ge=0)
    hold_s: float = Field(8.0, gt=0)
    recovery_window_s: float = Field(4.0, gt=0)


class CompatSettings(_Model):
    enabled: bool = True
    # None: the whole suite (specpilot.quality.compat.FEATURES); a subset runs only those
    features: list[str] | None = None

    @field_validator("features")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        from specpilot.quality.compat import FEATURES

        bad = [f for f in v or [] if f not in FEATURES]
        if bad:
            raise ValueError(f"unknown compat feature(s) {bad}: choose from {', '.join(FEATURES)}")
        return v


class PilotConfig(_Model):
    name: str = Field("pilot", pattern=NAME_PATTERN)
    seed: int = 0
    description: str = ""
    workload: dict[str, Any] | str
    arms: list[Arm] = Field(min_length=2)
    repetitions: int = Field(1, ge=1)
    # interleaved: every arm's engine up at once and each phase replayed on every arm in turn
    # (pilot.interleave), so machine drift hits all arms alike; sequential: one arm after the
    # other (when the engines do not fit in memory together, e.g. several vLLM servers on one GPU)
    design: Literal["sequential", "interleaved"] = "sequential"
    representative_traffic: bool = False  # True only when arrivals/prompts are the service's own
    load: LoadSettings = Field(default_factory=lambda: LoadSettings())
    quality: QualityConfig = Field(default_factory=lambda: QualityConfig())
    analysis: AnalysisConfig = Field(default_factory=lambda: AnalysisConfig())
    drill: DrillSettings = Field(default_factory=lambda: DrillSettings())
    compat: CompatSettings = Field(default_factory=lambda: CompatSettings())
    quick: dict[str, Any] | None = None  # overrides applied by --quick
    profile: Literal["full", "quick"] = "full"  # set by --quick, recorded with the pilot

    @model_validator(mode="after")
    def _arms(self) -> PilotConfig:
        names = [a.name for a in self.arms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"arm names must be unique: {', '.join(dup)} repeated")
        roles = [a.role for a in self.arms]
        for role in ("baseline", "speculative"):
            if roles.count(role) != 1:
                raise ValueError(
                    f"a pilot has exactly one {role} arm (found {roles.count(role)}): "
                    "R6 compares one baseline with exactly one speculative strategy; "
                    "add more candidates as role: extra"
                )
        if roles.count("alternative") > 1:
            raise ValueError("at most one alternative arm (more candidates: role: extra)")
        if roles.count("control") > 1:
            raise ValueError("at most one control arm (the A/A copy of the baseline)")
        for a in self.arms:
            for ref, what in (
                (a.compare_to, "compare_to"),
                (a.budget.matched_against, "budget.matched_against"),
            ):
                if ref is not None and ref not in names:
                    raise ValueError(
                        f"arm {a.name!r}: {what} {ref!r} is not an arm ({', '.join(names)})"
                    )
                if ref == a.name:
                    raise ValueError(f"arm {a.name!r}: {what} names the arm itself")
            if a.engine in ("vllm", "sglang") and a.options is None and a.url is None:
                raise ValueError(f"arm {a.name!r}: give options (to start {a.engine}) or a url")
        return self

    def sha256(self) -> str:
        """Hash of the validated config (YAML formatting and key order do not matter)."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(name)


# -- loading ---------------------------------------------------------------------------------

_FIXES = {"union_tag_invalid": f"set engine to one of {', '.join(ENGINES)}"}


def format_errors(exc: ValidationError, where: str, lines: LineMap | None = None) -> str:
    return validation.format_errors(
        exc, where, root=PilotConfig, lines=lines, tags=ENGINES, fixes=_FIXES
    )


def deep_merge(base: Any, over: Any) -> Any:
    """``over`` merged into ``base``: mappings merge key by key; lists of named items (arms)
    merge by ``name``; anything else is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = deep_merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if (
        isinstance(base, list)
        and isinstance(over, list)
        and all(isinstance(x, dict) and "name" in x for x in [*base, *over])
    ):
        # lists of named items (arms, phases) merge by name, in the base's order; an override
        # ``{name: X, drop: true}`` removes X; names only in ``over`` are appended
        changes = {x["name"]: x for x in over}
        out_list = []
        for x in base:
            o = changes.get(x["name"])
            if o is None:
                out_list.append(copy.deepcopy(x))
            elif not o.get("drop"):
                out_list.append(deep_merge(x, o))
        known = {x["name"] for x in base}
        out_list += [copy.deepcopy(x) for x in over if x["name"] not in known and not x.get("drop")]
        return out_list
    return copy.deepcopy(over)


def parse_pilot(
    data: Any, where: str = "pilot", *, quick: bool = False, lines: LineMap | None = None
) -> PilotConfig:
    """Validate a pilot mapping; ``quick`` applies its ``quick:`` overrides first."""
    if not isinstance(data, dict):
        raise PilotConfigError(f"{where}: expected a mapping at the top level (name:, arms:, ...)")
    over = data.get("quick")
    if quick and not isinstance(over, dict):
        raise PilotConfigError(
            f"{where}: --quick needs a 'quick:' section with the overrides of the quick profile"
        )
    full = _validate(data, where, lines)
    if over is None:
        return full
    if not isinstance(over, dict):
        raise PilotConfigError(
            f"{where}: quick: expected a mapping of overrides (workload:, arms:)"
        )
    # the quick profile is checked on every load, so a broken one fails before a run, not in CI
    merged = deep_merge({k: v for k, v in data.items() if k != "quick"}, over)
    merged["profile"] = "quick"
    # merged values no longer sit on the file's lines: the errors name the quick profile instead
    fast = _validate(merged, f"{where} (with its quick: overrides)", None)
    return fast if quick else full


def _validate(data: dict[str, Any], where: str, lines: LineMap | None) -> PilotConfig:
    try:
        cfg = PilotConfig.model_validate(data)
    except ValidationError as exc:
        raise PilotConfigError(format_errors(exc, where, lines)) from None
    if isinstance(cfg.workload, dict):
        from specpilot.workload.config import WorkloadError, parse_workload

        try:
            wl = parse_workload(cfg.workload, where, lines=lines, prefix=("workload",))
        except WorkloadError as exc:
            raise PilotConfigError(str(exc)) from None
        _check_drill(cfg, [p.name for p in wl.phases], where)
    return cfg


def _check_drill(cfg: PilotConfig, phases: list[str], where: str) -> None:
    """The drill replays one of the workload's phases: a name that is not one fails at load,
    not after every arm has run."""
    drilled = cfg.drill.enabled and any(
        a.drill if a.drill is not None else a.role == "speculative" for a in cfg.arms
    )
    if drilled and cfg.drill.phase not in phases:
        raise PilotConfigError(
            f"{where}: drill.phase {cfg.drill.phase!r} is not a phase of the workload "
            f"({', '.join(phases)})",
            fix=f"set drill.phase to one of {', '.join(phases)}, or drill.enabled: false",
        )


def read_pilot_yaml(path: str | Path) -> tuple[dict[str, Any], LineMap]:
    p = Path(path)
    if not p.is_file():
        raise InputFileError(f"pilot file not found: {p}", fix="check the path")
    text = p.read_text("utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        msg, fix = yaml_error_text(p, exc)
        raise PilotConfigError(msg, fix=fix) from None
    return data, LineMap.from_text(text)


def load_pilot(path: str | Path, *, quick: bool = False) -> PilotConfig:
    """Read and validate a pilot YAML; a relative ``workload:`` path resolves against it."""
    p = Path(path)
    data, lines = read_pilot_yaml(p)
    cfg = parse_pilot(data, str(p), quick=quick, lines=lines)
    if isinstance(cfg.workload, str) and not Path(cfg.workload).is_absolute():
        cfg = cfg.model_copy(update={"workload": str((p.parent / cfg.workload).resolve())})
    return cfg


def default_pilot_path() -> Path:
    """The embedded default pilot (``make demo``)."""
    from importlib import resources

    return Path(str(resources.files("specpilot").joinpath("data/pilots/default.yaml")))
