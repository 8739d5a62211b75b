"""The reference speculative-decoding engine: model, sampling math, batched plain/spec loops.

No HTTP and no files beyond loading weights. See ``generate.py`` for the round structure.
"""

from specpilot.engine.generate import Engine, MemoryReport, RequestState
from specpilot.engine.loader import (
    LoadedModel,
    ModelLoadError,
    TokenizerMismatchError,
    default_target_path,
    layer_truncated_copy,
    load_model,
)
from specpilot.engine.model import LlamaConfig, Transformer
from specpilot.engine.sampling import SamplingParams

__all__ = [
    "Engine",
    "LlamaConfig",
    "LoadedModel",
    "MemoryReport",
    "ModelLoadError",
    "RequestState",
    "SamplingParams",
    "TokenizerMismatchError",
    "Transformer",
    "default_target_path",
    "layer_truncated_copy",
    "load_model",
]
