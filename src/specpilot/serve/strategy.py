"""The runtime switch (R8): which speculative strategy a new request gets, per scope.

Scopes, most specific first: ``tag:<group>`` (the request's ``tag``), ``model:<alias>`` (the
``model`` it asked for), ``default``. A strategy is the number of draft tokens per round, k;
k = 0 is plain decoding. Only one draft is loaded (or none: ``--no-draft`` loads nothing and
only k = 0 is allowed).

The table is immutable; a change builds a new one and swaps a reference, so a request resolves
its strategy once, at arrival, and keeps it to the end (requests in flight are unaffected).

File format for ``--strategy-file`` (YAML or JSON), reloadable at runtime::

    default: 4
    models: {smollm2-plain: 0}
    tags: {code: 4, zh_business: 0}
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from specpilot.errors import ConfigError, InputFileError


@dataclass(frozen=True)
class StrategyTable:
    default: int
    models: MappingProxyType[str, int] = field(default_factory=lambda: MappingProxyType({}))
    tags: MappingProxyType[str, int] = field(default_factory=lambda: MappingProxyType({}))
    version: int = 0

    def resolve(self, model: str | None, tag: str | None) -> tuple[int, str]:
        """-> (k, scope that decided it)."""
        if tag is not None and tag in self.tags:
            return self.tags[tag], f"tag:{tag}"
        if model is not None and model in self.models:
            return self.models[model], f"model:{model}"
        return self.default, "default"

    def flat(self) -> dict[str, int]:
        out = {"default": self.default}
        out.update({f"model:{m}": k for m, k in self.models.items()})
        out.update({f"tag:{t}": k for t, k in self.tags.items()})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "default": self.default,
            "models": dict(self.models),
            "tags": dict(self.tags),
            "version": self.version,
        }


class StrategySwitch:
    """Holds the current table; validates and applies changes (thread-safe)."""

    def __init__(
        self, default: int, *, has_draft: bool, draft_name: str | None, max_k: int = 16
    ) -> None:
        self.has_draft, self.draft_name, self.max_k = has_draft, draft_name, max_k
        self._lock = threading.Lock()
        self._check(default, "default")
        self.table = StrategyTable(default)

    def _check(self, k: int, scope: str) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= self.max_k:
            raise ConfigError(
                f"k for scope {scope!r} must be an integer in [0, {self.max_k}], got {k!r}"
            )
        if k > 0 and not self.has_draft:
            raise ConfigError(
                f"k={k} for scope {scope!r} needs a draft, and this server was started without one "
                "(--no-draft): only k = 0 is possible"
            )

    def resolve(self, model: str | None, tag: str | None) -> tuple[int, str]:
        return self.table.resolve(model, tag)

    def set(self, scope: str, k: int | None) -> StrategyTable:
        """Set (or with k=None remove) one scope's override; the default cannot be removed."""
        with self._lock:
            t = self.table
            models, tags, default = dict(t.models), dict(t.tags), t.default
            kind, _, name = scope.partition(":")
            if k is not None:
                self._check(k, scope)
            if scope == "default":
                if k is None:
                    raise ConfigError(
                        "the default scope cannot be removed; set k = 0 to turn speculation off"
                    )
                default = k
            elif kind == "model" and name:
                _put(models, name, k)
            elif kind == "tag" and name:
                _put(tags, name, k)
            else:
                raise ConfigError(
                    f"scope must be 'default', 'model:NAME' or 'tag:NAME', got {scope!r}"
                )
            self.table = StrategyTable(
                default, MappingProxyType(models), MappingProxyType(tags), t.version + 1
            )
            return self.table

    def load(self, data: dict[str, Any]) -> StrategyTable:
        """Replace the whole table from a mapping {default, models, tags} (all checked first)."""
        if not isinstance(data, dict):
            raise ConfigError("strategy config must be a mapping with keys default, models, tags")
        unknown = set(data) - {"default", "models", "tags"}
        if unknown:
            raise ConfigError(f"unknown strategy config keys: {sorted(unknown)}")
        with self._lock:
            default = data.get("default", self.table.default)
            self._check(default, "default")
            parts: list[dict[str, int]] = []
            for key in ("models", "tags"):
                m = data.get(key) or {}
                if not isinstance(m, dict):
                    raise ConfigError(f"{key} must be a mapping of name -> k")
                for name, k in m.items():
                    self._check(k, f"{key[:-1]}:{name}")
                parts.append({str(n): int(k) for n, k in m.items()})
            self.table = StrategyTable(
                default,
                MappingProxyType(parts[0]),
                MappingProxyType(parts[1]),
                self.table.version + 1,
            )
            return self.table

    def load_file(self, path: Path) -> StrategyTable:
        """Replace the table from a YAML/JSON file; a bad file changes nothing."""
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
            raise InputFileError(f"strategy file {path}: {exc}") from None
        return self.load(data or {})


def _put(d: dict[str, int], name: str, k: int | None) -> None:
    if k is None:
        d.pop(name, None)
    else:
        d[name] = k
