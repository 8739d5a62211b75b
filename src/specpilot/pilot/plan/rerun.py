"""What a rerun (``specpilot rerun``) may change in the stored config: ``--set
arms.NAME.options.FIELD=VALUE``, and the rule that keeps the two runs comparable.

A rerun changes one thing, so its comparison with the previous run can say what moved the
cells. Each ``--set`` names an option of an arm's engine (``pilot.config.options``); an option
is the arm's *switch* when setting it alone changes the arm's strategy (``StrategySpec``: kind,
k, draft, n-gram settings), and a *setting* otherwise (a target file, dtype, threads, engine
flags, capacity, ...). Allowed:

- one arm's switch: any number of that arm's strategy options, on that one arm only;
- an upgrade: settings, each given the same new value on every arm of its engine that runs
  with options (``--set 'arms.*.options.target=new.gguf'``: the baseline and every arm alike,
  as a new target file or engine version is), as many settings as the upgrade takes;
- nothing: the same config again (after an engine upgrade made outside specpilot, say).

Refused, each naming the ``--set`` and the fix: the strategy of two arms; a switch and a
setting together; a setting on some arms of an engine only (between those arms it would be a
second switch beside the strategy, R6). The new config must also pass the pilot's own
one-switch check (``check_one_switch``).

    >>> from specpilot.pilot.config.file import parse_pilot
    >>> old = parse_pilot({"workload": "w.yaml", "arms": [
    ...     {"name": "b", "role": "baseline", "engine": "builtin", "options": {"draft": None}},
    ...     {"name": "s", "role": "speculative", "engine": "builtin",
    ...      "options": {"draft": "shipped:d", "k": 3}}]})
    >>> new = with_settings(old, [parse_setting("arms.s.options.k=4")], "old run")
    >>> change_of(old, new)
    "arm 's' switch: k 3 -> 4"
    >>> change_of(old, with_settings(old, [parse_setting("arms.*.options.dtype=float32")], "x"))
    'an upgrade of every builtin arm: dtype auto -> float32'
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from specpilot.backends.adapters import adapter_of
from specpilot.pilot.config.arms import Arm
from specpilot.pilot.config.file import PilotConfig, PilotConfigError, parse_pilot
from specpilot.pilot.config.options import OPTIONS
from specpilot.pilot.plan.arms import check_one_switch, plan_arms

__all__ = ["SYNTAX", "Setting", "change_of", "parse_setting", "with_settings"]

SYNTAX = (
    "--set arms.NAME.options.FIELD=VALUE (VALUE read as YAML: 4, bfloat16, null, [a, b]; NAME "
    "'*' sets every arm whose engine has FIELD; FIELD.KEY sets a key inside a mapping option)"
)
_PATH = re.compile(
    r"^arms\.(?P<arm>\*|[A-Za-z0-9][A-Za-z0-9_.-]*?)\.options\.(?P<field>[A-Za-z_][\w.]*)$"
)


@dataclass(frozen=True)
class Setting:
    """One ``--set``: which arm ('*': every arm whose engine has the option), the option (and
    keys inside it), the value."""

    text: str
    arm: str
    path: tuple[str, ...]
    value: Any

    @property
    def option(self) -> str:
        return self.path[0]


def _malformed(text: str, why: str) -> PilotConfigError:
    return PilotConfigError(f"--set {text!r}: {why}", fix=f"write it as {SYNTAX}")


def parse_setting(text: str) -> Setting:
    """``arms.NAME.options.FIELD=VALUE`` -> a Setting; anything else refused with the syntax."""
    key, eq, raw = text.partition("=")
    if not eq:
        raise _malformed(text, "no '=' between the option and its value")
    m = _PATH.match(key.strip())
    if m is None:
        raise _malformed(
            text,
            f"{key.strip()!r} is not arms.NAME.options.FIELD: a rerun changes arms' engine "
            "options only (the workload, seed and schedule stay the previous run's)",
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise _malformed(text, f"the value {raw!r} is not YAML ({first})") from None
    return Setting(text, m["arm"], tuple(m["field"].split(".")), value)


def _targets(cfg: PilotConfig, s: Setting) -> list[int]:
    """The indices of the arms ``s`` sets; refused where none can take it."""
    if s.arm == "*":
        got = [
            i
            for i, a in enumerate(cfg.arms)
            if a.options is not None and s.option in OPTIONS[a.engine].model_fields
        ]
        if not got:
            raise _malformed(s.text, f"no arm's engine has an option {s.option!r}")
        return got
    names = [a.name for a in cfg.arms]
    if s.arm not in names:
        raise _malformed(s.text, f"no arm {s.arm!r} in the previous run ({', '.join(names)})")
    i = names.index(s.arm)
    a = cfg.arms[i]
    if a.options is None:
        raise PilotConfigError(
            f"--set {s.text!r}: arm {a.name!r} is given by URL: specpilot does not start it, "
            "so it has no engine options to change",
            fix="change that endpoint's server yourself and rerun without --set for it (the "
            "comparison reports what its engine says it runs)",
        )
    fields = OPTIONS[a.engine].model_fields
    if s.option not in fields:
        raise _malformed(
            s.text,
            f"the {a.engine} engine has no option {s.option!r} (it has {', '.join(fields)})",
        )
    return [i]


def _put(options: dict[str, Any], s: Setting) -> None:
    """Set ``s.value`` at ``s.path`` inside one arm's options (keys inside a mapping option)."""
    at: Any = options
    for k in s.path[:-1]:
        if at.get(k) is None:
            at[k] = {}
        if not isinstance(at[k], dict):
            raise _malformed(s.text, f"{'.'.join(s.path[:-1])} is not a mapping option")
        at = at[k]
    at[s.path[-1]] = s.value


def with_settings(old: PilotConfig, settings: Sequence[Setting], where: str) -> PilotConfig:
    """The stored config with every ``--set`` applied, validated as a pilot file is (``where``:
    the previous run's pilot file, for the error's first words)."""
    data = old.model_dump(mode="json")
    data["arms"] = [_as_written(a) for a in data["arms"]]
    for s in settings:
        for i in _targets(old, s):
            _put(data["arms"][i].setdefault("options", {}), s)
    try:
        return parse_pilot(data, f"{where} (its stored config with the --set)")
    except PilotConfigError as exc:
        given = " ".join(f"--set {s.text}" for s in settings)
        raise PilotConfigError(
            f"{exc.message}\n  (after {given})", fix=exc.fix or f"change the --set; {SYNTAX}"
        ) from None


def _changed(a: Arm, b: Arm) -> list[str]:
    """The options of one arm that differ between two configs."""
    if a.options is None or b.options is None:
        return []
    x, y = a.options.model_dump(mode="json"), b.options.model_dump(mode="json")
    return [k for k in y if x.get(k) != y.get(k)]


def _is_switch(a: Arm, b: Arm, option: str) -> bool:
    """Setting ``option`` alone to ``b``'s value changes ``a``'s strategy."""
    engine = adapter_of(a.engine)
    if engine is None or a.options is None or b.options is None:
        return False
    trial = type(a.options).model_construct(
        **{**dict(a.options), option: getattr(b.options, option)}
    )
    return bool(engine.strategy(trial) != engine.strategy(a.options))


def _value(v: object) -> str:
    return "null" if v is None else str(v)


def _arrow(a: Arm, b: Arm, option: str) -> str:
    assert a.options is not None and b.options is not None
    return f"{option} {_value(getattr(a.options, option))} -> {_value(getattr(b.options, option))}"


def _not_alike(option: str, engine: str, moved: list[str], arms: list[str]) -> PilotConfigError:
    left = [n for n in arms if n not in moved]
    how = f"and not of {', '.join(repr(n) for n in left)}" if left else "to different values"
    return PilotConfigError(
        f"--set changes {option} of arm{'s' if len(moved) > 1 else ''} "
        f"{', '.join(repr(n) for n in moved)} {how} ({engine}): a setting that is not the "
        "strategy changes on every arm of its engine alike (an upgrade), or it is a second "
        "switch beside the strategy (R6)",
        fix=f"--set 'arms.*.options.{option}=VALUE' (every {engine} arm alike), or leave it",
    )


def _check_upgrade(old: PilotConfig, new: PilotConfig, settings: dict[str, list[str]]) -> str:
    """Every setting changed alike on every arm of its engine that has options: the upgrade's
    description, else refused naming the arms left out."""
    by_engine: dict[str, set[str]] = {}
    for name, names in settings.items():
        by_engine.setdefault(new.arm(name).engine, set()).update(names)
    out = []
    for engine, options in sorted(by_engine.items()):
        arms = [a.name for a in new.arms if a.engine == engine and a.options is not None]
        arrows = []
        for option in sorted(options):
            moved = [n for n in arms if option in settings.get(n, [])]
            values = {repr(getattr(new.arm(n).options, option)) for n in moved}
            if moved != arms or len(values) > 1:
                raise _not_alike(option, engine, moved, arms)
            arrows.append(_arrow(old.arm(arms[0]), new.arm(arms[0]), option))
        out.append(f"an upgrade of every {engine} arm: {'; '.join(arrows)}")
    return "; ".join(out)


def change_of(old: PilotConfig, new: PilotConfig) -> str:
    """What the rerun changes, in words; refused where it is more than one arm's one switch or
    an upgrade (module docstring)."""
    switches: dict[str, list[str]] = {}
    settings: dict[str, list[str]] = {}
    for a in old.arms:
        b = new.arm(a.name)
        for option in _changed(a, b):
            (switches if _is_switch(a, b, option) else settings).setdefault(a.name, []).append(
                option
            )
    if len(switches) > 1:
        names = sorted(switches)
        raise PilotConfigError(
            f"--set changes the strategy of arms {', '.join(repr(n) for n in names)}: a rerun "
            "changes one arm's one switch, so that the comparison can say what moved a cell",
            fix=f"keep the --set of one arm ({names[0]!r}, say) and rerun again for the other",
        )
    if switches and settings:
        (arm,) = switches
        other = ", ".join(f"{n}.{o}" for n, opts in sorted(settings.items()) for o in opts)
        raise PilotConfigError(
            f"--set changes arm {arm!r}'s switch ({', '.join(switches[arm])}) and also {other}, "
            "which is not a strategy: one change per rerun, or the comparison cannot say which "
            "of them moved the cells",
            fix="rerun with the upgrade first, then rerun that run with the switch",
        )
    if switches:
        ((arm, options),) = switches.items()
        a, b = old.arm(arm), new.arm(arm)
        change = f"arm {arm!r} switch: " + "; ".join(_arrow(a, b, o) for o in options)
    else:
        change = _check_upgrade(old, new, settings) if settings else "nothing: the same config"
    check_one_switch(plan_arms(new, resolve_files=False))  # R6 between the new config's arms
    return change


def given(settings: Sequence[Setting]) -> list[str]:
    """The ``--set`` as given, for the record."""
    return [s.text for s in settings]


def _as_written(arm: object) -> object:
    """An arm as a file writes it: a dump of ``urls:`` also holds ``url:`` (its first replica,
    filled in by validation), which a file may not give beside it."""
    if isinstance(arm, dict) and arm.get("urls") and arm.get("url") == arm["urls"][0]:
        return {k: v for k, v in arm.items() if k != "url"}
    return arm


def stored_config(data: Mapping[str, Any], where: str) -> PilotConfig:
    """The previous run's config as its pilot file stored it, validated by this specpilot."""
    raw = copy.deepcopy(dict(data))
    if isinstance(raw.get("arms"), list):
        raw["arms"] = [_as_written(a) for a in raw["arms"]]
    try:
        return parse_pilot(raw, f"{where} (its stored config)")
    except PilotConfigError as exc:
        raise PilotConfigError(
            exc.message,
            fix="its config was written by another specpilot and no longer validates: rerun it "
            "with that version, or start a new pilot from a config file (specpilot pilot FILE)",
        ) from None
