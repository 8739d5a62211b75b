"""SGLang as the pilot sees it: its options and its adapter (``backends.adapter``).

>>> a = SglangAdapter()
>>> a.strategy(SglangOptions(model="m", draft="d", k=2)).k, a.switch
(2, 'restart')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from specpilot.backends.adapter import EngineAdapter, Launch, renamed
from specpilot.backends.protocol import Backend
from specpilot.backends.vllm_arm import served_strategy, server_frozen
from specpilot.records import StrategySpec
from specpilot.validation import StrictModel


class SglangOptions(StrictModel):
    model: str
    draft: str | None = None
    k: int = Field(3, ge=1)
    algorithm: str = "STANDALONE"
    extra_args: list[str] = Field(default_factory=list)


class SglangAdapter(EngineAdapter):
    engine = "sglang"
    options = SglangOptions
    start_prior_s = 90.0
    option_of: ClassVar[dict[str, str]] = {
        "target": "model",
        "tokenizer_sha256": "model",
        "engine_args": "extra_args",
    }

    def backend(
        self, o: Any, *, dtype: str | None, files: Mapping[str, str], port: int | None
    ) -> Backend:
        from specpilot.backends.sglang import SglangBackend

        return SglangBackend(
            model=o.model,
            draft=o.draft,
            k=o.k,
            algorithm=o.algorithm,
            extra_args=list(o.extra_args),
            port=port or 0,
        )

    def strategy(self, o: Any) -> StrategySpec:
        return served_strategy(o, None)

    def launch(self, o: Any, *, dtype: str | None, files: Mapping[str, str], port: int) -> Launch:
        b: Any = self.backend(o, dtype=dtype, files=files, port=port)
        program = ["python3", "-m", "sglang.launch_server"]
        return Launch(renamed(b.command(), "sglang.launch_server", program))

    def frozen(
        self, o: Any, cores: int | None
    ) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
        return server_frozen(o, o.model)


__all__ = ["SglangAdapter", "SglangOptions"]
