"""Checks on structure: JSON (parse, JSON Schema, expected fields) and Python code (compile,
entry point, unit tests in the sandbox).

Reasons point at the field with a JSON pointer ("schema violation: /age not an integer",
"/items/0/quantity: expected 3, got 4") or name the failing test ("tests fail: test_2").

    >>> json_schema('{"age": "x"}', {"json_schema": {"properties": {"age": {"type": "integer"}}}})[1]
    ['schema violation: /age not an integer']
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from specpilot.quality.sandbox import SandboxLimits, run_tests
from specpilot.quality.textchecks import Outcome

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_ARTICLE = {"integer": "an integer", "object": "an object", "array": "an array"}
MAX_REASONS = 8


def extract_json(text: str) -> tuple[Any, str | None]:
    """(value, None) for the answer's JSON value (a fenced block, the whole text, or the first
    ``{``/``[`` from which a value parses), else (None, reason)."""
    for cand in [*(b for _, b in _FENCE.findall(text)), text]:
        try:
            return json.loads(cand.strip()), None
        except json.JSONDecodeError:
            pass
    starts = [m.start() for m in re.finditer(r"[\[{]", text)]
    dec = json.JSONDecoder()
    for at in starts:
        try:
            return dec.raw_decode(text, at)[0], None
        except json.JSONDecodeError:
            pass
    if not starts:
        return None, "no JSON value in the answer"
    try:
        json.loads(text[starts[0] :])
    except json.JSONDecodeError as err:
        return None, f"JSON does not parse (line {err.lineno} col {err.colno}: {err.msg})"
    return None, "JSON does not parse"  # pragma: no cover - loads succeeded where raw_decode failed


def _pointer(path: Any) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _schema_reason(e: Any) -> str:
    ptr = _pointer(e.absolute_path)
    if e.validator == "type":
        want = e.validator_value
        names = want if isinstance(want, list) else [want]
        return f"schema violation: {ptr} not " + " or ".join(
            _ARTICLE.get(n, f"a {n}") for n in names
        )
    if e.validator == "required":
        m = re.match(r"'(.+)' is a required property", e.message)
        field = m.group(1) if m else e.message
        return f"schema violation: {ptr.rstrip('/')}/{field} missing"
    if e.validator == "additionalProperties":
        return f"schema violation: {ptr} {e.message}"
    if e.validator == "enum":
        return f"schema violation: {ptr} not one of {e.validator_value}"
    return f"schema violation: {ptr} {e.message}"


def json_schema(text: str, p: dict[str, Any]) -> Outcome:
    from jsonschema import validators

    value, err = extract_json(text)
    if err is not None:
        return False, [err], 0.0, {}
    schema = p["json_schema"]
    cls = validators.validator_for(schema)
    errors = sorted(cls(schema).iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    reasons = [_schema_reason(e) for e in errors]
    if len(reasons) > MAX_REASONS:
        reasons = [*reasons[:MAX_REASONS], f"... {len(reasons) - MAX_REASONS} more violations"]
    return not reasons, reasons, 1.0 if not reasons else 0.0, {"violations": len(errors)}


def _norm_str(s: str, case: bool) -> str:
    s = re.sub(r"\s+", " ", s).strip()
    return s if case else s.casefold()


def _compare(got: Any, want: Any, path: list[Any], p: dict[str, Any], out: list[str]) -> int:
    """Append mismatches to ``out``; return the number of leaf fields compared."""
    ptr = _pointer(path)
    if isinstance(want, dict):
        if not isinstance(got, dict):
            out.append(f"{ptr}: expected an object, got {type(got).__name__}")
            return max(len(want), 1)
        n = 0
        for k, v in want.items():
            if k not in got:
                out.append(f"{_pointer([*path, k])} missing")
                n += 1
            else:
                n += _compare(got[k], v, [*path, k], p, out)
        return n
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            size = len(got) if isinstance(got, list) else type(got).__name__
            out.append(f"{ptr}: expected {len(want)} items, got {size}")
            return max(len(want), 1)
        return (
            sum(
                _compare(g, w, [*path, i], p, out)
                for i, (g, w) in enumerate(zip(got, want, strict=True))
            )
            or 1
        )
    ok: bool
    if isinstance(want, bool) or want is None:
        ok = got is want
    elif isinstance(want, (int, float)):
        ok = isinstance(got, (int, float)) and not isinstance(got, bool)
        ok = ok and abs(float(got) - float(want)) <= float(p.get("tolerance") or 0.0) + 1e-12
    else:
        case = bool(p.get("case_sensitive"))
        ok = isinstance(got, str) and _norm_str(got, case) == _norm_str(str(want), case)
    if not ok:
        out.append(
            f"{ptr}: expected {json.dumps(want, ensure_ascii=False)}, got {json.dumps(got, ensure_ascii=False)[:60]}"
        )
    return 1


def json_fields(text: str, p: dict[str, Any]) -> Outcome:
    value, err = extract_json(text)
    if err is not None:
        return False, [err], 0.0, {}
    reasons: list[str] = []
    n = _compare(value, p["expected"], [], p, reasons)
    score = max(0.0, 1.0 - len(reasons) / max(n, 1))
    shown = reasons[:MAX_REASONS] + (
        [f"... {len(reasons) - MAX_REASONS} more"] if len(reasons) > MAX_REASONS else []
    )
    return not reasons, shown, score, {"fields": n, "mismatches": len(reasons)}


# -- code ------------------------------------------------------------------------------------


def extract_code(text: str) -> str | None:
    """The answer's Python: the first ```python block (else the first fenced block, else the
    whole answer when it compiles)."""
    blocks = _FENCE.findall(text)
    for lang, body in blocks:
        if lang.lower() in ("python", "py", "python3"):
            return str(body)
    if blocks:
        return str(blocks[0][1])
    try:
        ast.parse(text)
    except SyntaxError:
        return None
    return text


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.name == name
        ):
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
    return False


def test_names(tests: Any) -> dict[str, str]:
    """Tests as {name: source}: a list becomes test_1, test_2, ..."""
    if isinstance(tests, dict):
        return {str(k): str(v) for k, v in tests.items()}
    return {f"test_{i}": str(t) for i, t in enumerate(tests, 1)}


def code_tests(
    text: str, p: dict[str, Any], limits: SandboxLimits | None = None, isolation: str = "auto"
) -> Outcome:
    tests = test_names(p["tests"])
    code = extract_code(text)
    if code is None:
        return False, ["no code block in the answer"], 0.0, {"isolation": None}
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return (
            False,
            [f"code does not compile: {exc.msg} (line {exc.lineno})"],
            0.0,
            {"isolation": None},
        )
    entry = p.get("entry_point")
    if entry and not _defines(tree, entry):
        return False, [f"entry point {entry} not defined"], 0.0, {"isolation": None}
    res = run_tests(code, tests, limits, isolation)
    detail: dict[str, Any] = {
        "isolation": res.isolation,
        "status": res.status,
        "duration_s": round(res.duration_s, 3),
    }
    if res.status == "load_error":
        return False, [f"code fails at import: {res.load_error}"], 0.0, detail
    if res.status != "ok":
        why = {"timeout": "wall timeout", "killed": "killed by a limit"}.get(
            res.status, "no result"
        )
        return False, [f"tests did not finish: {why}"], 0.0, {**detail, "stderr": res.stderr[-300:]}
    failed = res.failed
    detail["tests"] = {n: e for n, e in res.tests.items()}
    reasons = [f"tests fail: {n} ({e.split(':')[0]})" for n, e in failed.items()]
    missing = [n for n in tests if n not in res.tests]
    reasons += [f"tests fail: {n} (not run)" for n in missing]
    score = len(res.passed) / len(tests) if tests else 1.0
    return not reasons, reasons, score, detail
