"""The code's shape against issue 48's targets, read from the source with ``ast``: modules over
450 lines, functions over 60 lines (def line to last line), and signatures in ``pilot/`` typed
with a bare ``Any`` (a parameter, ``*args``/``**kwargs`` or a return; a JSON document typed
``dict[str, Any]`` is not counted).

    .venv/bin/python benchmarks/code_shape.py          # the counts, then each offender
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "specpilot"
MODULE_MAX, FUNCTION_MAX = 450, 60


def _bare_any(f: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = f.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
    named = [p.annotation for p in params] + [f.returns]
    return any(isinstance(n, ast.Name) and n.id == "Any" for n in named)


def shape(root: Path = SRC) -> tuple[list[str], list[str], list[str]]:
    """(modules over 450 lines, functions over 60 lines, pilot/ signatures with a bare Any)."""
    big, long, anys = [], [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text("utf-8")
        rel = path.relative_to(root.parent)
        if (n := text.count("\n")) > MODULE_MAX:
            big.append(f"{n:5d}  {rel}")
        for node in ast.walk(ast.parse(text, str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if (size := (node.end_lineno or node.lineno) - node.lineno + 1) > FUNCTION_MAX:
                long.append(f"{size:5d}  {rel}:{node.name}")
            if "pilot" in path.relative_to(root).parts[:1] and _bare_any(node):
                anys.append(f"{rel}:{node.lineno}:{node.name}")
    return big, sorted(long, reverse=True), anys


def main() -> int:
    big, long, anys = shape()
    print(f"modules over {MODULE_MAX} lines: {len(big)}")
    print(f"functions over {FUNCTION_MAX} lines: {len(long)}")
    print(f"pilot/ signatures with a bare Any: {len(anys)}")
    for title, rows in (("modules", big), ("functions", long), ("Any", anys)):
        if rows:
            print(f"\n{title}:")
            print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
