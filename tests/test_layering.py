"""The import graph of ``src/specpilot`` follows the layers of DESIGN.md (no upward edge).

Read from the source with ``ast`` (every import, also the ones deferred into functions, since a
deferred import is a dependency all the same). A unit is a top-level package or module of
specpilot (``engine``, ``store``, ``cli``, ...). ``records``, ``errors``, ``definitions`` and the package root
(``__version__``) are the base every unit may import; everything else may import only what its
layer sits on, directly or through the layers below:

    engine <- serve                 draft (training, screening) -> engine, workload, analysis
    workload, loadgen, backends <- store <- quality <- analysis <- report <- pilot <- commands <- cli
    quality never imports loadgen (its checks speak HTTP themselves); analysis reads the one
    quality gate (quality.summary) for the verdict
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# validation (the strict config base and its error text) and yamlpos (YAML line numbers) are
# leaves too: pydantic / yaml only
BASE = {
    "records",
    "errors",
    "definitions",
    "specpilot",
    "validation",
    "yamlpos",
    "hashing",
    "cpuinfo",
    "terminal",
    "numbers",
}
# unit -> the layers it sits on directly (it may import them and whatever they may import).
SITS_ON: dict[str, list[str]] = {
    "definitions": [],
    "validation": [],
    "yamlpos": [],
    "hashing": [],
    "cpuinfo": [],  # base: DESIGN.md's metric definitions over records
    "terminal": [],  # the one rule for live displays vs plain lines
    "numbers": [],  # the one percent format (analysis sentences, report tables)
    "engine": [],
    "serve": ["engine"],
    "workload": [],
    "loadgen": ["workload"],
    "backends": ["engine"],  # starts and describes engines; uses the loader's facts
    "store": ["workload", "loadgen", "backends"],
    "analysis": ["store", "quality"],
    "quality": ["store"],
    "report": ["analysis", "quality"],  # the simulator's section is given to it (build_report)
    "pilot": ["report", "simulate"],
    "draft": ["engine", "workload", "analysis"],
    "simulate": ["analysis"],  # calibrated from a pilot file's records
    "commands": ["pilot", "serve", "draft", "simulate"],
    "cli": ["commands"],
}
FORBIDDEN = {("quality", "loadgen")}  # quality checks speak HTTP themselves
# Known upward edges, each with the issue that removes it; nothing else may appear.
KNOWN: dict[tuple[str, str], str] = {}  # (engine, draft) was the last one: the draft format moved


def allowed(unit: str) -> set[str]:
    """Every unit ``unit`` may import (its layers, transitively), plus the base."""
    out, todo = set(BASE), list(SITS_ON[unit])
    while todo:
        u = todo.pop()
        if u not in out:
            out.add(u)
            todo.extend(SITS_ON[u])
    return out - {u for (src, u) in FORBIDDEN if src == unit}


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "specpilot":
        return None
    return parts[1] if len(parts) > 1 else "specpilot"


def _targets(node: ast.AST, root: Path) -> list[str]:
    """Modules an import statement names (relative imports: specpilot uses none)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
        return []
    if node.module != "specpilot":
        return [node.module]
    # `from specpilot import x`: x is a unit when it is a subpackage or a module, else the root
    return [
        f"specpilot.{a.name}"
        if (root / a.name).is_dir() or (root / f"{a.name}.py").is_file()
        else "specpilot"
        for a in node.names
    ]


def import_graph(src: Path = SRC) -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> where ("specpilot.x.y:LINE"), for every import."""
    graph: dict[tuple[str, str], list[str]] = defaultdict(list)
    root = src / "specpilot"
    for f in sorted(root.rglob("*.py")):
        module = ".".join(f.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        here = _unit(module)
        assert here is not None
        for node in ast.walk(ast.parse(f.read_text("utf-8"), str(f))):
            for name in _targets(node, root):
                there = _unit(name)
                if there is not None and there != here:
                    graph[(here, there)].append(f"{module}:{node.lineno}")
    return dict(graph)


def upward_edges(graph: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], list[str]]:
    bad = {}
    for (src, dst), where in graph.items():
        if src not in SITS_ON:
            bad[(src, dst)] = [f"{src} is in no layer: add it to SITS_ON in tests/test_layering.py"]
        elif dst not in allowed(src):
            bad[(src, dst)] = where
    return bad


def test_no_import_goes_up_a_layer() -> None:
    bad = {e: w for e, w in upward_edges(import_graph()).items() if e not in KNOWN}
    assert not bad, "imports against the layering:\n" + "\n".join(
        f"  {s} -> {d}: {', '.join(w)}" for (s, d), w in sorted(bad.items())
    )


def test_the_engine_imports_nothing_of_specpilot_above_it() -> None:
    # the bottom layer: what an engine module may import is the engine and the base
    assert {d for (s, d) in import_graph() if s == "engine"} <= BASE


def test_the_check_sees_deferred_and_from_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "specpilot"
    (pkg / "analysis").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0'\n")
    (pkg / "analysis" / "__init__.py").write_text("from specpilot import records, __version__\n")
    (pkg / "records.py").write_text("")
    (pkg / "store.py").write_text("def f():\n    from specpilot.analysis import rounds\n")
    (pkg / "engine.py").write_text("import specpilot.store\n")
    graph = import_graph(tmp_path)
    assert graph[("store", "analysis")] == ["specpilot.store:2"]
    assert set(upward_edges(graph)) == {("store", "analysis"), ("engine", "store")}
    assert ("analysis", "specpilot") in graph and ("analysis", "records") in graph  # allowed


def test_the_layers_form_no_cycle() -> None:
    for unit in SITS_ON:
        assert all(unit not in allowed(u) for u in SITS_ON[unit]), unit


def module_graph(src: Path = SRC) -> dict[str, set[str]]:
    """module -> the specpilot modules it imports (deferred and type-only imports included:
    a circle through a function body or ``TYPE_CHECKING`` is a circle all the same). An import
    of a package means its ``__init__``; ``from pkg import name`` means ``pkg.name`` when that
    is a module. A package's ``__init__`` re-exporting its own modules is not an edge back."""
    root = src / "specpilot"
    modules = {
        ".".join(f.relative_to(src).with_suffix("").parts).removesuffix(".__init__"): f
        for f in root.rglob("*.py")
    }
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, f in modules.items():
        for node in ast.walk(ast.parse(f.read_text("utf-8"), str(f))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [
                    f"{node.module}.{a.name}"
                    if f"{node.module}.{a.name}" in modules
                    else node.module
                    for a in node.names
                ]
            for n in names:
                if n in modules and n != module and not module.startswith(n + "."):
                    graph[module].add(n)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_modules() -> None:
    assert import_circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]  # the finder works
    assert import_circles(module_graph()) == []


def private_uses(src: Path = SRC) -> list[str]:
    """Every use of another specpilot module's ``_private`` name: ``from m import _x`` or
    ``m._x`` on a module imported by name. A module's own privates are its own business."""
    out = []
    for path in sorted((src / "specpilot").rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specpilot"):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        out.append(f"{path.relative_to(src)}:{node.lineno} imports {a.name}")
                    else:
                        modules.add(a.asname or a.name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                out.append(
                    f"{path.relative_to(src)}:{node.lineno} uses {node.value.id}.{node.attr}"
                )
    return out


def test_no_module_uses_another_modules_private_names() -> None:
    bad = private_uses()
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


def test_the_private_check_sees_both_forms(tmp_path: Path) -> None:
    pkg = tmp_path / "specpilot"
    pkg.mkdir()
    (pkg / "a.py").write_text("def _x():\n    return 1\n")
    (pkg / "b.py").write_text("from specpilot.a import _x\n")
    (pkg / "c.py").write_text("from specpilot import a\n\nprint(a._x())\n")
    (pkg / "d.py").write_text("from specpilot.a import _x as y\n")
    assert [u.split(" ", 1)[1] for u in private_uses(tmp_path)] == [
        "imports _x",
        "uses a._x",
        "imports _x",
    ]


ENGINES = {"builtin", "llamacpp", "vllm", "sglang"}


def engine_branches(
    src: Path = SRC, packages: tuple[str, ...] = ("pilot", "analysis", "commands", "report")
) -> list[str]:
    """Every branch on an engine's name (``x.engine == "vllm"``, ``engine in ("vllm", ...)``)
    or on an engine's options class (``isinstance(o, VllmOptions)``) in ``packages``: what an
    engine is and does belongs to its adapter (``backends.adapters``)."""
    out = []
    for pkg in packages:
        for path in sorted((src / "specpilot" / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                where = f"{path.relative_to(src)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.Compare):
                    consts = {
                        e.value
                        for side in [node.left, *node.comparators]
                        for e in (
                            [side] if isinstance(side, ast.Constant) else getattr(side, "elts", [])
                        )
                        if isinstance(e, ast.Constant)
                    }
                    if consts & ENGINES:
                        out.append(f"{where} compares with {sorted(consts & ENGINES)}")
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "isinstance"
                    and len(node.args) == 2
                    and "Options" in ast.unparse(node.args[1])
                ):
                    out.append(f"{where} isinstance on {ast.unparse(node.args[1])}")
    return out


def test_no_engine_branches_outside_the_adapters() -> None:
    bad = engine_branches()
    assert not bad, "branches on engine names outside backends/:\n" + "\n".join(bad)


def test_the_engine_branch_check_sees_them(tmp_path: Path) -> None:
    (tmp_path / "specpilot" / "pilot").mkdir(parents=True)
    (tmp_path / "specpilot" / "pilot" / "x.py").write_text(
        'if a.engine == "vllm":\n    pass\n'
        'ok = engine in ("llamacpp", "sglang")\n'
        "b = isinstance(o, BuiltinOptions)\n"
        'c = role == "baseline"\n'
    )
    got = engine_branches(tmp_path, ("pilot",))
    assert [g.split(" ", 1)[1] for g in got] == [
        "compares with ['vllm']",
        "compares with ['llamacpp', 'sglang']",
        "isinstance on BuiltinOptions",
    ]


# analysis/'s rooms (its sub-packages) and what each stands on; ``config`` (what the analysis
# may be told) is under every room, and the package's top (``pilot``, ``plan``, ``__init__``)
# may import every room
ANALYSIS_ROOMS: dict[str, list[str]] = {
    "config": [],
    "base": ["config"],
    "episodes": ["base"],
    "comparison": ["episodes"],
    "mechanism": ["base"],
    "service": ["base"],
    "rollback": ["comparison"],
    "verdicts": ["comparison", "mechanism", "service"],
}


def test_analysis_rooms_stand_only_on_the_rooms_below_them() -> None:
    root = SRC / "specpilot" / "analysis"
    rooms = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(ANALYSIS_ROOMS) - {"config"}, "a room missing from ANALYSIS_ROOMS"
    bad = rooms_against_order("analysis", ANALYSIS_ROOMS)
    assert not bad, "analysis rooms against their order:\n" + "\n".join(bad)


# pilot/'s rooms; ``design`` (the episode design) is under every room
PILOT_ROOMS: dict[str, list[str]] = {
    "design": [],
    "config": ["design"],
    "plan": ["config"],
    "eta": [],
    "run": ["plan", "eta"],
}


def rooms_against_order(package: str, order: dict[str, list[str]]) -> list[str]:
    """Every import of a room of ``specpilot.<package>`` into a room it does not stand on."""
    root = SRC / "specpilot"

    def room(module: str) -> str | None:
        parts = module.split(".")
        if parts[:2] != ["specpilot", package]:
            return None
        return parts[2] if len(parts) > 2 and parts[2] in order else "top"

    def under(r: str) -> set[str]:
        out, todo = {r}, list(order[r])
        while todo:
            x = todo.pop()
            if x not in out:
                out.add(x)
                todo.extend(order[x])
        return out

    bad = []
    for f in sorted((root / package).rglob("*.py")):
        module = ".".join(f.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        here = room(module)
        if here in (None, "top"):
            continue
        for node in ast.walk(ast.parse(f.read_text("utf-8"), str(f))):
            for name in _targets(node, root):
                there = room(name)
                if there is not None and there not in under(here):
                    bad.append(f"{module}:{node.lineno} ({here}) -> {name} ({there})")
    return bad


def test_pilot_rooms_stand_only_on_the_rooms_below_them() -> None:
    root = SRC / "specpilot" / "pilot"
    rooms = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(PILOT_ROOMS) - {"design"}, "a room missing from PILOT_ROOMS"
    bad = rooms_against_order("pilot", PILOT_ROOMS)
    assert not bad, "pilot rooms against their order:\n" + "\n".join(bad)
