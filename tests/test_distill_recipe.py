"""The distillation recipe's inputs: code-writing prompts from the stdlib, prompt mix per group,
continuing from an existing draft, and a teacher cache that is never matched to other prompts."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import tiny_model
from specpilot.commands.distill import _weights
from specpilot.draft.corpora import build_prompts, stdlib_specs
from specpilot.draft.model import make_draft
from specpilot.draft.recipe import RecipeConfig, initial_draft, teacher_data
from specpilot.engine.draft_format import head_ids_of, save_draft_dir
from specpilot.engine.loader import LoadedModel

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def specs():
    return stdlib_specs(limit_files=120)


def test_stdlib_specs_are_stubs_of_real_functions(specs) -> None:
    assert len(specs) > 100
    for spec in specs:
        (fn,) = ast.parse(spec.stub).body  # one function and nothing else
        assert isinstance(fn, ast.FunctionDef) and fn.name == spec.name
        assert ast.get_docstring(fn) == spec.doc and len(fn.body) == 1  # a stub: docstring only
        assert fn.args.args  # methods lose self/cls; functions without arguments are left out
        assert 30 <= len(spec.doc) <= 300 and "\n" not in spec.doc
        for line in spec.tests:  # doctest examples as asserts on the bare function name
            (stmt,) = ast.parse(line).body
            assert isinstance(stmt, ast.Assert) and f"{spec.name}(" in line
            assert f".{spec.name}(" not in line.split("==")[0]


def test_code_prompts_follow_weights_and_write_share(tmp_path: Path) -> None:
    # an empty corpus directory: zh_business and longform have no source texts, code comes
    # from the stdlib and structured from templates, so their counts are exact
    kw = dict(code_files=120, spec_files=300)  # a seeded share of the stdlib: seconds, not 20
    ps = build_prompts(tmp_path, "train", 12, weights={"code": 2.5}, code_write_share=0.75, **kw)
    groups = Counter(p.group for p in ps)
    assert groups == {"code": 30, "structured": 12}
    kinds = Counter(p.source for p in ps if p.group == "code")
    assert kinds == {"python-stdlib-specs": 22, "python-stdlib": 8}  # floor(30 * 0.75) writes
    writes = [p.text for p in ps if p.source == "python-stdlib-specs"]
    assert any(t.startswith("Complete this Python function so that the tests") for t in writes)
    assert all("```python\ndef " in t or t.startswith("Write a Python function") for t in writes)
    held = build_prompts(tmp_path, "heldout", 12, weights={"code": 2.5}, code_write_share=1.0, **kw)
    code = {p.text for p in ps if p.group == "code"}
    assert not code & {p.text for p in held}  # split by the function's text
    no_code = build_prompts(tmp_path, "train", 4, weights={"code": 0}, **kw)
    assert not [p for p in no_code if p.group == "code"]


def test_prompt_mix_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="weights"):
        build_prompts(tmp_path, "train", 2, weights={"cod": 2})
    with pytest.raises(ValueError, match="code_write_share"):
        build_prompts(tmp_path, "train", 2, code_write_share=1.5)
    assert _weights("code=2, longform=0.5") == {"code": 2.0, "longform": 0.5}
    with pytest.raises(ValueError, match=r"--weights.*GROUP=NUMBER"):
        _weights("code:2")


def _loaded(tmp_path: Path, seed: int = 6) -> LoadedModel:
    target = tiny_model(seed, n_layers=4)
    tfile = tmp_path / "target.gguf"
    tfile.write_bytes(b"pretend weights")
    return LoadedModel(model=target, tokenizer=None, path=tfile, source="gguf")


def test_training_continues_from_a_draft_directory(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path)
    trained = make_draft(loaded.model, [0, 3], torch.arange(100, 900))
    with torch.no_grad():  # stands for training: the draft now differs from its init layers
        trained.layers[1].attn.wq.weight.mul_(0.5)
    src = save_draft_dir(
        trained, tmp_path / "d", target_path=loaded.path, init_layers=[0, 3], dtype=torch.float32
    )
    cfg = RecipeConfig(target=loaded.path, layers=2, minutes=1, out=tmp_path / "o")
    cfg.init_draft = str(src)
    draft, init = initial_draft(cfg, loaded, torch.arange(0, 50))
    assert init == [0, 3]
    assert torch.equal(head_ids_of(draft), torch.arange(100, 900))  # its own head, not the new
    tokens = torch.randint(0, 2000, (1, 10))
    with torch.no_grad():
        torch.testing.assert_close(draft.forward_train(tokens), trained.forward_train(tokens))
    fresh, init = initial_draft(
        RecipeConfig(target=loaded.path, layers=2, minutes=1, out=tmp_path / "o"),
        loaded,
        torch.arange(0, 50),
    )
    assert init == [0, 3] and torch.equal(head_ids_of(fresh), torch.arange(0, 50))
    cfg.layers = 3
    with pytest.raises(ValueError, match="--layers 2"):
        initial_draft(cfg, loaded, torch.arange(0, 50))
    cfg.init_draft = str(tmp_path)  # not a draft directory
    with pytest.raises(Exception, match=str(tmp_path)):
        initial_draft(cfg, loaded, torch.arange(0, 50))


def test_teacher_cache_is_keyed_by_the_prompt_list(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, seed=7)
    cfg = RecipeConfig(
        target=loaded.path, layers=1, minutes=1, out=tmp_path / "o", cache=tmp_path / "cache",
        batch=2, max_new=4, topk=4,
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    a = [("code", torch.randint(0, 2000, (6,), generator=g).tolist()) for _ in range(3)]
    b = [("code", torch.randint(0, 2000, (6,), generator=g).tolist()) for _ in range(3)]
    logs: list[str] = []
    first = teacher_data(cfg, loaded.model, a, [], float("inf"), logs.append)
    assert [s.tokens[: s.prompt_len] for s in first] == [p for _, p in a]
    other = teacher_data(cfg, loaded.model, b, [], float("inf"), logs.append)
    assert [s.tokens[: s.prompt_len] for s in other] == [p for _, p in b]
    again = teacher_data(cfg, loaded.model, a, [], float("inf"), logs.append)
    assert [s.tokens for s in again] == [s.tokens for s in first]
    assert ": 3 samples; 0 prompts left" in logs[-1]
    assert len(list(cfg.cache.iterdir())) == 2
