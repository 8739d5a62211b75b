"""Build an Engine from user-facing options (paths, draft spec, dtype, threads).

Draft specs: ``None``/``"none"`` (plain decoding only), ``"truncate:0,1,28,29"`` (a copy of
some of the target's layers, sharing its embedding and head), ``"shipped:NAME"`` (a distilled
draft shipped in ``specpilot/data/drafts/NAME``), or a path (a draft directory written by
``specpilot distill``, a GGUF file or a checkpoint directory with the target's tokenizer).

Weight formats: ``dtype="auto"`` (the default) measures the candidates on this machine and picks
one (``engine.autoformat``); a named format (``fp32``, ``bf16``, ``int8-bf16``...) is used as
given, its verify-cost curve still measured for the manifest.

    >>> engine, spec = build_engine(None, "truncate:0,1,28,29", dtype="bf16")  # doctest: +SKIP
    >>> spec.dtype, engine.calibration["verify_ratio"]["1"]["4"]                # doctest: +SKIP
    ('bf16', 1.05)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specpilot.engine.autoformat import calibration_plan, formats_for, resolve_device
from specpilot.engine.draft_format import draft_spec_path, is_draft_dir, load_draft_dir
from specpilot.engine.generate import Engine
from specpilot.engine.loader import (
    LoadedModel,
    ModelLoadError,
    check_tokenizers_match,
    default_target_path,
    layer_truncated_copy,
    load_model,
)
from specpilot.engine.model import Transformer
from specpilot.errors import ConfigError

# The default draft: distilled from SmolLM2-135M-Instruct (src/specpilot/data/drafts/, see its
# MODEL_CARD.md). "truncate:0,1,28,29" is the untrained layer-copy baseline.
DEFAULT_DRAFT = "shipped:smollm2-135m-instruct-d4"
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


@dataclass
class EngineSpec:
    """What was loaded, for manifests and reports. ``dtype`` is the target's weight format."""

    target_path: str
    draft: str | None
    dtype: str
    max_slots: int
    max_seq_len: int
    draft_dtype: str | None = None
    device: str = "cpu"
    calibration: dict[str, Any] | None = None


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ConfigError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}") from None


def load_draft(spec: str | None, target: LoadedModel, dtype: torch.dtype) -> Transformer | None:
    if spec is None or spec == "none":
        return None
    if spec.startswith("truncate:"):
        try:
            layers = [int(x) for x in spec.removeprefix("truncate:").split(",") if x]
        except ValueError:
            raise ConfigError(f"draft {spec!r}: use truncate:I,J,... with layer indices") from None
        return layer_truncated_copy(target.model, layers)
    path = draft_spec_path(spec)
    if is_draft_dir(path):  # a distilled draft: only its own layers, on the target's embedding
        return load_draft_dir(path, target, dtype)
    loaded = load_model(path, dtype=dtype)
    if target.tokenizer is not None and loaded.tokenizer is not None:
        check_tokenizers_match(target.tokenizer, loaded.tokenizer)
    return loaded.model


def build_engine(
    target: str | Path | None = None,
    draft: str | None = DEFAULT_DRAFT,
    *,
    dtype: str = "auto",
    max_slots: int = 1,
    max_seq_len: int | None = 2048,
    threads: int | None = None,
    device: str = "cpu",
    k: int | None = None,
    calibration: str | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[Engine, EngineSpec]:
    """Load target (default: SmolLM2-135M-Instruct) and draft into an Engine.

    ``dtype``: a weight format (``engine.formats``) or ``auto``, which measures the candidates
    on this machine and picks the fastest within tolerance of fp32 (``engine.calibrate``).
    ``k``: the default draft tokens per round the choice optimises for (default 3 with a draft,
    0 without). ``calibration``: ``auto`` (cached result when there is one), ``force`` or
    ``skip`` (default: $SPECPILOT_CALIBRATION, else ``auto``). The calibration, with the curve,
    the choice and its reason, is ``engine.calibration`` and ``spec.calibration``.
    """
    if threads:
        torch.set_num_threads(threads)
    dev = resolve_device(device)
    tpath = Path(target) if target else default_target_path()
    if not tpath.exists():
        raise ModelLoadError(f"--target {tpath} does not exist")
    tgt = load_model(tpath, dtype=torch.float32)
    d = load_draft(draft, tgt, torch.float32)
    tgt.model.to(dev)
    if d is not None:
        d.to(dev)  # modules shared with the target are already there
    kk = k if k is not None else (3 if d is not None else 0)
    plan = calibration_plan(dtype, dev, batches=sorted({1, max_slots}), k=kk)
    cal = formats_for(tpath, draft if d is not None else None, tgt, d, plan, calibration, log)
    engine = Engine(
        tgt.model, d, tokenizer=tgt.tokenizer, max_slots=max_slots, max_seq_len=max_seq_len
    )
    engine.calibration = cal.to_dict()
    spec = EngineSpec(
        str(tpath),
        draft if d is not None else None,
        cal.target.chosen,
        max_slots,
        engine.max_seq_len,
        draft_dtype=d.weight_format if d is not None else None,
        device=str(dev),
        calibration=engine.calibration,
    )
    return engine, spec


def chat_prompt_ids(tokenizer: object, text: str, system: str | None = None) -> list[int]:
    """Token ids of a one-turn chat with the tokenizer's own template."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}
    ]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)  # type: ignore[attr-defined]
    if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]
