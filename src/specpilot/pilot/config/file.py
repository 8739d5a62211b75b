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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, PrivateAttr, ValidationError, model_validator

from specpilot import validation
from specpilot.analysis.config import AnalysisConfig
from specpilot.backends.adapters import adapter_of
from specpilot.errors import ConfigError, InputFileError
from specpilot.pilot.config.armrules import check_arms
from specpilot.pilot.config.arms import NAME_PATTERN, Arm
from specpilot.pilot.config.files import missing_model_lines
from specpilot.pilot.config.mirrored import check_mirrored
from specpilot.pilot.config.options import (
    OPTIONS,
    BuiltinOptions,
    EngineOptions,
    LlamaCppOptions,
    SglangOptions,
    VllmOptions,
)
from specpilot.pilot.config.retired import retired
from specpilot.pilot.config.settings import CompatSettings, DrillSettings, LoadSettings
from specpilot.pilot.design import EpisodeSettings
from specpilot.quality.config import QualityConfig
from specpilot.records import ENGINES
from specpilot.validation import Lines, StrictModel
from specpilot.workload.config import (
    WorkloadConfig,
    WorkloadError,
    missing_trace_lines,
    parse_workload,
)
from specpilot.yamlpos import LineMap, yaml_error_text

__all__ = [  # the engine options are defined in pilot.config.options and re-exported here
    "OPTIONS",
    "BuiltinOptions",
    "EngineOptions",
    "LlamaCppOptions",
    "PilotConfig",
    "PilotConfigError",
    "SglangOptions",
    "VllmOptions",
    "load_pilot",
    "parse_pilot",
]


class PilotConfigError(ConfigError):
    """A pilot file that does not validate; each line is ``file:line: field: problem -> fix``.

    ``at``: the field's path in the file, for an error found after loading (the arms' one-switch
    check, a model file): ``specpilot pilot`` turns it into the file's line."""

    def __init__(
        self, message: str, *, fix: str | None = None, at: tuple[str | int, ...] | None = None
    ) -> None:
        super().__init__(message, fix=fix)
        self.at = at


_Model = StrictModel


class PilotConfig(_Model):
    name: str = Field("pilot", pattern=NAME_PATTERN)
    seed: int = 0
    description: str = ""
    workload: dict[str, Any] | str
    _workload: WorkloadConfig | None = PrivateAttr(default=None)  # ``workload_config``
    arms: list[Arm] = Field(min_length=2)
    representative_traffic: bool = False  # True only when arrivals/prompts are the service's own
    load: LoadSettings = Field(default_factory=lambda: LoadSettings())
    quality: QualityConfig = Field(default_factory=lambda: QualityConfig())
    analysis: AnalysisConfig = Field(default_factory=lambda: AnalysisConfig())
    drill: DrillSettings = Field(default_factory=lambda: DrillSettings())
    compat: CompatSettings = Field(default_factory=lambda: CompatSettings())
    # every pilot's measurement design: processes and episodes as units (pilot.design); a file
    # without episodes: gets EpisodeSettings' defaults (1 process an arm where an arm is by URL)
    episodes: EpisodeSettings = Field(default_factory=lambda: EpisodeSettings())
    quick: dict[str, Any] | None = None  # overrides applied by --quick
    profile: Literal["full", "quick"] = "full"  # set by --quick, recorded with the pilot

    @model_validator(mode="before")
    @classmethod
    def _one_process_by_url(cls, data: object) -> object:
        """``episodes: null`` is the design's defaults; where an arm is by URL and the file does
        not set ``episodes.processes``, as many processes an arm as the first such arm has
        replicas (an endpoint is one process: 1 for ``url:``, one per entry of ``urls:``)."""
        if not isinstance(data, dict):
            return data
        if "episodes" in data and data["episodes"] is None:  # null: the design's defaults
            data = {k: v for k, v in data.items() if k != "episodes"}
        arms, ep = data.get("arms"), data.get("episodes")
        replicas = [
            len(a["urls"]) if isinstance(a.get("urls"), list) and a["urls"] else 1
            for a in (arms if isinstance(arms, list) else [])
            if isinstance(a, dict) and (a.get("url") is not None or a.get("urls") is not None)
        ]
        if replicas and ep is None:
            return {**data, "episodes": {"processes": replicas[0]}}
        if replicas and isinstance(ep, dict) and "processes" not in ep:
            return {**data, "episodes": {**ep, "processes": replicas[0]}}
        return data

    @model_validator(mode="after")
    def _arms(self) -> PilotConfig:
        check_arms(self.arms)  # each problem at its field (pilot.config.armrules)
        return self._episodes()

    def _episodes(self) -> PilotConfig:
        url = [a for a in self.arms if a.url is not None]
        ep = self.episodes
        if "planted" in {a.name for a in self.arms} and ep.planted:
            raise ValueError(
                "arm name 'planted' is the planted arm's (episodes.planted): rename it"
            )
        if self.load.phase_timing != "back_to_back":
            raise ValueError(
                "load.phase_timing: schedule: the episode design drains every episode before "
                "the next; set load.phase_timing: back_to_back (the default)"
            )
        for a in url:  # each replica is one process: as many as the design's processes
            n = len(a.replicas)
            if n != ep.processes:
                raise ValueError(
                    f"episodes.processes {ep.processes}: arm {a.name!r} is given by URL with "
                    f"{n} replica{'s' if n > 1 else ''}, and specpilot starts no more of it; "
                    f"list {ep.processes} replicas under its urls: (one per process), or set "
                    f"episodes.processes: {n}"
                )
        if ep.design == "mirrored":  # the baseline first: its replicas meet the planted arm
            base = sorted(self.arms, key=lambda a: a.role != "baseline")
            check_mirrored(base, ep.processes, ep)
        if ep.in_place:
            self._in_place()
        return self

    def _in_place(self) -> None:
        """``episodes.in_place``: one speculative arm beside the baseline, on an engine that
        switches speculation off inside a running process."""
        others = [a.name for a in self.arms if a.role not in ("baseline", "speculative")]
        spec = [a for a in self.arms if a.role == "speculative"]
        if others or len(spec) != 1:
            what = (
                f"arms {others} have processes of their own"
                if others
                else (f"{len(spec)} speculative arms")
            )
            raise ValueError(
                "episodes.in_place serves the baseline from the one speculative arm's "
                f"processes, and {what} -> keep one baseline and one speculative arm, or set "
                "episodes.in_place: false"
            )
        if self.episodes.processes < 2:
            raise ValueError(
                "episodes.in_place with 1 process: how processes respond to the switch cannot "
                "be told from the effect -> set episodes.processes to at least 2"
            )
        engine = adapter_of(spec[0].engine)
        if spec[0].url is not None or engine is None or not engine.in_place:
            raise ValueError(
                f"episodes.in_place: arm {spec[0].name!r} ({spec[0].engine}"
                f"{', by URL' if spec[0].url is not None else ''}) cannot switch speculation "
                "off inside a running process (the builtin engine can) -> set "
                "episodes.in_place: false"
            )

    def workload_config(self) -> WorkloadConfig:
        """The workload, parsed once: at load (``load_pilot``, ``parse_pilot``), where its
        errors name the pilot file's lines, or here the first time for a config built in code."""
        if self._workload is None:
            from specpilot.workload.config import load_workload, parse_workload

            wl = self.workload
            self._workload = load_workload(wl) if isinstance(wl, str) else parse_workload(wl)
        return self._workload

    def workload_dir(self, pilot_dir: str | Path) -> Path:
        """Where the workload's relative paths (prompts, traces) start: a workload file's own
        directory, the pilot file's for a workload written inline."""
        wl = self.workload
        return Path(wl).parent if isinstance(wl, str) else Path(pilot_dir)

    def sha256(self) -> str:
        """Hash of the validated config (YAML formatting and key order do not matter); the
        time budget (``episodes.budget_min``, ``--budget``) is left out: it decides how long
        the pilot may run, not what it measures, so a rerun with another budget resumes; so are
        the arms' ``devices`` (a resumed pilot starts every process anew, placed again)."""
        data = self.model_dump(mode="json")
        if data.get("episodes"):
            data["episodes"].pop("budget_min", None)
            # keys added since (issue 49), left out at their old meaning: a pilot begun before
            # them resumes
            if data["episodes"].get("design") == "turns":
                data["episodes"].pop("design")
            if data["episodes"].get("share_machine") is False:
                data["episodes"].pop("share_machine")
        for arm in data.get("arms") or []:
            arm.pop("devices", None)
        blob = json.dumps(data, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(name)


# -- loading ---------------------------------------------------------------------------------

_FIXES = {
    "union_tag_invalid": f"set engine to one of {', '.join(ENGINES)}",
    "union_tag_not_found": f"add engine: one of {', '.join(ENGINES)}",
}
_QUICK = " (with its quick: overrides)"


def format_errors(exc: ValidationError, where: str, lines: Lines | None = None) -> str:
    return validation.format_errors(
        exc, where, root=PilotConfig, lines=lines, tags=ENGINES, fixes=_FIXES, special=_too_few
    )


def _too_few(e: Mapping[str, object]) -> tuple[str, str] | None:
    """A pydantic error (``ErrorDetails``) of too few arms, in the pilot's words."""
    loc, ctx = e.get("loc"), e.get("ctx")
    if e.get("type") == "too_short" and isinstance(loc, tuple | list) and tuple(loc) == ("arms",):
        given = ctx.get("actual_length", 0) if isinstance(ctx, Mapping) else 0
        return (
            f"a pilot compares arms: {given} given",
            "give a baseline arm and a speculative arm at least (role: baseline, speculative)",
        )
    return None


def at_line(where: str, lines: Lines | None, path: tuple[str | int, ...]) -> str:
    """``where:LINE: field`` for a field of the file (``where: field`` without lines)."""
    line = lines.line(path) if lines is not None else None
    return (
        f"{where}:{line}: {validation.dotted(path)}"
        if line
        else f"{where}: {validation.dotted(path)}"
    )


class _QuickLines:
    """Lines of the merged quick profile: a field's line inside the file's ``quick:`` section,
    or the section's own line for a value that the merge took from the rest of the file."""

    def __init__(self, lines: LineMap | None) -> None:
        self.lines = lines

    def line(self, path: Sequence[str | int]) -> int | None:
        return self.lines.line(("quick", *path)) if self.lines is not None else None


def deep_merge(base: object, over: object) -> object:
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
    data: object, where: str = "pilot", *, quick: bool = False, lines: LineMap | None = None
) -> PilotConfig:
    """Validate a pilot mapping; ``quick`` applies its ``quick:`` overrides first."""
    if not isinstance(data, dict):
        raise _not_a_mapping(data, where, lines)
    over = data.get("quick")
    if quick and not isinstance(over, dict):
        raise PilotConfigError(
            f"{at_line(where, lines, ('quick',))}: --quick needs a quick: section",
            fix="add quick: with the quick profile's overrides (shorter phases), or drop --quick",
        )
    full = _validate(data, where, lines)
    if over is None:
        return full
    # the quick profile is checked on every load, so a broken one fails before a run, not in CI
    merged = deep_merge({k: v for k, v in data.items() if k != "quick"}, over)
    assert isinstance(merged, dict)  # a mapping merged into a mapping
    merged["profile"] = "quick"
    try:
        fast = _validate(merged, where, _QuickLines(lines))
    except PilotConfigError as exc:  # the first line says it is the quick profile
        head, _, rest = exc.message.partition("\n")
        raise PilotConfigError(f"{head}{_QUICK}\n{rest}".rstrip(), fix=exc.fix) from None
    return fast if quick else full


def _not_a_mapping(data: object, where: str, lines: LineMap | None) -> PilotConfigError:
    line = (lines.line(()) if lines is not None else None) or 1
    if data is None:
        return PilotConfigError(
            f"{where}:{line}: (top level): the file is empty: a pilot needs workload: and arms:",
            fix="start from an example (examples/pilot-default.yaml): name:, workload:, and "
            "arms: with a baseline and a speculative arm",
        )
    return PilotConfigError(
        f"{where}:{line}: (top level): expected a mapping at the top level (name:, workload:, "
        f"arms:), not a {type(data).__name__}",
        fix="write the pilot as key: value lines (name:, workload:, arms:), as in examples/",
    )


def _validate(data: dict[str, Any], where: str, lines: Lines | None) -> PilotConfig:
    old = retired(data)
    if old is not None:
        raise PilotConfigError(f"{at_line(where, lines, (old[0],))}: {old[1]}", fix=old[2])
    try:
        cfg = PilotConfig.model_validate(data)
    except ValidationError as exc:
        raise PilotConfigError(format_errors(exc, where, lines)) from None
    if isinstance(cfg.workload, dict):
        try:
            cfg._workload = parse_workload(cfg.workload, where, lines=lines, prefix=("workload",))
        except WorkloadError as exc:
            raise PilotConfigError(exc.message, fix=exc.fix) from None
        _check_drill(cfg, [p.name for p in cfg._workload.phases], where, lines)
    return cfg


def _check_drill(cfg: PilotConfig, phases: list[str], where: str, lines: Lines | None) -> None:
    """The drill replays one of the workload's phases: a name that is not one fails at load,
    not after every arm has run."""
    drilled = cfg.drill.enabled and any(
        a.drill if a.drill is not None else a.role == "speculative" for a in cfg.arms
    )
    if drilled and cfg.drill.phase not in phases:
        raise PilotConfigError(
            f"{at_line(where, lines, ('drill', 'phase'))}: {cfg.drill.phase!r} is not a phase "
            f"of the workload ({', '.join(phases)})",
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
    """Read and validate a pilot YAML; a relative ``workload:`` path resolves against it, and
    every model file an arm names must exist (``pilot.config.files``)."""
    p = Path(path)
    data, lines = read_pilot_yaml(p)
    cfg = parse_pilot(data, str(p), quick=quick, lines=lines)
    if isinstance(cfg.workload, str):
        workload = p.parent / cfg.workload  # an absolute path stays itself
        if not workload.is_file():
            raise PilotConfigError(
                f"{at_line(str(p), lines, ('workload',))}: workload file not found: {workload}",
                fix=f"check the path: a workload: path is read relative to the pilot file "
                f"({p.parent}), or write the workload inline (groups:, phases:)",
            )
        cfg = cfg.model_copy(update={"workload": str(workload.resolve())})
        cfg._workload = None
        cfg.workload_config()  # parsed now: its errors before anything runs
        _check_drill(cfg, [ph.name for ph in cfg.workload_config().phases], str(p), lines)
    else:
        # relative to the real file, as the pilot command reads it (through a link too)
        real_dir = p.resolve().parent
        traces = missing_trace_lines(cfg.workload_config(), real_dir, str(p), lines, ("workload",))
        if traces:
            raise PilotConfigError("\n".join(traces))
    missing = missing_model_lines(
        cfg, str(p), lambda path: at_line(str(p), lines, path), data.get("arms")
    )
    if missing:
        raise PilotConfigError("\n".join(missing))
    return cfg


def default_pilot_path() -> Path:
    """The embedded default pilot (``make demo``)."""
    from importlib import resources

    return Path(str(resources.files("specpilot").joinpath("data/pilots/default.yaml")))
