"""Making a draft for training: copies of some target layers on the target's embedding.

The draft's file format (``RestrictedHead``, ``save_draft_dir``, ``load_draft_dir``) is inference
code and lives in ``specpilot.engine.draft_format``.

    >>> default_init_layers(30, 4)
    [0, 1, 28, 29]
    >>> draft = make_draft(target.model, [0, 1, 28, 29], head_ids)       # doctest: +SKIP
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from specpilot.engine.draft_format import RestrictedHead
from specpilot.engine.model import Transformer
from specpilot.errors import ConfigError


def default_init_layers(n_target_layers: int, n_layers: int) -> list[int]:
    """Which target layers initialise an ``n_layers`` draft: the first and last halves.

    The first layers build token features, the last ones map to the output space (the trial in
    docs/ENVIRONMENT.md used 0, 1, 28, 29 for four layers of thirty).
    """
    if not 1 <= n_layers <= n_target_layers:
        raise ConfigError(f"--layers must be in [1, {n_target_layers}], got {n_layers}")
    first = n_layers // 2
    last = n_layers - first
    return list(range(first)) + list(range(n_target_layers - last, n_target_layers))


def make_draft(
    target: Transformer, init_layers: Sequence[int], head_ids: torch.Tensor | None = None
) -> Transformer:
    """A draft with copies of ``init_layers`` of the target, sharing its embedding.

    ``head_ids`` None keeps the target's full tied head (shared, not copied).
    """
    if not init_layers or any(not 0 <= i < target.cfg.n_layers for i in init_layers):
        raise ConfigError(f"layers {list(init_layers)} must be in [0, {target.cfg.n_layers})")
    cfg = replace(target.cfg, n_layers=len(init_layers))
    draft = Transformer(cfg)
    draft.embed = target.embed
    draft.norm = copy.deepcopy(target.norm)
    draft.layers = nn.ModuleList(copy.deepcopy(target.layers[i]) for i in init_layers)
    if head_ids is not None:
        draft.lm_head = RestrictedHead(target.lm_head.weight, head_ids)  # type: ignore[assignment]
    else:
        draft.lm_head = target.lm_head
    return draft.eval()
