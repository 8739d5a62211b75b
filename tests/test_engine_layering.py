"""The engine is the bottom layer: its modules import only the engine and the records contract.

Read from the source with ``ast`` (deferred imports inside functions count too), so a cycle
dodged by a local import is caught as well. The checker is tested on a broken module first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import specpilot.engine

ALLOWED = ("specpilot.engine", "specpilot.records")
ENGINE = Path(specpilot.engine.__file__).parent


def specpilot_imports(source: str) -> set[str]:
    """Every ``specpilot...`` module a source imports, at any depth (functions included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "specpilot")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.update([node.module] if node.module.split(".")[0] == "specpilot" else [])
    return out


def forbidden(imports: set[str]) -> set[str]:
    return {m for m in imports if not any(m == a or m.startswith(a + ".") for a in ALLOWED)}


def test_the_checker_catches_a_deferred_upward_import() -> None:
    src = (
        "import torch\nfrom specpilot.engine.model import Transformer\n"
        "def f():\n    from specpilot.draft.model import make_draft\n"
        "    import specpilot.serve.app\n"
    )
    assert forbidden(specpilot_imports(src)) == {"specpilot.draft.model", "specpilot.serve.app"}
    assert forbidden({"specpilot.engineering"}) == {"specpilot.engineering"}


def test_engine_modules_import_nothing_above_the_engine() -> None:
    files = sorted(ENGINE.glob("*.py"))
    assert len(files) >= 8  # the scan sees the package (model, loader, generate, ...)
    bad = {
        f.name: sorted(forbidden(specpilot_imports(f.read_text())))
        for f in files
        if forbidden(specpilot_imports(f.read_text()))
    }
    assert bad == {}, f"engine modules importing upward: {bad}"
