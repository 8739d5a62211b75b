"""Loading Llama-family checkpoints (HF directory, GGUF) and refusing mismatched tokenizers."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from specpilot.engine.generate import Engine
from specpilot.engine.loader import (
    ModelLoadError,
    TokenizerMismatchError,
    check_tokenizers_match,
    load_model,
)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, tokenizer):
    """A random-weight LlamaForCausalLM saved by transformers itself, with the target tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    d = tmp_path_factory.mktemp("hf_llama")
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)  # test-only weight init
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    return d, model


def test_hf_checkpoint_matches_transformers_logits(hf_dir) -> None:
    d, ref = hf_dir
    loaded = load_model(d, dtype=torch.float32)
    assert loaded.source == "hf" and loaded.model.cfg.n_kv_heads == 2
    m = loaded.model
    m.setup_cache(64, 1)
    ids = torch.tensor([[1, 50, 700, 9000, 12, 5]])
    ours = m(ids, torch.arange(6)[None], torch.tensor([0]))
    with torch.no_grad():
        theirs = ref(ids).logits
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_gguf_target_matches_transformers_gguf_loader(default_target) -> None:
    """Our GGUF reader (dequantise + undo llama.cpp's q/k permutation) vs transformers'."""
    from transformers import AutoModelForCausalLM

    p = default_target.path
    ref = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365]])
    m = copy.deepcopy(default_target.model)
    m.setup_cache(32, 1)
    ours = m(ids, torch.arange(ids.shape[1])[None], torch.tensor([0]))
    with torch.no_grad():
        theirs = ref(ids).logits
    torch.testing.assert_close(ours, theirs, atol=1e-3, rtol=1e-3)
    assert default_target.model.cfg.n_layers == 30 and default_target.tokenizer.eos_token_id == 2


def test_tokenizer_mismatch_names_what_differs(tokenizer) -> None:
    check_tokenizers_match(tokenizer, copy.deepcopy(tokenizer))  # identical: fine

    bigger = copy.deepcopy(tokenizer)
    bigger.add_tokens(["<brand_new_token>"])
    with pytest.raises(TokenizerMismatchError, match="vocab size: target 49152 vs draft 49153"):
        check_tokenizers_match(tokenizer, bigger)

    other_eos = copy.deepcopy(tokenizer)
    other_eos.eos_token = "<|endoftext|>"
    with pytest.raises(
        TokenizerMismatchError, match="special token eos_token_id: target 2 vs draft 0"
    ):
        check_tokenizers_match(tokenizer, other_eos)

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    spec["model"]["merges"] = spec["model"]["merges"][:-100]  # same vocabulary, fewer merges
    fewer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        unk_token=tokenizer.unk_token,
        pad_token=tokenizer.pad_token,
    )
    with pytest.raises(TokenizerMismatchError, match="BPE merges differ"):
        check_tokenizers_match(tokenizer, fewer)


def test_engine_refuses_a_draft_with_another_vocabulary() -> None:
    from conftest import tiny_model

    target = tiny_model(seed=1)
    draft = tiny_model(seed=2, vocab=1000)
    with pytest.raises(
        TokenizerMismatchError, match="vocab size: target model has 49152 logits, draft 1000"
    ):
        Engine(target, draft)


def test_bad_paths_say_what_to_pass(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nope.gguf")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match=r"expected a \.gguf file or a checkpoint directory"):
        load_model(tmp_path / "weights.bin")
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_model(tmp_path)


def test_build_model_loads_every_weight_without_random_init_and_restores_it() -> None:
    from torch import nn

    from conftest import tiny_model
    from specpilot.engine.loader import ModelLoadError, build_model

    ref = tiny_model(5, n_layers=2, dim=32)
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    model = build_model(ref.cfg, state)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    # the constructors initialise again afterwards: two fresh layers differ
    assert not torch.equal(nn.Linear(8, 8).weight, nn.Linear(8, 8).weight)
    del state["layers.1.ffn.w_down.weight"]
    with pytest.raises(ModelLoadError, match=r"layers\.1\.ffn\.w_down\.weight"):
        build_model(ref.cfg, state)


def test_dequantized_weights_are_cached_per_file_content_and_a_torn_cache_is_rebuilt(
    tmp_path, monkeypatch
) -> None:
    """The GGUF's fp32 weights are kept in the cache after the first load, keyed by the file's
    sha256: the second load reads them back equal; a damaged cache file is rebuilt, never used."""
    import torch

    from conftest import tiny_model
    from specpilot.engine import loader
    from specpilot.engine.gguf_export import write_llama_gguf

    monkeypatch.setenv("SPECPILOT_CACHE", str(tmp_path / "cache"))
    src = tiny_model(0, n_layers=1, dim=64)
    gguf_file = write_llama_gguf(
        src, tmp_path / "t.gguf", loader.default_target_path(), dtype="f32"
    )
    first = loader.load_model(gguf_file, tokenizer=False).model.state_dict()
    (cached,) = (tmp_path / "cache" / "weights").glob("*.pt")
    assert cached.name.startswith(loader.file_sha256(gguf_file)[:32])

    def again(path):
        raise AssertionError(f"{path} dequantized again: the cache was not read")

    monkeypatch.setattr(loader, "_dequantized", again)
    second = loader.load_model(gguf_file, tokenizer=False).model.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    monkeypatch.undo()
    monkeypatch.setenv("SPECPILOT_CACHE", str(tmp_path / "cache"))
    cached.write_bytes(cached.read_bytes()[:1000])  # torn
    third = loader.load_model(gguf_file, tokenizer=False).model.state_dict()
    assert all(torch.equal(first[k], third[k]) for k in first)
    assert cached.stat().st_size > 1000  # rewritten whole
