"""Business checks declared per task group (R7): resolve a declaration for one prompt, run it
on one answer, and say pass/fail with the key errors.

A declaration is a mapping validated by the workload's ``CheckModel`` (``kind``, ``name``,
``severity`` key|minor and the kind's parameters; see ``workload/checks.py``). Values written
``meta:KEY`` are read from each prompt's ``meta``, so one declaration serves a whole group;
a prompt whose value is null skips that check. Kinds: ``json_schema``, ``json_fields``,
``code_tests`` (sandboxed), ``regex``, ``required``, ``forbidden``, ``numeric``, ``length``,
``lines``. An answer passes when every *key* check passes; minor failures are reported only.

    >>> from specpilot.workload.groups import load_group
    >>> g = group_checks(load_group("structured"))
    >>> p = g.prompts["struct-001"]
    >>> answer = '{"name": "Amina Okafor", "age": "42", "city": "Lagos", "role": "head of research"}'
    >>> [(r.name, r.passed, r.reasons) for r in evaluate(g.for_prompt(p.id), answer)][:2]
    [('schema_valid', False, ['schema violation: /age not an integer']), ('expected_fields', False, ['/age: expected 42, got "42"'])]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

from specpilot.errors import ConfigError
from specpilot.quality import structchecks, textchecks
from specpilot.quality.sandbox import SandboxLimits
from specpilot.workload.checks import CheckModel
from specpilot.workload.config import format_errors
from specpilot.workload.groups import Prompt, TaskGroup

# Parameters that may be written "meta:KEY" (read from the prompt), per kind.
META_PARAMS: dict[str, tuple[str, ...]] = {
    "json_schema": ("json_schema",),
    "json_fields": ("expected",),
    "code_tests": ("tests", "entry_point"),
    "required": ("all_of", "any_of"),
    "numeric": ("values",),
    "length": ("unit", "of"),
}
_TEXT = {
    "regex": textchecks.regex,
    "required": textchecks.required,
    "forbidden": textchecks.forbidden,
    "numeric": textchecks.numeric,
    "length": textchecks.length,
    "lines": textchecks.lines,
    "json_schema": structchecks.json_schema,
    "json_fields": structchecks.json_fields,
}


class CheckError(ConfigError):
    """A check declaration that does not validate or does not resolve for a prompt."""


@dataclass(frozen=True)
class Check:
    """One check resolved for one prompt: its parameters hold values, never ``meta:`` refs."""

    kind: str
    name: str
    severity: str
    params: dict[str, Any] = field(hash=False)


@dataclass
class CheckResult:
    name: str
    kind: str
    severity: str
    passed: bool
    reasons: list[str] = field(default_factory=list)
    score: float | None = None
    isolation: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@cache
def _adapter() -> TypeAdapter[Any]:
    return TypeAdapter(CheckModel)


def parse_spec(spec: Mapping[str, Any] | Any, where: str = "check") -> dict[str, Any]:
    """Validate one declaration; return its plain form (``schema`` is ``json_schema`` here)."""
    if hasattr(spec, "model_dump"):
        return dict(spec.model_dump())
    try:
        return dict(_adapter().validate_python(dict(spec)).model_dump())
    except ValidationError as exc:
        raise CheckError(format_errors(exc, where)) from None
    except TypeError:
        raise CheckError(f"{where}: a check must be a mapping with 'kind:'") from None


def _meta(prompt: Prompt | None, ref: str, where: str) -> Any:
    key = ref.removeprefix("meta:")
    if prompt is None:
        raise CheckError(f"{where}: {ref} needs a prompt (the check is declared per prompt)")
    value: Any = prompt.meta
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise CheckError(
                f"{where}: prompt {prompt.id} has no meta.{key} (set it or drop {ref})"
            )
        value = value[part]
    return value


def resolve(spec: Mapping[str, Any], prompt: Prompt | None, where: str = "check") -> Check | None:
    """The check for one prompt, or None when a ``meta:`` value is null for it."""
    s = dict(spec)
    kind = str(s.pop("kind"))
    name = str(s.pop("name", None) or kind)
    severity = str(s.pop("severity", "key"))
    for key in META_PARAMS.get(kind, ()):
        v = s.get(key)
        if isinstance(v, str) and v.startswith("meta:"):
            s[key] = _meta(prompt, v, f"{where} ({name})")
            if s[key] is None:
                return None
    return Check(kind, name, severity, s)


def run_check(
    check: Check, text: str, limits: SandboxLimits | None = None, isolation: str = "auto"
) -> CheckResult:
    if check.kind == "code_tests":
        passed, reasons, score, detail = structchecks.code_tests(
            text, check.params, limits, isolation
        )
        iso = detail.get("isolation")
    else:
        passed, reasons, score, detail = _TEXT[check.kind](text, check.params)
        iso = None
        if check.kind == "regex" and not passed and check.params.get("must_match", True):
            reasons = [f"{check.name}: required pattern not found"]
    return CheckResult(check.name, check.kind, check.severity, passed, reasons, score, iso, detail)


def evaluate(
    checks: Iterable[Check], text: str, limits: SandboxLimits | None = None, isolation: str = "auto"
) -> list[CheckResult]:
    return [run_check(c, text, limits, isolation) for c in checks]


def verdict(results: Sequence[CheckResult]) -> tuple[bool, list[str]]:
    """A request's quality result: pass when every key check passed; the key errors."""
    reasons = [r for c in results if c.severity == "key" and not c.passed for r in c.reasons]
    return all(c.passed for c in results if c.severity == "key"), reasons


@dataclass(frozen=True)
class GroupChecks:
    """A group's declarations (group level, plus each prompt's own) and its prompts by id."""

    group: str
    specs: tuple[dict[str, Any], ...]
    prompts: Mapping[str, Prompt] = field(hash=False)
    min_tokens: int | None = None  # the group's smallest max_tokens (a capped answer is below)

    @property
    def declared(self) -> bool:
        return bool(self.specs) or any(p.checks for p in self.prompts.values())

    def for_prompt(self, prompt_id: str) -> list[Check]:
        p = self.prompts.get(prompt_id)
        where = f"group {self.group}"
        own = [parse_spec(c, f"{where}, prompt {prompt_id}") for c in (p.checks if p else ())]
        out = []
        seen: dict[str, int] = {}
        for spec in [*self.specs, *own]:
            c = resolve(spec, p, where)
            if c is None:
                continue
            n = seen[c.name] = seen.get(c.name, 0) + 1
            out.append(c if n == 1 else Check(c.kind, f"{c.name}#{n}", c.severity, c.params))
        return out

    def validate(self) -> None:
        """Resolve every prompt's checks once, so a bad declaration fails before a run."""
        for pid in self.prompts:
            self.for_prompt(pid)


def group_checks(group: TaskGroup, extra: Iterable[Any] = ()) -> GroupChecks:
    """A group's checks: its built-in declarations plus ``extra`` (a workload YAML's)."""
    specs = [parse_spec(c, f"group {group.name}") for c in (*group.checks, *extra)]
    out = group.output
    low = out.mean if out.dist == "fixed" else out.min
    return GroupChecks(group.name, tuple(specs), {p.id: p for p in group.prompts}, low)
