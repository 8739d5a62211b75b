"""The engines specpilot starts, each by its adapter (``backends.adapter``).

>>> sorted(ADAPTERS)
['builtin', 'llamacpp', 'sglang', 'vllm']
>>> adapter_of("openai") is None  # an endpoint someone else runs: nothing to start
True
>>> ADAPTERS["llamacpp"].plain()
{'draft': None, 'spec_type': None}
"""

from __future__ import annotations

from specpilot.backends.adapter import EngineAdapter
from specpilot.backends.builtin_arm import BuiltinAdapter
from specpilot.backends.llamacpp_arm import LlamaCppAdapter
from specpilot.backends.sglang_arm import SglangAdapter
from specpilot.backends.vllm_arm import VllmAdapter

ADAPTERS: dict[str, EngineAdapter] = {
    a.engine: a for a in (BuiltinAdapter(), LlamaCppAdapter(), VllmAdapter(), SglangAdapter())
}


def adapter_of(engine: str) -> EngineAdapter | None:
    """The engine's adapter; None for one specpilot cannot start (an endpoint by URL)."""
    return ADAPTERS.get(engine)


__all__ = ["ADAPTERS", "adapter_of"]
