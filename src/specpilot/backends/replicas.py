"""Replicas of one arm must be alike: where their manifests (what each endpoint reported,
``backends.reported``) say different things, the pilot refuses them.

``replica_differences`` compares the fields below across the replicas' manifests and returns
one :class:`Difference` per field that differs (``refuse``: True) or that some replica does
not report while another does (``refuse``: False, "cannot be compared": a replica that says
nothing is not evidence of a difference, nor of none). Fields no replica reports are silent.

- ``served models``: the model ids of ``GET /v1/models``;
- ``model paths``: the target and draft the endpoint names (vLLM's ``root``, SGLang's
  ``model_path`` and draft path, llama.cpp's ``model_path``, the builtin server's draft);
- ``engine version``;
- ``speculative settings``: the reported settings (``speculative`` with ``known`` True), in
  the engine's own words; the arm's own entries (``model``, ``unknown``) are left out.

    >>> a = {"endpoint": "http://a", "engine_version": "0.9.1", "models": [],
    ...      "speculative": {"known": True, "enabled": True, "num_speculative_tokens": 3}}
    >>> b = {**a, "endpoint": "http://b", "engine_version": "unknown",
    ...      "speculative": {"known": True, "enabled": True, "num_speculative_tokens": 5}}
    >>> for d in replica_differences([a, b]):
    ...     print(d.refuse, d)
    False engine version cannot be compared: http://b does not report it (0.9.1 at http://a)
    True speculative settings differ between replicas: num_speculative_tokens 3 at http://a vs 5 at http://b
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.backends.protocol import Manifest

# entries of ``speculative`` that are not settings the endpoint reported
ARM_ENTRIES = ("known", "model", "unknown")


@dataclass(frozen=True)
class Difference:
    """One field on which the replicas disagree (``refuse``) or cannot be compared."""

    field: str
    refuse: bool
    sentence: str

    def __str__(self) -> str:
        return self.sentence


def _served(m: Mapping[str, Any]) -> Any:
    ids = sorted(x.get("path") for x in m.get("models") or () if x.get("role") == "served")
    return ids or None


def _paths(m: Mapping[str, Any]) -> Any:
    got = sorted(
        f"{x.get('role')} {x.get('path')}"
        for x in m.get("models") or ()
        if x.get("role") in ("target", "draft")
    )
    return got or None


def _version(m: Mapping[str, Any]) -> Any:
    v = m.get("engine_version")
    return None if v in (None, "", "unknown") else v


def _speculative(m: Mapping[str, Any]) -> Any:
    spec = m.get("speculative") or {}
    if not spec.get("known"):
        return None
    return {k: v for k, v in spec.items() if k not in ARM_ENTRIES}


FIELDS: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
    ("served models", _served),
    ("model paths", _paths),
    ("engine version", _version),
    ("speculative settings", _speculative),
)


def replica_differences(manifests: Sequence[Manifest | Mapping[str, Any]]) -> list[Difference]:
    """The fields on which these replicas' manifests differ or cannot be compared (module
    docstring); each replica is named by its ``endpoint``."""
    ms = [m.to_dict() if isinstance(m, Manifest) else m for m in manifests]
    names = [str(m.get("endpoint") or f"replica {i + 1}") for i, m in enumerate(ms)]
    out = []
    for name, value_of in FIELDS:
        found = _compare(name, names, [value_of(m) for m in ms])
        if found is not None:
            out.append(found)
    return out


def _compare(field: str, names: list[str], values: list[Any]) -> Difference | None:
    said = [(n, v) for n, v in zip(names, values, strict=True) if v is not None]
    silent = [n for n, v in zip(names, values, strict=True) if v is None]
    if not said:
        return None
    if len({_key(v) for _, v in said}) > 1:
        if field == "speculative settings":
            body = _settings(said)
        else:
            body = _grouped([(n, _show(v)) for n, v in said])
        tail = f" ({_silent(silent)})" if silent else ""
        plural = "engine versions" if field == "engine version" else field
        return Difference(field, True, f"{plural} differ between replicas: {body}{tail}")
    if silent:
        return Difference(
            field,
            False,
            f"{field} cannot be compared: {_silent(silent)} "
            f"({_grouped([(n, _show(v)) for n, v in said])})",
        )
    return None


def _silent(names: list[str]) -> str:
    return f"{', '.join(names)} {'does' if len(names) == 1 else 'do'} not report it"


def _settings(said: list[tuple[str, dict[str, Any]]]) -> str:
    """Only the settings that differ, each with its values by replica."""
    keys = sorted({k for _, d in said for k in d})
    parts = []
    for k in keys:
        if len({_key(d.get(k)) for _, d in said}) > 1:
            parts.append(f"{k} {_grouped([(n, _show(d.get(k))) for n, d in said])}")
    return "; ".join(parts)


def _grouped(pairs: list[tuple[str, str]]) -> str:
    """``value at name, name vs value at name``, in first-seen order."""
    groups: dict[str, list[str]] = {}
    for name, shown in pairs:
        groups.setdefault(shown, []).append(name)
    return " vs ".join(f"{shown} at {', '.join(ns)}" for shown, ns in groups.items())


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return value if isinstance(value, str) else _key(value)
