"""Line numbers for validation errors: a YAML path like ``arms[1].options.k`` -> its line.

    >>> lines = LineMap.from_text("name: p\\narms:\\n  - name: a\\n    options: {k: 3}\\n")
    >>> lines.line(("arms", 0, "options", "k")), lines.line(("arms", 0, "nope")), lines.line(())
    (4, 3, 1)

A path that does not exist in the file (a missing field) resolves to the line of its nearest
existing parent, which is where the user has to add it.
"""

from __future__ import annotations

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
    """A YAML syntax error as one line, ``FILE:LINE:COL: not valid YAML (problem)``, and its fix."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    at = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    what = f"{problem} ({context})" if context else problem
    return (
        f"{at}: not valid YAML: {what}",
        "close every [ and {, indent nested keys under their parent, quote values with ': '",
    )
