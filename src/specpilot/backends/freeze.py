"""From a backend's manifest to what an arm freezes: its strategy and the manifest's hash.

``strategy_of`` reads the manifest's ``speculative`` part in each engine's own words and says
which one switch the arm turns on (R6): none, an independent draft model, an n-gram mode, or
something else. ``frozen_sha256`` hashes what must not change between arms or after an upgrade
goes unnoticed: engine and version, model and tokenizer hashes, the speculative config and the
launch flags (the program's path, port and host left out: they differ between installs and
starts).

    >>> m = {"engine": "llamacpp", "speculative": {"type": "ngram-mod", "n_max": 3}}
    >>> strategy_of(m).kind, strategy_of(m).ngram_type
    ('ngram', 'ngram-mod')
    >>> strategy_of({"engine": "openai-compatible (unknown)", "speculative": {"known": False}}).kind
    'other'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from specpilot.records import StrategySpec

_VOLATILE_FLAGS = ("--port", "--host")


def _draft(manifest: Mapping[str, Any]) -> tuple[str | None, str | None]:
    for m in manifest.get("models") or ():
        if m.get("role") == "draft":
            return m.get("path"), m.get("sha256")
    return None, None


def strategy_of(manifest: Mapping[str, Any]) -> StrategySpec:
    """The arm's speculative switch, from a ``Manifest.to_dict()``."""
    engine = str(manifest.get("engine", ""))
    spec = dict(manifest.get("speculative") or {})
    path, sha = _draft(manifest)
    if engine == "specpilot-builtin":
        if spec.get("draft") is None:
            return StrategySpec("none", k=0, params=spec)
        return StrategySpec("draft", spec.get("k"), path or spec["draft"], sha, params=spec)
    if engine == "llamacpp":
        kind = spec.get("type")
        if kind is None:
            return StrategySpec("none", k=0, params=spec)
        if kind == "draft-simple":
            return StrategySpec("draft", spec.get("n_max"), path, sha, params=spec)
        return StrategySpec("ngram", spec.get("n_max"), ngram_type=kind, params=spec)
    if engine == "vllm":
        if not spec:
            return StrategySpec("none", k=0)
        method = spec.get("method", "draft_model")
        k = spec.get("num_speculative_tokens")
        if method == "draft_model":
            return StrategySpec("draft", k, spec.get("model"), sha, params=spec)
        if method == "ngram":
            return StrategySpec("ngram", k, ngram_type="ngram", params=spec)
        return StrategySpec("other", k, params=spec)
    if engine == "sglang":
        if not spec:
            return StrategySpec("none", k=0)
        kind = "draft" if spec.get("algorithm") == "STANDALONE" else "other"
        return StrategySpec(kind, spec.get("num_steps"), path, sha, params=spec)
    return StrategySpec("other", params={"unknown": True, **spec})


def frozen_sha256(manifest: Mapping[str, Any]) -> str:
    """sha256 of the manifest's frozen part (see the module docstring)."""
    launch = list(manifest.get("launch") or ())[1:]  # the program's path differs by install
    for flag in _VOLATILE_FLAGS:
        while flag in launch:
            i = launch.index(flag)
            del launch[i : i + 2]
    frozen = {
        "engine": manifest.get("engine"),
        "engine_version": manifest.get("engine_version"),
        "models": [(m.get("role"), m.get("sha256")) for m in manifest.get("models") or ()],
        "tokenizer_sha256": manifest.get("tokenizer_sha256"),
        "speculative": manifest.get("speculative"),
        "launch": launch,
    }
    return hashlib.sha256(json.dumps(frozen, sort_keys=True, default=str).encode()).hexdigest()
