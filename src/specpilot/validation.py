"""Config validation, written once: the strict pydantic base and the one-line-per-problem
error text every config file (pilot, workload, analysis, quality, trace stages) uses.

``format_errors`` turns a pydantic ``ValidationError`` into ``file:line: field.path: problem ->
fix`` lines: the path is the user's (a discriminator's branch and pydantic's union member names
dropped), the line comes from the file when a ``LineMap``-like ``lines`` is given, and an
unknown key gets the closest field name of the config tree, or where that name belongs.

    >>> dotted(user_path(("arms", 1, "builtin", "options", "thread"), tags={"builtin"}))
    'arms[1].options.thread'

(``tests/test_cli_bad_files.py`` runs it on broken pilot, workload, trace, GGUF and DuckDB files.)

This module imports only pydantic (every layer may use it).
"""

from __future__ import annotations

import difflib
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "FIXES",
    "FieldProblem",
    "StrictModel",
    "dotted",
    "field_owners",
    "field_paths",
    "format_errors",
    "user_path",
]


class StrictModel(BaseModel):
    """Every config model: unknown keys refused (a typo is an error, never ignored), frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldProblem(ValueError):
    """A validator's error about one field: raised inside a model validator, it is reported at
    ``path`` (relative to the model that raised it) with its own fix, so a check across fields
    (two baseline arms, an unknown arm named as a reference) still names the file line.

        >>> str(FieldProblem("k = 2 needs a draft", fix="set draft or k: 0", path=("k",)))
        'k = 2 needs a draft'
    """

    def __init__(self, message: str, *, fix: str | None = None, path: tuple[Any, ...] = ()):
        super().__init__(message)
        self.message, self.fix, self.path = message, fix, tuple(path)


FIXES = {
    "missing": "add it",
    "extra_forbidden": "remove it or fix its spelling",
    "literal_error": "use one of the listed values",
    "union_tag_invalid": "use one of the listed values",
    "union_tag_not_found": "add the missing tag key",
    "string_type": "write a string",
    "greater_than": "use a larger value",
    "greater_than_equal": "use a larger value",
    "less_than": "use a smaller value",
    "less_than_equal": "use a smaller value",
    "too_short": "add entries",
    "too_long": "remove entries",
    "string_pattern_mismatch": "use letters, digits, '_', '-' or '.'",
    "float_parsing": "write a number",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "float_type": "write a number",
    "bool_type": "write true or false",
    "bool_parsing": "write true or false",
    "dict_type": "write a mapping (key: value)",
    "list_type": "write a list",
}

# pydantic's names for union members and validators inside a location (not the user's path)
_MEMBER = re.compile(
    r"^(list|dict|str|int|float|bool|constrained-str|union|function-\w+)(\[.*\])?$"
)


class Lines(Protocol):
    def line(self, path: Any) -> int | None: ...


def user_path(loc: Iterable[Any], tags: Iterable[str] = ()) -> tuple[Any, ...]:
    """A pydantic location as the user wrote it: a discriminator's branch (``tags``: the tag
    values, e.g. engine or arrival kinds) and union member names dropped."""
    tags = set(tags)
    out: list[Any] = []
    for part in loc:
        if isinstance(part, str) and (part in tags or _MEMBER.match(part)):
            continue
        out.append(part)
    return tuple(out)


def dotted(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "(top level)"


def _resolve(annotation: Any, model: type[BaseModel]) -> Any:
    """A forward reference (``from __future__ import annotations`` where pydantic deferred it)
    evaluated in the model's module and defining scope."""
    if isinstance(annotation, str):
        annotation = typing.ForwardRef(annotation)
    if not isinstance(annotation, typing.ForwardRef):
        return annotation
    ns = {
        **vars(sys.modules.get(model.__module__, types)),
        **(model.__pydantic_parent_namespace__ or {}),
    }
    try:
        return eval(annotation.__forward_arg__, ns)  # the model's own annotation
    except Exception:
        return None


def _models_in(annotation: Any) -> list[tuple[type[BaseModel], str]]:
    """The models inside a field's annotation, with ``[]`` where a list or mapping sits."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, "")]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models_in(args[0])
    if origin in (typing.Union, types.UnionType):
        return [m for a in args for m in _models_in(a)]
    if origin in (list, tuple, set, frozenset, dict, Mapping) and args:
        inner = args[-1] if origin in (dict, Mapping) else args[0]
        return [(m, "[]" + s) for m, s in _models_in(inner)]
    return []


def field_owners(root: type[BaseModel]) -> dict[tuple[str, str], list[type[BaseModel]]]:
    """(field name, dotted path of the models that have it) -> those models (several where a
    union's members sit at one place: the arrival kinds of a phase)."""
    out: dict[tuple[str, str], list[type[BaseModel]]] = {}
    seen: set[tuple[type[BaseModel], str]] = set()

    def walk(model: type[BaseModel], at: str) -> None:
        if (model, at) in seen:
            return
        seen.add((model, at))
        for name, f in model.model_fields.items():
            out.setdefault((name, at or "(top level)"), []).append(model)
            for sub, suffix in _models_in(_resolve(f.annotation, model)):
                walk(sub, (f"{at}.{name}" if at else name) + suffix)

    walk(root, "")
    return out


def field_paths(root: type[BaseModel]) -> dict[str, set[str]]:
    """Every field name of a config tree -> the dotted paths of the models that have it."""
    out: dict[str, set[str]] = {}
    for name, at in field_owners(root):
        out.setdefault(name, set()).add(at)
    return out


def _kinds(models: Iterable[type[BaseModel]]) -> list[str]:
    """The tag values (``kind: trace``) of union members, where they have one."""
    out = []
    for m in models:
        f = m.model_fields.get("kind")
        if f is not None and typing.get_origin(f.annotation) is typing.Literal:
            out += [str(v) for v in typing.get_args(f.annotation)]
    return out


def _unknown_fix(name: str, here: str, root: type[BaseModel]) -> str | None:
    owners = field_owners(root)
    paths = field_paths(root)
    if here in paths.get(name, set()):  # a field of another member of the union at this place
        kinds = _kinds(owners[(name, here)])
        which = f"kind: {' or '.join(kinds)}" if kinds else "another form of this entry"
        return f"{name!r} belongs to {which}, not to this one: fix the kind, or remove {name!r}"
    elsewhere = sorted(paths.get(name, set()) - {here})
    if elsewhere:
        return f"{name!r} is not a field here: it belongs under {' or '.join(elsewhere)}"
    close = difflib.get_close_matches(name, sorted(set(paths) - {name}), n=1)
    return f"did you mean {close[0]!r}?" if close else None


# fixes that say the value that works, from the error's own context
_CTX_FIXES = {
    "greater_than": "set it to more than {gt}",
    "greater_than_equal": "set it to {ge} or more",
    "less_than": "set it to less than {lt}",
    "less_than_equal": "set it to {le} or less",
    "too_short": "give at least {min_length}",
    "too_long": "give at most {max_length}",
    "literal_error": "use {expected}",
    "union_tag_invalid": "set {discriminator} to one of {expected_tags}",
    "union_tag_not_found": "add {discriminator}:",
}


def _ctx_fix(e: Mapping[str, Any]) -> str | None:
    template = _CTX_FIXES.get(e["type"])
    # 0.0 -> 0: a bound reads as the user would write it
    ctx = {
        k: int(v) if isinstance(v, float) and v.is_integer() else v
        for k, v in (e.get("ctx") or {}).items()
    }
    if "discriminator" in ctx:
        ctx["discriminator"] = str(ctx["discriminator"]).strip("'")
    try:
        return template.format(**ctx) if template else None
    except (KeyError, IndexError):
        return None


def _problem(e: Mapping[str, Any]) -> tuple[tuple[Any, ...], str, str | None] | None:
    """(path below the error's location, message, fix) that the error itself carries: a
    ``FieldProblem``, or the discriminator key a tagged union could not use."""
    ctx = e.get("ctx") or {}
    err = ctx.get("error")
    if e["type"] == "value_error" and isinstance(err, FieldProblem):
        return err.path, err.message, err.fix
    if e["type"] in ("union_tag_invalid", "union_tag_not_found") and "discriminator" in ctx:
        return (str(ctx["discriminator"]).strip("'"),), str(e["msg"]), None
    return None


def _generic(path: tuple[Any, ...]) -> str:
    return dotted("[]" if isinstance(p, int) else p for p in path).replace(".[]", "[]")


def format_errors(
    exc: ValidationError,
    where: str,
    *,
    root: type[BaseModel] | None = None,
    lines: Lines | None = None,
    prefix: tuple[Any, ...] = (),
    tags: Iterable[str] = (),
    fixes: Mapping[str, str] | None = None,
    special: Callable[[Mapping[str, Any]], tuple[str, str] | None] | None = None,
) -> str:
    """One line per problem: ``where[:line]: path: message -> fix``. ``prefix`` is where the
    validated mapping sits in the file (``("workload",)`` for a pilot's inline workload);
    ``special(error)`` may return a (message, fix) of its own for an error."""
    out = [f"{where}: {exc.error_count()} problem(s)"]
    for e in exc.errors():
        path, msg, fix = _explained(e, (*prefix, *user_path(e["loc"], tags)), fixes, special)
        if e["type"] == "extra_forbidden" and path and root is not None:
            here = _generic(path[len(prefix) : -1]) if len(path) > len(prefix) + 1 else ""
            fix = _unknown_fix(str(path[-1]), here or "(top level)", root) or fix
        line = lines.line(path) if lines is not None else None
        at = f"{where}:{line}" if line is not None else where
        out.append(f"  {at}: {dotted(path)}: {msg}" + (f" -> {fix}" if fix else ""))
    return "\n".join(out)


def _explained(
    e: Mapping[str, Any],
    path: tuple[Any, ...],
    fixes: Mapping[str, str] | None,
    special: Callable[[Mapping[str, Any]], tuple[str, str] | None] | None,
) -> tuple[tuple[Any, ...], str, str | None]:
    """(path, message, fix) of one error: the caller's ``special`` first, then what the error
    carries, then the caller's fix for its type, one from its context, the generic one."""
    msg = str(e["msg"]).removeprefix("Value error, ")
    fix = (fixes or {}).get(e["type"]) or _ctx_fix(e) or FIXES.get(e["type"])
    carried = _problem(e)
    if carried is not None:
        below, msg, own_fix = carried
        path, fix = (*path, *below), own_fix or fix
    own = special(e) if special is not None else None
    if own is not None:
        msg, fix = own
    return path, msg, fix
