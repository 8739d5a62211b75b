"""Built-in task groups (splits, package data, checkable metadata) and the prompt importers."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from specpilot.workload import (
    BUILTIN_GROUPS,
    group_prompts,
    import_prompts,
    load_group,
    training_prompts,
)
from specpilot.workload.groups import LengthSpec, hash_split, select_split


def _norm(text: str) -> str:
    return re.sub(r"\W+", "", text.lower())


def _shingles(text: str, n: int = 8) -> set[str]:
    t = _norm(text)
    return {t[i : i + n] for i in range(max(len(t) - n + 1, 1))}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b)


@pytest.mark.parametrize("name", BUILTIN_GROUPS)
def test_builtin_group_has_40_prompts_and_a_held_out_split(name):
    g = load_group(name)
    assert len(g.prompts) >= 40
    assert len({p.id for p in g.prompts}) == len(g.prompts)
    splits = {s: g.split(s) for s in ("train", "dev", "eval")}
    assert all(len(v) >= 8 for v in splits.values())
    assert len(g.split("all")) == len(g.prompts)
    # The held-out split shares no prompt (nor a near-copy of one) with what a draft may see.
    train = [_shingles(p.text) for p in training_prompts(name)]
    for p in group_prompts(name, "eval"):
        sh = _shingles(p.text)
        assert max(_jaccard(sh, t) for t in train) < 0.7, p.id
    assert g.slo.ttft_s > 0 and g.slo.deadline_s > g.slo.ttft_s
    assert g.output.upper >= g.output.min
    assert g.quality_checks == tuple(c["name"] for c in g.checks)  # names of its declarations
    assert any(c.get("severity", "key") == "key" for c in g.checks)
    for p in g.prompts:
        assert p.messages[-1]["role"] == "user" and p.text.strip()
        assert p.checks == ()


def test_prompt_files_are_package_data():
    files = resources.files("specpilot.workload").joinpath("data")
    names = {f.name for f in files.iterdir()}
    assert {f"{g}.jsonl" for g in BUILTIN_GROUPS} | {"docs.jsonl"} <= names


def test_zh_business_is_chinese_and_keeps_its_figures():
    ps = load_group("zh_business").prompts
    assert all(re.search(r"[\u4e00-\u9fff]", p.text) for p in ps)
    with_figures = [p for p in ps if p.meta["figures"]]
    assert len(with_figures) >= 30
    for p in with_figures:
        assert all(f in p.text for f in p.meta["figures"])


@pytest.mark.parametrize("prompt", load_group("code").prompts, ids=lambda p: p.id)
def test_code_prompt_reference_solution_passes_its_tests(prompt):
    meta = prompt.meta
    ns: dict = {}
    exec(meta["reference"], ns)
    assert meta["entry_point"] in ns and f"def {meta['entry_point']}(" in prompt.text
    for t in meta["tests"]:
        assert t in prompt.text
        exec(t, dict(ns))


def _valid(value, schema) -> bool:
    """The JSON Schema subset the structured group uses (type, properties, items, enum)."""
    if "enum" in schema:
        return value in schema["enum"]
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    pytypes = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "null": type(None),
    }
    if not any(isinstance(value, pytypes[t]) for t in types):
        return False
    if isinstance(value, bool) and "boolean" not in types:
        return False
    if isinstance(value, dict):
        props = schema.get("properties", {})
        if set(schema.get("required", [])) - set(value):
            return False
        if schema.get("additionalProperties") is False and set(value) - set(props):
            return False
        return all(_valid(v, props[k]) for k, v in value.items() if k in props)
    if isinstance(value, list):
        return all(_valid(v, schema.get("items", {})) for v in value)
    return True


def test_structured_expected_answers_match_their_schema():
    ps = load_group("structured").prompts
    extract = [p for p in ps if p.meta["kind"] == "extract"]
    assert len(extract) >= 20 and len(ps) - len(extract) >= 20
    for p in ps:
        schema = p.meta["schema"]
        assert json.dumps(schema, ensure_ascii=False) in p.text
        if p.meta["expected"] is not None:
            assert _valid(p.meta["expected"], schema), p.id


def test_longform_mixes_languages_and_states_a_length():
    ps = load_group("longform").prompts
    langs = {p.meta["lang"] for p in ps}
    assert langs == {"en", "zh"}
    assert all(p.meta["target_length"] and p.meta["target_length"] >= 600 for p in ps)


def test_split_selectors_and_errors():
    ps = load_group("code").prompts
    assert len(select_split(ps, "train+dev")) + len(select_split(ps, "eval")) == len(ps)
    with pytest.raises(ValueError, match="use one of"):
        select_split(ps, "test")
    with pytest.raises(ValueError, match="built-in groups"):
        load_group("nope")


def test_length_spec_sampling_stays_in_bounds():
    import numpy as np

    rng = np.random.default_rng(0)
    for spec in (
        LengthSpec(100),
        LengthSpec(100, "uniform", 50, 150),
        LengthSpec(100, "lognormal", 20, 300, 0.8),
    ):
        xs = [spec.sample(rng) for _ in range(500)]
        assert min(xs) >= spec.min and max(xs) <= spec.upper
    assert {LengthSpec(64).sample(rng) for _ in range(5)} == {64}
    with pytest.raises(ValueError):
        LengthSpec(10, "normal")


def test_hash_split_is_stable_and_roughly_one_third_eval():
    import os
    import subprocess
    import sys

    # stable across processes: Python's own str hash is salted per process, this split is not
    words = [f"prompt {i}" for i in range(20)]
    code = (
        "from specpilot.workload.groups import hash_split; "
        f"print(','.join(hash_split(w) for w in {words!r}))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip().split(",") == [hash_split(w) for w in words], out.stderr
    splits = [hash_split(f"prompt {i}") for i in range(3000)]
    assert 0.28 < splits.count("eval") / 3000 < 0.39
    assert 0.12 < splits.count("dev") / 3000 < 0.21


# -- importers: small files in each project's own format ------------------------------


def test_import_openai_chat_jsonl(tmp_path):
    # OpenAI chat fine-tuning format: one {"messages": [...]} per line.
    lines = [
        {
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Name a prime."},
                {"role": "assistant", "content": "7"},
            ]
        },
        {"messages": [{"role": "user", "content": "Say hi."}], "split": "eval"},
    ]
    f = tmp_path / "chat.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    ps = import_prompts(f, "openai_jsonl", "mine")
    assert [p.messages[-1]["content"] for p in ps] == ["Name a prime.", "Say hi."]
    assert ps[0].messages[0]["role"] == "system" and ps[0].meta["reference"] == "7"
    assert ps[1].split == "eval" and ps[0].split in ("train", "dev", "eval")
    assert all(p.group == "mine" for p in ps)


def test_import_openai_jsonl_errors_name_the_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"messages": [{"role": "user", "content": "ok"}]}\n{"prompt": "no messages"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*messages"):
        import_prompts(f, "openai_jsonl", "g")


def test_import_sharegpt_json(tmp_path):
    # ShareGPT (ShareGPT_V3_unfiltered_cleaned_split.json): a JSON array of conversations.
    data = [
        {
            "id": "QWJhYvA_0",
            "conversations": [
                {"from": "human", "value": "Summarise the water cycle."},
                {"from": "gpt", "value": "Water evaporates, condenses and falls."},
                {"from": "human", "value": "Shorter?"},
                {"from": "gpt", "value": "It loops."},
            ],
        },
        {"id": "empty_1", "conversations": []},
        {
            "id": "sys_2",
            "conversations": [
                {"from": "system", "value": "Answer in French."},
                {"from": "human", "value": "Hello?"},
            ],
        },
        {
            "id": "gpt_first_3",
            "conversations": [{"from": "gpt", "value": "Hi!"}, {"from": "human", "value": "Hey"}],
        },
    ]
    f = tmp_path / "sharegpt.json"
    f.write_text(json.dumps(data))
    ps = import_prompts(f, "sharegpt", "chat")
    assert [p.id for p in ps] == ["QWJhYvA_0", "sys_2", "gpt_first_3"]
    assert ps[0].messages == ({"role": "user", "content": "Summarise the water cycle."},)
    assert ps[0].meta["reference"] == "Water evaporates, condenses and falls."
    assert [m["role"] for m in ps[1].messages] == ["system", "user"]
    assert ps[2].messages == ({"role": "user", "content": "Hey"},)
    # The same content as JSONL gives the same prompts.
    g = tmp_path / "sharegpt.jsonl"
    g.write_text("\n".join(json.dumps(x) for x in data))
    assert [p.messages for p in import_prompts(g, "sharegpt", "chat")] == [p.messages for p in ps]


def test_import_specbench_question_jsonl(tmp_path):
    # Spec-Bench data/spec_bench/question.jsonl: MT-bench style lines with question_id,
    # category and turns.
    lines = [
        {
            "question_id": 81,
            "category": "writing",
            "turns": ["Compose a travel blog post.", "Rewrite it."],
        },
        {"question_id": 161, "category": "translation", "turns": ["Translate to English: 你好"]},
        {
            "question_id": 401,
            "category": "math_reasoning",
            "turns": ["What is 17 * 3?"],
            "reference": ["51"],
        },
    ]
    f = tmp_path / "question.jsonl"
    f.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    ps = import_prompts(f, "specbench", "sb")
    assert [p.id for p in ps] == ["sb-81", "sb-161", "sb-401"]
    assert ps[0].text == "Compose a travel blog post." and ps[0].meta["turns"][1] == "Rewrite it."
    assert ps[2].meta["reference"] == ["51"]
    only = import_prompts(f, "specbench", "sb", categories=["translation"])
    assert [p.meta["category"] for p in only] == ["translation"]
    with pytest.raises(ValueError, match="no usable prompts"):
        import_prompts(f, "specbench", "sb", categories=["nope"])
    with pytest.raises(FileNotFoundError):
        import_prompts(tmp_path / "missing.jsonl", "specbench", "sb")
