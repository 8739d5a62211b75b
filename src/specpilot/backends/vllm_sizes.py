"""What a vLLM engine holds in memory, from its Hugging Face model directory: the weights at
the serving dtype and the KV cache per token (``backends.vllm``'s memory figures)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


def hf_config(model: str | None) -> dict[str, Any]:
    p = Path(model or "") / "config.json"
    try:
        return dict(json.loads(p.read_text())) if p.is_file() else {}
    except (OSError, ValueError):
        return {}


def kv_bytes_per_token(config: Mapping[str, Any], dtype_bytes: int) -> int:
    """K and V of every layer for one token: 2 x layers x kv heads x head dim x bytes."""
    heads = int(config.get("num_attention_heads") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or int(config.get("hidden_size") or 0) // heads)
    return 2 * int(config.get("num_hidden_layers") or 0) * kv_heads * head_dim * dtype_bytes


def weight_bytes(model: str | None, dtype_bytes: int) -> int | None:
    """A Hugging Face directory's weights at the serving dtype (safetensors sizes rescaled from
    the stored dtype): what the engine holds, not what the process table shows."""
    if not model or not Path(model).is_dir():
        return None
    stored = DTYPE_BYTES.get(str(hf_config(model).get("dtype") or "float32"), 4)
    size = sum(f.stat().st_size for f in Path(model).glob("*.safetensors"))
    return int(size * dtype_bytes / stored) if size else None
