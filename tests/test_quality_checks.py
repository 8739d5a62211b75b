"""Business checks: every kind with a passing and a failing answer, the built-in groups' checks
on every eval prompt (a correct answer passes, a corrupted one fails with the named key
error), declarations from a workload YAML, and recheck from stored answers."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from specpilot.quality.checks import (
    CheckError,
    evaluate,
    group_checks,
    parse_spec,
    resolve,
    run_check,
    verdict,
)
from specpilot.quality.recheck import recheck, resolve_groups
from specpilot.records import OutputRecord, PilotData, PilotRecord, RequestRecord
from specpilot.workload.config import WorkloadError, parse_workload
from specpilot.workload.groups import group_prompts, load_group


def check(spec: dict[str, Any], text: str, prompt: Any = None) -> tuple[bool, list[str]]:
    c = resolve(parse_spec(spec), prompt)
    assert c is not None
    r = run_check(c, text)
    return r.passed, r.reasons


# -- each kind: pass and fail --------------------------------------------------------------


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_json_schema_pass_and_field_level_errors():
    spec = {"kind": "json_schema", "schema": SCHEMA}
    assert check(spec, 'Here it is:\n```json\n{"name": "Li", "age": 3}\n```') == (True, [])
    ok, reasons = check(spec, '{"name": "Li", "age": "3", "tags": ["a", "c"], "x": 1}')
    assert not ok
    assert "schema violation: /age not an integer" in reasons
    assert "schema violation: /tags/1 not one of ['a', 'b']" in reasons
    assert any(
        r.startswith("schema violation: / Additional properties") and "'x'" in r for r in reasons
    )
    assert check(spec, '{"name": "Li"}') == (False, ["schema violation: /age missing"])
    assert check(spec, "no json here") == (False, ["no JSON value in the answer"])
    ok, reasons = check(spec, '{"name": "Li", "age": }')
    assert not ok and reasons[0].startswith("JSON does not parse (line 1 col 23: Expecting value)")


def test_json_fields_compare_with_normalisation_and_tolerance():
    spec = {
        "kind": "json_fields",
        "expected": {"name": "Amina Okafor", "total": 10.5, "items": [{"q": 3}]},
    }
    good = '{"name": "  amina   OKAFOR", "total": 10.5, "items": [{"q": 3}], "extra": true}'
    assert check(spec, good) == (True, [])
    _, reasons = check(spec, '{"name": "Amina", "total": 10.6, "items": [{"q": 4}]}')
    assert reasons == [
        '/name: expected "Amina Okafor", got "Amina"',
        "/total: expected 10.5, got 10.6",
        "/items/0/q: expected 3, got 4",
    ]
    assert check(
        {**spec, "tolerance": 0.2}, '{"name": "amina okafor", "total": 10.6, "items": [{"q": 3}]}'
    )[0]
    assert check(spec, '{"name": "Amina Okafor", "items": []}')[1] == [
        "/total missing",
        "/items: expected 1 items, got 0",
    ]


def test_code_tests_pass_fail_and_the_errors_before_running():
    spec = {
        "kind": "code_tests",
        "entry_point": "add",
        "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
    }
    assert check(spec, "```python\ndef add(a, b):\n    return a + b\n```") == (True, [])
    ok, reasons = check(spec, "```python\ndef add(a, b):\n    return a + b + (a < 0)\n```")
    assert (ok, reasons) == (False, ["tests fail: test_2 (AssertionError)"])
    assert check(spec, "I cannot help.") == (False, ["no code block in the answer"])
    assert check(spec, "```python\ndef add(a, b)\n    return a\n```")[1][0].startswith(
        "code does not compile"
    )
    assert check(spec, "```python\ndef plus(a, b):\n    return a + b\n```")[1] == [
        "entry point add not defined"
    ]
    ok, reasons = check(
        spec, "```python\nraise SystemExit(3)\ndef add(a, b):\n    return a + b\n```"
    )
    assert not ok and reasons[0].startswith("code fails at import: SystemExit")
    # pytest.raises works inside the sandbox (the code group's tests use it)
    raises = {
        "kind": "code_tests",
        "tests": {"rejects": "import pytest\nwith pytest.raises(ValueError):\n    f(-1)"},
    }
    assert check(raises, "```python\ndef f(x):\n    if x < 0:\n        raise ValueError\n```") == (
        True,
        [],
    )
    assert check(raises, "```python\ndef f(x):\n    return x\n```") == (
        False,
        ["tests fail: rejects (AssertionError)"],
    )


def test_regex_required_forbidden():
    assert check({"kind": "regex", "pattern": r"^Dear ", "multiline": True}, "Hi\nDear Sir")[0]
    assert check({"kind": "regex", "name": "greeting", "pattern": r"^Dear "}, "Hi\nDear Sir") == (
        False,
        ["greeting: required pattern not found"],
    )
    assert check({"kind": "regex", "pattern": r"\bTODO\b", "must_match": False}, "done") == (
        True,
        [],
    )
    assert check({"kind": "regex", "pattern": r"\bTODO\b", "must_match": False}, "x TODO y")[1] == [
        "forbidden pattern found: 'TODO'"
    ]
    req = {"kind": "required", "all_of": ["Refund policy", "30 days"], "any_of": ["email", "phone"]}
    assert check(req, "Our REFUND  policy: 30 days. Call by phone.")[0]
    assert check(req, "Refund policy applies.")[1] == [
        "missing: '30 days'",
        "none of: 'email', 'phone'",
    ]
    forb = {"kind": "forbidden", "terms": ["As an AI"], "patterns": [r"\[(name|date)\]"]}
    assert check(forb, "Dear Ms Li,") == (True, [])
    assert check(forb, "as an ai I write to [name]") == (
        False,
        ["forbidden content: 'As an AI'", "forbidden content: '[name]'"],
    )


def test_numeric_figures_and_amounts_with_tolerance():
    spec = {"kind": "numeric", "values": ["5000元", "11月18日", "021-68881234", "9点", "5点"]}
    good = "通知：11月18日上午9:00至17:00停用，单笔超过５,０００元需审批，电话021-68881234。"
    assert check(spec, good) == (True, [])
    _, reasons = check(spec, "11月18日9点至5点，超过500元审批，电话021-6888123。")
    assert reasons == ["figure 5000元 changed: the answer has 500元", "figure 021-68881234 missing"]
    # 5000元 is not found inside 15000元
    assert check({"kind": "numeric", "values": ["5000元"]}, "共15000元")[1] == [
        "figure 5000元 changed: the answer has 15000元"
    ]
    amount = {
        "kind": "numeric",
        "values": [{"value": 360000, "unit": "元", "tolerance": 1, "label": "contract amount"}],
    }
    assert check(amount, "合同金额为人民币360,000元")[0]
    assert check(amount, "合同金额为人民币360,001元")[0]
    assert check(amount, "合同金额为人民币36,000元")[1] == [
        "contract amount changed: the answer has 36000元"
    ]
    assert check(amount, "合同金额另议")[1] == ["contract amount missing"]


def test_length_and_lines_windows():
    words = {"kind": "length", "unit": "words", "min": 5, "max": 8}
    assert check(words, "one two three four five")[0]
    assert check(words, "one two three")[1] == ["too short: 3 words < 5"]
    assert check(words, " ".join(["w"] * 9))[1] == ["too long: 9 words > 8"]
    zh = {"kind": "length", "min_fraction": 0.5, "of": 10}  # auto: CJK counts characters
    assert check(zh, "春天来了，万物复苏。")[0]  # 10 characters >= 5
    assert check(zh, "春天。")[1] == ["too short: 3 chars < 5"]
    lines = {"kind": "lines", "min": 2, "max": 3}
    assert check(lines, "a\n\nb")[0]
    assert check(lines, "a")[1] == ["too few lines: 1 < 2"]
    assert check(lines, "a\nb\nc\nd")[1] == ["too many lines: 4 > 3"]


def test_verdict_fails_on_key_errors_only():
    checks = [
        resolve(parse_spec({"kind": "regex", "name": "k", "pattern": "x"}), None),
        resolve(
            parse_spec({"kind": "regex", "name": "m", "pattern": "y", "severity": "minor"}), None
        ),
    ]
    assert verdict(evaluate([c for c in checks if c], "x")) == (True, [])
    assert verdict(evaluate([c for c in checks if c], "y")) == (
        False,
        ["k: required pattern not found"],
    )


def test_bad_declarations_name_the_field():
    with pytest.raises(CheckError, match=r"pattern: .*does not compile"):
        parse_spec({"kind": "regex", "pattern": "("})
    with pytest.raises(CheckError, match=r"kind"):
        parse_spec({"kind": "regexp", "pattern": "x"})
    with pytest.raises(CheckError, match=r"need 'of'"):
        parse_spec({"kind": "length", "min_fraction": 0.5})
    with pytest.raises(CheckError, match="severity"):
        parse_spec({"kind": "lines", "min": 1, "severity": "critical"})


# -- the built-in groups: complete on every eval prompt -------------------------------------


def _instance(schema: dict[str, Any]) -> Any:
    """A minimal value valid under the structured group's schemas (test-only generator)."""
    if "enum" in schema:
        return schema["enum"][0]
    t = schema.get("type")
    t = t[0] if isinstance(t, list) else t
    if t == "object":
        props = schema.get("properties", {})
        return {k: _instance(props[k]) for k in schema.get("required", [])}
    if t == "array":
        return [_instance(schema["items"])] * schema.get("minItems", 0)
    return {"string": "x", "integer": 1, "number": 1.5, "boolean": True, "null": None}[t]


def _key_failures(group: str, pid: str, answer: str) -> list[str]:
    g = group_checks(load_group(group))
    return verdict(evaluate(g.for_prompt(pid), answer))[1]


@pytest.mark.parametrize("group", ["structured", "zh_business", "longform"])
def test_every_eval_prompt_has_checks_a_good_answer_passes_a_bad_one_fails(group):
    for p in group_prompts(group, "eval"):
        g = group_checks(load_group(group))
        assert any(c.severity == "key" for c in g.for_prompt(p.id)), p.id
        if group == "structured":
            value = (
                p.meta["expected"]
                if p.meta["expected"] is not None
                else _instance(p.meta["schema"])
            )
            good = json.dumps(value, ensure_ascii=False)
            bad_value = dict(value)
            bad_value.pop(p.meta["schema"]["required"][0])
            bad = json.dumps(bad_value, ensure_ascii=False)
            want = f"schema violation: /{p.meta['schema']['required'][0]} missing"
        elif group == "zh_business":
            good = p.text  # the instruction itself carries every figure and key term
            if p.meta["figures"]:
                fig = p.meta["figures"][0]
                digit = re.findall(r"\d", fig)[0]
                bad = p.text.replace(fig, fig.replace(digit, "7" if digit != "7" else "3", 1))
                want = f"figure {fig}"
            else:
                term = p.meta["key_terms"][0]
                bad, want = p.text.replace(term, ""), f"missing: {term!r}"
        else:
            n = p.meta["target_length"] // 4 + 1
            unit = p.meta["length_unit"]
            para = ("字" * (n // 2)) if unit == "chars" else " ".join(["word"] * (n // 2 + 1))
            good = para + "\n\n" + para + ("字" if unit == "chars" else "")
            bad = para[: len(para) // 3]
            want = "too short"
        assert _key_failures(group, p.id, good) == [], (p.id, good[:80])
        failures = _key_failures(group, p.id, bad)
        assert failures and any(f.startswith(want) for f in failures), (p.id, failures)


def test_every_code_eval_prompt_reference_passes_in_the_sandbox_a_broken_one_fails():
    prompts = group_prompts("code", "eval")
    for p in prompts:
        assert _key_failures("code", p.id, f"```python\n{p.meta['reference']}```") == [], p.id
    p = prompts[0]
    broken = re.sub(r"return .*", "return None", p.meta["reference"], count=1)
    assert _key_failures("code", p.id, f"```python\n{broken}```")[0].startswith(
        "tests fail: test_1"
    )


def test_generate_prompts_skip_expected_fields():
    gen = next(p for p in group_prompts("structured", "all") if p.meta["expected"] is None)
    names = [c.name for c in group_checks(load_group("structured")).for_prompt(gen.id)]
    assert "schema_valid" in names and "expected_fields" not in names


# -- a user's workload declares its own checks -----------------------------------------------


def _workload(tmp_path, checks: Any, prompts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    f = tmp_path / "mine.jsonl"
    rows = prompts or [
        {
            "id": "m1",
            "split": "eval",
            "messages": [{"role": "user", "content": "Give the invoice total."}],
            "meta": {"total": 1250},
        }
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    group: dict[str, Any] = {
        "source": {"format": "specpilot_jsonl", "path": str(f)},
        "output": {"mean": 32},
        "slo": {"ttft_s": 1, "deadline_s": 5},
    }
    if checks is not None:
        group["checks"] = checks
    return {
        "groups": {"mine": group, "code": {}},
        "phases": [{"name": "p", "duration_s": 1, "arrival": {"kind": "constant", "rate": 1}}],
    }


def test_workload_yaml_declares_checks_with_meta_references(tmp_path):
    w = _workload(
        tmp_path,
        [
            {
                "kind": "numeric",
                "name": "total",
                "values": [{"value": 1250, "unit": "", "tolerance": 0.5}],
            },
            {"kind": "required", "all_of": ["total"], "severity": "minor"},
        ],
    )
    groups = resolve_groups(w, tmp_path)
    assert set(groups) == {"mine", "code"}
    assert [c.name for c in groups["code"].for_prompt(group_prompts("code")[0].id)] == [
        "tests_pass",
        "code_block",
    ]
    mine = groups["mine"].for_prompt("m1")
    assert verdict(evaluate(mine, "The total is 1250.00"))[0]
    assert verdict(evaluate(mine, "The total is 1205")) == (
        False,
        ["1250 changed: the answer has 1205"],
    )


def test_workload_check_errors_name_the_field(tmp_path):
    with pytest.raises(WorkloadError, match=r"groups\.mine\.checks\[0\]\.pattern"):
        parse_workload(_workload(tmp_path, [{"kind": "regex"}]))
    with pytest.raises(
        WorkloadError, match=r"groups\.mine\.checks\[0\]\.patern: .*did you mean 'pattern'"
    ):
        parse_workload(_workload(tmp_path, [{"kind": "regex", "pattern": "x", "patern": "y"}]))
    with pytest.raises(
        WorkloadError,
        match=r"groups\.mine\.checks\[0\]\.values: not a meta reference -> .*meta:KEY",
    ):
        parse_workload(_workload(tmp_path, [{"kind": "numeric", "values": "amount"}]))
    w = _workload(tmp_path, [{"kind": "numeric", "values": "meta:amount"}])
    with pytest.raises(CheckError, match=r"prompt m1 has no meta\.amount"):
        resolve_groups(w, tmp_path)


def test_imported_group_without_checks_is_consistency_only(tmp_path):
    groups = resolve_groups(_workload(tmp_path, None), tmp_path)
    assert not groups["mine"].declared
    req = RequestRecord(
        "r", "base", "p", "mine", "p-000000", 0.0, "ok", prompt_id="m1", output_text="1250"
    )
    recs = recheck(PilotData(PilotRecord("p", "p", {}, "", "0", 0.0), requests=[req]), groups)
    assert [(r.kind, r.passed) for r in recs] == [("consistency_only", True)]
    assert "no checks declared" in recs[0].reasons[0]


# -- recheck from stored answers ----------------------------------------------------------


def test_recheck_requests_and_outputs_skips_capped_samples_and_failed_requests():
    groups = resolve_groups()
    p = group_prompts("structured")[0]
    good = json.dumps(p.meta["expected"])
    reqs = [
        RequestRecord(
            "r",
            "base",
            "peak",
            "structured",
            "peak-000000",
            0.0,
            "ok",
            prompt_id=p.id,
            output_text=good,
        ),
        RequestRecord(
            "r",
            "base",
            "peak",
            "structured",
            "peak-000001",
            0.0,
            "timeout",
            prompt_id=p.id,
            output_text="{",
        ),
    ]
    zh = group_prompts("zh_business")[0]
    outs = [
        OutputRecord(
            "r",
            "base",
            "zh_business",
            zh.id,
            0,
            7,
            0.7,
            "截断",
            finish_reason="length",
            max_tokens=24,
        ),
        OutputRecord(
            "r",
            "base",
            "zh_business",
            zh.id,
            1,
            8,
            0.7,
            zh.text,
            finish_reason="stop",
            max_tokens=24,
        ),
    ]
    data = PilotData(PilotRecord("p", "p", {}, "", "0", 0.0), requests=reqs, outputs=outs)
    recs = recheck(data, groups)
    by = {(r.request_id, r.sample_index, r.check_name): r for r in recs}
    assert (
        by[("peak-000000", 0, "schema_valid")].passed
        and by[("peak-000000", 0, "expected_fields")].passed
    )
    assert not any(r.request_id == "peak-000001" for r in recs)  # only status ok is checked
    assert {(r.sample_index, r.check_name) for r in recs if r.request_id is None} == {
        (1, "figures_preserved"),
        (1, "key_terms"),
        (1, "answer_in_chinese"),
        (1, "no_placeholders"),
    }
    assert (
        all(r.passed for r in recs if r.request_id is None)
        and by[(None, 1, "figures_preserved")].seed == 8
    )
