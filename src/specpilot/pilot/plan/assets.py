"""Files an arm needs before it starts (``backends.adapter.Asset``, ``prepare``): our draft
as a GGUF file, the target and our draft as Hugging Face directories.

llama.cpp loads a draft model from GGUF. A specpilot draft directory (``shipped:NAME`` or a
path) holds only its own layers and a restricted head over the target's embedding; exported,
it gets the target's tied embedding as its head (the full vocabulary: llama.cpp has no
restricted head), its layers in f16, and the target's tokenizer copied verbatim. The file is
cached by the hash of the draft and the target, so a second pilot reuses it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

from specpilot.backends.adapter import Asset


def cache_dir() -> Path:
    """``gguf`` under :func:`specpilot.cache_root`."""
    from specpilot import cache_root

    return cache_root() / "gguf"


def _fingerprint(draft_path: Path, target: Path) -> str:
    from specpilot.backends.facts import model_file

    h = hashlib.sha256()
    for role, p in (("draft", draft_path), ("target", target)):
        mf = model_file(role, p)
        h.update(f"{role}:{mf.sha256 if mf else p}\n".encode())
    return h.hexdigest()


def llamacpp_draft_file(spec: str, target: str | Path | None = None) -> Path:
    """A GGUF file llama.cpp can load as ``--model-draft`` for the draft ``spec``.

    A ``.gguf`` path is used as it is; a draft directory or ``shipped:NAME`` is exported once
    (f16, full-vocabulary head) into the cache and reused.
    """
    from specpilot.engine.loader import default_target_path

    target_path = Path(target) if target is not None else default_target_path()
    if spec.endswith(".gguf") and Path(spec).is_file():
        return Path(spec)
    from specpilot.engine.draft_format import draft_spec_path

    draft_path = Path(draft_spec_path(spec))
    key = _fingerprint(draft_path, target_path)
    out = cache_dir() / f"{draft_path.name}-{key[:16]}.f16.gguf"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    export_full_head(spec, target_path, tmp)
    tmp.replace(out)
    return out


def export_full_head(spec: str, target: Path, out: Path) -> Path:
    """Write the draft ``spec`` with the target's full tied head as a GGUF file."""
    import torch

    from specpilot.engine.gguf_export import write_llama_gguf
    from specpilot.engine.loader import load_model
    from specpilot.engine.model import Transformer
    from specpilot.engine.runtime import load_draft

    loaded = load_model(target, dtype=torch.float32, tokenizer=False)
    draft = load_draft(spec, loaded, torch.float32)
    if draft is None:
        raise ValueError(f"draft {spec!r}: nothing to export")
    full = Transformer(replace(draft.cfg, tie_embeddings=True))
    with torch.no_grad():
        state = {
            k: v for k, v in draft.state_dict().items() if not k.startswith(("embed.", "lm_head."))
        }
        state["embed.weight"] = loaded.model.embed.weight.detach().clone()
        missing, unexpected = full.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("lm_head.")]
    if missing or unexpected:
        raise ValueError(
            f"draft {spec!r} does not fit a full-head copy: {missing[:3]} {unexpected[:3]}"
        )
    return write_llama_gguf(
        full, out, tokenizer_from=target, name=f"specpilot-{Path(spec).name}", dtype="f16"
    )


# -- Hugging Face directories (vLLM loads no GGUF) -------------------------------------------


def gguf_to_hf(gguf: Path, out: Path) -> Path:
    """A GGUF model -> a Hugging Face directory (fp32 safetensors, tokenizer, chat template).

    transformers dequantises the GGUF on load; it then refuses to save a GGUF-loaded model
    until its quantizer and ``quantization_config`` are cleared (transformers 5.x)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from specpilot.engine.gguf_read import read_gguf

    read_gguf(gguf)  # a damaged file is one line naming it, not transformers' struct.error
    hf_logging.disable_progress_bar()  # a pilot's log shows steps, not tensor counters
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    return out


def _cached_hf(gguf: Path, name: str, key: str) -> Path:
    from specpilot import cache_root

    out = cache_root() / "hf" / f"{name}-{key[:16]}"
    if (out / "config.json").is_file():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    gguf_to_hf(gguf, tmp)
    tmp.replace(out)
    return out


def hf_target_dir(target: str | Path | None = None) -> Path:
    """The target (a GGUF file; None: the default) as a cached Hugging Face directory. A
    directory is used as it is."""
    from specpilot.backends.facts import model_file
    from specpilot.engine.loader import default_target_path

    path = Path(target) if target is not None else default_target_path()
    if path.is_dir():
        return path
    mf = model_file("target", path)
    return _cached_hf(path, path.stem, mf.sha256 if mf and mf.sha256 else str(path))


def hf_draft_dir(spec: str, target: str | Path | None = None) -> Path:
    """A specpilot draft (``shipped:NAME`` or a draft directory) as a Hugging Face directory:
    its layers on the target's embedding with a tied full-vocabulary head (the GGUF export of
    :func:`llamacpp_draft_file`, converted). A Hugging Face directory is used as it is."""
    from specpilot.engine.loader import default_target_path

    if not spec.startswith("shipped:") and (Path(spec) / "config.json").is_file():
        return Path(spec)
    target_path = Path(target) if target is not None else default_target_path()
    gguf = llamacpp_draft_file(spec, target_path)
    return _cached_hf(gguf, gguf.name.removesuffix(".f16.gguf"), "hf")


# what the live progress says while each kind of file is prepared
ASSET_STEPS = {
    "gguf_draft": "exporting the draft to one GGUF file",
    "hf_target": "converting the target to a Hugging Face directory",
    "hf_draft": "exporting the draft to a Hugging Face directory",
}


def prepare(asset: Asset) -> Path:
    """The file ``asset`` asks for (``backends.adapter.Asset``), made once into the cache."""
    if asset.kind == "gguf_draft" and asset.source is not None:
        return llamacpp_draft_file(asset.source, asset.target)
    if asset.kind == "hf_target":
        return hf_target_dir(asset.source)
    if asset.kind == "hf_draft" and asset.source is not None:
        return hf_draft_dir(asset.source, asset.target)
    raise ValueError(f"no way to prepare {asset}")


def prepared_elsewhere(asset: Asset) -> bool:
    """The asset is a conversion only a pilot makes (not a file already in its format): a
    one-arm ``load --start`` refuses it instead of starting an engine that cannot load it."""
    return not (asset.kind == "gguf_draft" and str(asset.source).endswith(".gguf"))
