"""Line numbers for validation errors: a YAML path like ``arms[1].options.k`` -> its line.

    >>> lines = LineMap.from_text("name: p\\narms:\\n  - name: a\\n    options: {k: 3}\\n")
    >>> lines.line(("arms", 0, "options", "k")), lines.line(("arms", 0, "nope")), lines.line(())
    (4, 3, 1)

A path that does not exist in the file (a missing field) resolves to the line of its nearest
existing parent, which is where the user has to add it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class LineMap:
    root: yaml.Node | None

    @classmethod
    def from_text(cls, text: str) -> LineMap:
        try:
            return cls(yaml.compose(text, Loader=yaml.SafeLoader))
        except yaml.YAMLError:
            return cls(None)

    def line(self, path: Sequence[Any]) -> int | None:
        """1-based line of the deepest node on ``path`` that exists (None without a file); a
        mapping entry is reported at its key's line."""
        node = self.root
        if node is None:
            return None
        line = int(node.start_mark.line)
        for part in path:
            found = _child(node, part)
            if found is None:
                break
            node, line = found
        return line + 1


def _child(node: yaml.Node, part: Any) -> tuple[yaml.Node, int] | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return value, int(key.start_mark.line)
        return None
    if (
        isinstance(node, yaml.SequenceNode)
        and isinstance(part, int)
        and 0 <= part < len(node.value)
    ):
        item = node.value[part]
        return item, int(item.start_mark.line)
    return None


def yaml_error_text(path: Any, exc: yaml.YAMLError) -> tuple[str, str]:
    """A YAML syntax error as one line, ``FILE:LINE:COL: KEY: not valid YAML (problem)``, and
    its fix. A bracket left open is reported where it opens (the parser notices only later);
    ``KEY`` is the key written on that line, when there is one.

        >>> try:
        ...     yaml.safe_load("a: 1\\nb: {c: 2\\nd: 3\\n")
        ... except yaml.YAMLError as exc:
        ...     print(yaml_error_text("p.yaml", exc)[0])
        p.yaml:2:4: b: not valid YAML: the { opened here is not closed (expected ',' or '}', but got ':' at line 3 column 2)
    """
    problem_mark = getattr(exc, "problem_mark", None)
    context_mark = getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None) or ""
    unclosed = context.startswith("while parsing a flow") and context_mark is not None
    mark = context_mark if unclosed else (problem_mark or context_mark)
    at = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    if unclosed and problem_mark is not None:
        bracket = "{" if "mapping" in context else "["
        what = (
            f"the {bracket} opened here is not closed ({problem} at line "
            f"{problem_mark.line + 1} column {problem_mark.column + 1})"
        )
    else:
        what = f"{problem} ({context})" if context else problem
    key = _key_at(mark)
    return f"{at}: {key + ': ' if key else ''}not valid YAML: {what}", _yaml_fix(problem, unclosed)


def _key_at(mark: Any) -> str | None:
    """The mapping key written on the mark's line (None: no key there, or no text)."""
    buffer = getattr(mark, "buffer", None)
    if not buffer:
        return None
    lines = str(buffer).split("\n")
    if not 0 <= mark.line < len(lines):
        return None
    m = re.match(r"\s*(?:-\s+)?([^\s:#{}\[\],'\"]+)\s*:", lines[mark.line])
    return m.group(1) if m else None


def _yaml_fix(problem: str, unclosed: bool) -> str:
    if "\\t" in problem or "\t" in problem:
        return "indent with spaces: YAML does not allow tabs"
    if unclosed:
        return "close every [ and { on the entry that opens it (or quote a value with ': ')"
    return "close every [ and {, indent nested keys under their parent, quote values with ': '"
