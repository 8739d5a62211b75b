"""Write one of our Llama-family models (e.g. a distilled or layer-truncated draft) as a GGUF file
that llama.cpp can load as ``--model-draft``.

The tokenizer and chat template are copied verbatim from the target's GGUF, so target and draft
share a vocabulary by construction. Q/K rows are permuted back to llama.cpp's interleaved-RoPE
layout (the inverse of ``engine.loader._unpermute``).

    >>> from specpilot.engine.loader import default_target_path, load_model, layer_truncated_copy
    >>> target = load_model(default_target_path(), tokenizer=False)            # doctest: +SKIP
    >>> draft = layer_truncated_copy(target.model, [0, 1, 28, 29])              # doctest: +SKIP
    >>> write_llama_gguf(draft, "draft.gguf", tokenizer_from=default_target_path())  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specpilot.engine.loader import GGUF_LAYER_NAMES

if TYPE_CHECKING:
    import gguf
    import torch

    from specpilot.engine.model import LlamaConfig, Transformer

_LAYER_NAMES = {ours: theirs for theirs, ours in GGUF_LAYER_NAMES.items()}


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Hugging Face rotate-half row order -> llama.cpp interleaved order."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _copy_field(writer: Any, field: Any) -> None:
    import gguf

    vtype = field.types[0]
    value = field.contents()
    if vtype == gguf.GGUFValueType.ARRAY:
        writer.add_key_value(field.name, value, vtype, sub_type=field.types[-1])
    else:
        writer.add_key_value(field.name, value, vtype)


def write_llama_gguf(
    model: Any,
    out: str | Path,
    tokenizer_from: str | Path,
    name: str = "specpilot-draft",
    dtype: str = "f16",
) -> Path:
    """Write ``model`` (a ``specpilot.engine.model.Transformer``) to ``out`` as GGUF.

    dtype: "f32" | "f16" | "q8_0" for the 2-D weights (norms stay f32).
    """
    import gguf

    out = Path(out)
    src = gguf.GGUFReader(str(tokenizer_from))
    vocab = int(next(t for t in src.tensors if t.name == "token_embd.weight").shape[1])
    if vocab != model.cfg.vocab_size:
        raise ValueError(f"model vocab {model.cfg.vocab_size} != tokenizer source vocab {vocab}")
    w = gguf.GGUFWriter(str(out), "llama")
    _add_hparams(w, model.cfg, name, dtype)
    for key, field in src.fields.items():
        if key.startswith("tokenizer."):
            _copy_field(w, field)
    _add_weights(w, model, dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _add_hparams(w: gguf.GGUFWriter, cfg: LlamaConfig, name: str, dtype: str) -> None:
    """The llama architecture's hyperparameters and the file type of ``dtype``."""
    w.add_name(name)
    w.add_context_length(cfg.context_length)
    w.add_embedding_length(cfg.dim)
    w.add_block_count(cfg.n_layers)
    w.add_feed_forward_length(cfg.ffn_dim)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.n_kv_heads)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    ftype = {"f32": 0, "f16": 1, "q8_0": 7}[dtype]
    w.add_file_type(ftype)


def _add_weights(w: gguf.GGUFWriter, model: Transformer, dtype: str) -> None:
    """The model's tensors under llama.cpp's names, Q/K rows permuted to its RoPE layout."""
    cfg = model.cfg
    sd = model.state_dict()
    _add_tensor(w, "token_embd.weight", sd["embed.weight"], dtype)
    _add_tensor(w, "output_norm.weight", sd["norm.weight"], dtype)
    if not cfg.tie_embeddings:
        _add_tensor(w, "output.weight", sd["lm_head.weight"], dtype)
    for i in range(cfg.n_layers):
        for ours, theirs in _LAYER_NAMES.items():
            t = sd[f"layers.{i}.{ours}"]
            if theirs in ("attn_q", "attn_k"):
                n = cfg.n_heads if theirs == "attn_q" else cfg.n_kv_heads
                t = t.new_tensor(permute_qk(t.detach().float().cpu().numpy(), n))
            _add_tensor(w, f"blk.{i}.{theirs}.weight", t, dtype)


def _add_tensor(w: gguf.GGUFWriter, name: str, t: torch.Tensor, dtype: str) -> None:
    """One tensor: 1-D ones (norms) in f32, 2-D ones in ``dtype``."""
    import gguf

    arr = t.detach().float().cpu().numpy()
    if arr.ndim == 1 or dtype == "f32":
        w.add_tensor(name, arr.astype(np.float32))
    elif dtype == "f16":
        w.add_tensor(name, arr.astype(np.float16))
    else:
        q = gguf.quants.quantize(arr.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
