"""Engine options of a pilot arm (``arms[].options``), one model per engine (each engine's
adapter holds its own: ``backends.adapters``), and the arm's resource budget: the one
vocabulary of engine options, shared by pilot files and ``specpilot load --start
--engine-opt`` (:func:`specpilot.pilot.plan.engines.engine_options`).

    >>> BuiltinOptions(draft="shipped:smollm2-135m-instruct-d4", k=3).max_slots
    4
    >>> OPTIONS["llamacpp"](spec_type="ngram-mod").draft_n_max
    3

A check across fields raises :class:`specpilot.validation.FieldProblem` with the field it is
about, so a file's error names that field's line.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specpilot.backends.adapters import ADAPTERS
from specpilot.backends.builtin_arm import SHIPPED_DRAFT, BuiltinOptions
from specpilot.backends.llamacpp_arm import LlamaCppOptions
from specpilot.backends.sglang_arm import SglangOptions
from specpilot.backends.vllm_arm import VllmOptions
from specpilot.validation import StrictModel

_Model = StrictModel


class BudgetModel(_Model):
    """The arm's resource budget (R6). The alternative declares what it matched and changed.

    derive: ``kv_slots`` sets the builtin alternative's ``max_slots`` from the speculative
    arm's measured draft memory (weights + KV) divided by one target KV slot, so the memory the
    draft took buys target concurrency instead.
    """

    matched_against: str | None = None
    memory_bytes: int | None = Field(None, ge=0)
    cores: int | None = Field(None, ge=1)
    devices: list[str] = Field(default_factory=list)
    changes: list[str] = Field(default_factory=list)  # capacity settings changed vs the reference
    derive: Literal["none", "kv_slots"] = "none"
    notes: list[str] = Field(default_factory=list)


# engine -> its options model: the one vocabulary of engine options (pilot files' arms[].options,
# `specpilot load --start --engine-opt`)
EngineOptions = BuiltinOptions | LlamaCppOptions | VllmOptions | SglangOptions
OPTIONS: dict[str, type[StrictModel]] = {e: a.options for e, a in ADAPTERS.items()}

__all__ = [
    "OPTIONS",
    "SHIPPED_DRAFT",
    "BudgetModel",
    "BuiltinOptions",
    "EngineOptions",
    "LlamaCppOptions",
    "SglangOptions",
    "VllmOptions",
]
