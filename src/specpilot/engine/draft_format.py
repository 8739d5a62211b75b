"""The draft file format: a few Llama layers on the target's embedding, with a restricted head.

A draft directory holds only what differs from the target::

    draft.json          format tag, target sha256, layer config, where layers came from, training
    draft.safetensors   layers.*, norm.weight, head_ids (the N target-vocabulary ids it scores)
    MODEL_CARD.md       data, steps, wall time, measured acceptance per task group

At load time the embedding is taken from the target (shared, not copied) and the head is the
target's tied embedding restricted to ``head_ids``: the draft's logits are ``-inf`` for every
other token, so its probability q is exactly 0 there. The Leviathan rule still runs over the full
vocabulary (the target's p is untouched), hence the output distribution stays the target's; the
draft only can never *propose* a token outside ``head_ids`` (tests/test_draft.py).

This is inference code (the engine loads drafts with it); training and screening live in
``specpilot.draft``, which writes directories with ``save_draft_dir``.

    >>> path = draft_spec_path("shipped:smollm2-135m-instruct-d4")
    >>> read_draft_meta(path)["format"]
    'specpilot-draft/1'
    >>> draft = load_draft_dir(path, target_loaded)          # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specpilot.engine.loader import LoadedModel, ModelLoadError, file_sha256
from specpilot.engine.model import LlamaConfig, Transformer

FORMAT = "specpilot-draft/1"
DRAFT_JSON = "draft.json"
DRAFT_WEIGHTS = "draft.safetensors"
MODEL_CARD = "MODEL_CARD.md"


class RestrictedHead(nn.Module):
    """LM head over a subset of the vocabulary; full-vocabulary logits with -inf elsewhere.

    ``weight`` holds the subset's rows of the (tied) embedding: (N, dim). The full-size output
    keeps the engine's contract (logits (B, T, V)), so sampling, warping and the accept rule
    need no change; scoring N rows instead of V is where the time goes.
    """

    ids: torch.Tensor

    def __init__(self, full_weight: torch.Tensor, ids: torch.Tensor) -> None:
        super().__init__()
        ids = ids.to(torch.long)
        if ids.ndim != 1 or ids.numel() == 0:
            raise ValueError("head ids must be a non-empty 1-D tensor")
        if int(ids.max()) >= full_weight.shape[0] or int(ids.min()) < 0:
            raise ValueError("head ids outside the vocabulary")
        if torch.unique(ids).numel() != ids.numel():
            raise ValueError("head ids must be unique")
        self.vocab_size = int(full_weight.shape[0])
        self._full = [full_weight]  # the target's head (a list: not registered, not copied)
        self.register_buffer("ids", ids, persistent=False)
        self.weight = nn.Parameter(full_weight.detach()[ids].clone(), requires_grad=False)
        self.proj: nn.Module | None = None  # a quantised weight format's packed copy of weight

    @property
    def full_weight(self) -> torch.Tensor:
        """The unrestricted head (the target's), e.g. for perplexity over the whole vocabulary."""
        return self._full[0]

    def forward_small(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., dim) -> logits over the subset (..., N), in ``ids`` order."""
        if self.proj is not None:
            out: torch.Tensor = self.proj(x)
            return out
        return F.linear(x, self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        small = self.forward_small(x)  # (B, T, N)
        out = small.new_full((*small.shape[:-1], self.vocab_size), float("-inf"))  # (B, T, V)
        return out.index_copy_(-1, self.ids, small)


def head_ids_of(draft: Transformer) -> torch.Tensor | None:
    head = draft.lm_head
    return head.ids if isinstance(head, RestrictedHead) else None


def own_state(draft: Transformer) -> dict[str, torch.Tensor]:
    """What a draft directory ships: layers and final norm (not the shared embedding/head)."""
    sd = {
        k: v.detach().contiguous()
        for k, v in draft.state_dict().items()
        if k.startswith("layers.") or k == "norm.weight"
    }
    ids = head_ids_of(draft)
    if ids is not None:
        sd["head_ids"] = ids.to(torch.int32).contiguous()
    return sd


def save_draft_dir(
    draft: Transformer,
    out: Path,
    *,
    target_path: Path,
    init_layers: Sequence[int],
    dtype: torch.dtype = torch.bfloat16,
    training: dict[str, Any] | None = None,
) -> Path:
    """Write ``draft.json`` + ``draft.safetensors`` (weights cast to ``dtype``)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    sd = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in own_state(draft).items()}
    save_file(sd, str(out / DRAFT_WEIGHTS))
    ids = head_ids_of(draft)
    meta = {
        "format": FORMAT,
        "target_sha256": file_sha256(target_path) if target_path.is_file() else None,
        "target_name": target_path.name,
        "config": asdict(draft.cfg),
        "init_layers": list(init_layers),
        "head_vocab": int(ids.numel()) if ids is not None else None,
        "shared_with_target": ["embed.weight", "lm_head (tied embedding rows)"],
        "dtype": str(dtype).removeprefix("torch."),
        "training": training or {},
    }
    (out / DRAFT_JSON).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    return out


def shipped_draft_path(name: str) -> Path:
    """Directory of a draft shipped with the package (``specpilot/data/drafts/NAME``)."""
    from importlib import resources

    root = Path(str(resources.files("specpilot"))) / "data" / "drafts"
    path = root / name
    if not is_draft_dir(path):
        have = sorted(p.name for p in root.iterdir() if is_draft_dir(p)) if root.is_dir() else []
        raise ModelLoadError(f"no shipped draft {name!r}; shipped: {have or 'none'}")
    return path


def draft_spec_path(spec: str) -> Path:
    """``shipped:NAME`` -> the shipped draft's directory; anything else is a path."""
    if spec.startswith("shipped:"):
        return shipped_draft_path(spec.removeprefix("shipped:"))
    return Path(spec)


def is_draft_dir(path: Path) -> bool:
    return path.is_dir() and (path / DRAFT_JSON).is_file()


def read_draft_meta(path: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((path / DRAFT_JSON).read_text())
    if meta.get("format") != FORMAT:
        raise ModelLoadError(f"{path}: draft format {meta.get('format')!r}, expected {FORMAT!r}")
    return meta


def load_draft_dir(
    path: Path, target: LoadedModel, dtype: torch.dtype | None = None, *, check_sha: bool = True
) -> Transformer:
    """Rebuild a draft from its directory on top of the loaded target's embedding."""
    from safetensors.torch import load_file

    meta = read_draft_meta(path)
    want = meta.get("target_sha256")
    if check_sha and want and target.path.is_file():
        have = file_sha256(target.path)
        if have != want:
            raise ModelLoadError(
                f"draft {path} was distilled from a target with sha256 {want[:12]}..., but the "
                f"target {target.path} has {have[:12]}...: its embedding may differ. Distil a "
                "draft for this target (`specpilot distill --target ...`) or pass --draft none"
            )
    cfg = LlamaConfig(**meta["config"])
    tcfg = target.model.cfg
    if (cfg.vocab_size, cfg.dim) != (tcfg.vocab_size, tcfg.dim):
        raise ModelLoadError(
            f"draft {path}: vocab/dim {cfg.vocab_size}/{cfg.dim} do not fit the target's "
            f"{tcfg.vocab_size}/{tcfg.dim}"
        )
    sd = load_file(str(path / DRAFT_WEIGHTS))
    ids = sd.pop("head_ids", None)
    dt = dtype or target.model.embed.weight.dtype
    draft = Transformer(cfg)
    draft.embed = target.model.embed
    draft.lm_head = (
        RestrictedHead(target.model.lm_head.weight, ids.to(torch.long))  # type: ignore[assignment]
        if ids is not None
        else target.model.lm_head
    )
    missing, unexpected = draft.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not m.startswith(("embed.", "lm_head."))]
    if missing or unexpected:
        raise ModelLoadError(
            f"{path}: weights do not fit draft.json: {missing[:3]} {unexpected[:3]}"
        )
    for name, mod in draft.named_children():
        if name not in ("embed", "lm_head"):
            mod.to(dt)
    if isinstance(draft.lm_head, RestrictedHead):
        draft.lm_head.to(dt)
    return draft.eval()
