"""The reference speculative-decoding engine: model, weight formats, sampling math, batched
plain/spec rounds, the load-time calibration that picks a weight format, and the scheduler.

No HTTP and no files beyond loading weights and the calibration cache. See ``generate.py`` for
the round structure, ``formats.py`` and ``calibration.py`` for ``--dtype auto``.

    >>> from specpilot.engine import parse_format
    >>> parse_format("bf16").act_dtype
    torch.bfloat16
"""

from specpilot.engine.calibration import Calibration, Tolerance
from specpilot.engine.formats import FORMATS, WeightFormat, apply_format, parse_format
from specpilot.engine.generate import Engine, MemoryReport, RequestState
from specpilot.engine.hardware import HardwareProbe, probe
from specpilot.engine.loader import (
    LoadedModel,
    ModelLoadError,
    TokenizerMismatchError,
    default_target_path,
    layer_truncated_copy,
    load_model,
)
from specpilot.engine.model import LlamaConfig, Transformer
from specpilot.engine.runtime import EngineSpec, build_engine
from specpilot.engine.sampling import SamplingParams

__all__ = [
    "FORMATS",
    "Calibration",
    "Engine",
    "EngineSpec",
    "HardwareProbe",
    "LlamaConfig",
    "LoadedModel",
    "MemoryReport",
    "ModelLoadError",
    "RequestState",
    "SamplingParams",
    "TokenizerMismatchError",
    "Tolerance",
    "Transformer",
    "WeightFormat",
    "apply_format",
    "build_engine",
    "default_target_path",
    "layer_truncated_copy",
    "load_model",
    "parse_format",
    "probe",
]
