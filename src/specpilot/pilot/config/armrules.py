"""The rules across a pilot's arms, each problem named at its field (a
:class:`specpilot.validation.FieldProblem`, so a file's error names that field's line): unique
names, exactly one baseline and one speculative arm (at most one alternative and one control),
references (``compare_to``, ``budget.matched_against``) that name another arm.

    >>> from types import SimpleNamespace as NS
    >>> arm = lambda name, role: NS(name=name, role=role, engine="builtin", options=None, url=None,
    ...                             compare_to=None, budget=NS(matched_against=None))
    >>> check_arms([arm("b", "baseline"), arm("s", "speculative"), arm("b", "extra")])
    Traceback (most recent call last):
    ...
    specpilot.validation.FieldProblem: arm name 'b' is taken (arms[0]): arm names must be unique
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from specpilot.backends.adapters import adapter_of
from specpilot.validation import FieldProblem

if TYPE_CHECKING:
    from specpilot.pilot.config.arms import Arm


def check_arms(arms: Sequence[Arm]) -> None:
    """Raise the first problem across ``arms`` (the pilot's validated arms, in file order)."""
    _unique_names(arms)
    _one_arm_per_role(arms)
    _references(arms)


def _unique_names(arms: Sequence[Arm]) -> None:
    first: dict[str, int] = {}
    for i, a in enumerate(arms):
        if a.name in first:
            raise FieldProblem(
                f"arm name {a.name!r} is taken (arms[{first[a.name]}]): arm names must be unique",
                fix=f"rename it, e.g. {a.name}-2",
                path=("arms", i, "name"),
            )
        first[a.name] = i


_ONE_OF = {
    "baseline": "R6 compares one baseline with exactly one speculative strategy",
    "speculative": "R6 compares one baseline with exactly one speculative strategy",
    "alternative": "at most one equal-budget alternative",
    "control": "at most one control, the A/A copy of the baseline",
}


def _one_arm_per_role(arms: Sequence[Arm]) -> None:
    for role, why in _ONE_OF.items():
        at = [i for i, a in enumerate(arms) if a.role == role]
        if not at and role in ("baseline", "speculative"):
            raise FieldProblem(
                f"a pilot has exactly one {role} arm (found none): {why}",
                fix=f"give one arm role: {role}",
                path=("arms",),
            )
        if len(at) > 1:
            raise FieldProblem(
                f"a second {role} arm (arms[{at[0]}] is one): {why}",
                fix="set role: extra on this one (more candidates run as extra arms)",
                path=("arms", at[1], "role"),
            )


def _references(arms: Sequence[Arm]) -> None:
    names = [a.name for a in arms]
    for i, a in enumerate(arms):
        others = [n for n in names if n != a.name]
        for ref, path in (
            (a.compare_to, ("compare_to",)),
            (a.budget.matched_against, ("budget", "matched_against")),
        ):
            what = ".".join(path)
            if ref is not None and ref not in names:
                close = difflib.get_close_matches(ref, others, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise FieldProblem(
                    f"arm {a.name!r}: {what} {ref!r} is not an arm",
                    fix=f"{hint}name one of {', '.join(others)}",
                    path=("arms", i, *path),
                )
            if ref == a.name:
                raise FieldProblem(
                    f"arm {a.name!r}: {what} names the arm itself",
                    fix=f"name another arm: one of {', '.join(others)}",
                    path=("arms", i, *path),
                )
        if a.options is None and a.url is None and adapter_of(a.engine) is not None:
            raise FieldProblem(
                f"arm {a.name!r}: {a.engine} needs options (to start it) or a url",
                fix="add options: {model: ...}, or url: http://HOST:PORT/v1 for a running one",
                path=("arms", i),
            )
