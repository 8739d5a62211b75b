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
from specpilot.backends.gpus import GpuNeed, flag_value, number_flag
from specpilot.backends.protocol import Backend
from specpilot.backends.vllm_arm import served_strategy, server_frozen
from specpilot.records import StrategySpec
from specpilot.validation import StrictModel

SGLANG_ASSUMED_SHARE = 0.9  # SGLang chooses its own --mem-fraction-static by card (0.8-0.9)


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
        self,
        o: Any,
        *,
        dtype: str | None,
        files: Mapping[str, str],
        port: int | None,
        env: Mapping[str, str] | None = None,
    ) -> Backend:
        from specpilot.backends.sglang import SglangBackend

        return SglangBackend(
            model=o.model,
            draft=o.draft,
            k=o.k,
            algorithm=o.algorithm,
            extra_args=list(o.extra_args),
            port=port or 0,
            env=dict(env or {}),
        )

    def strategy(self, o: Any) -> StrategySpec:
        return served_strategy(o, None)

    def gpu(self, o: Any) -> GpuNeed | None:
        """``--tp-size`` devices a process; ``--mem-fraction-static`` of each device's total,
        which SGLang reserves for weights and KV cache. Without it SGLang picks its own by card
        and tensor parallel size (about 0.8-0.9): 0.9 is assumed, and said."""
        args = list(o.extra_args)
        tp = int(number_flag(args, 1, "--tp-size", "--tp", "--tensor-parallel-size"))
        declared = flag_value(args, "--mem-fraction-static") is not None
        share = number_flag(args, SGLANG_ASSUMED_SHARE, "--mem-fraction-static")
        return GpuNeed(
            per_process=max(1, tp),
            basis=(
                "--mem-fraction-static, which SGLang reserves at start"
                if declared
                else "SGLang's own fraction (0.8-0.9 by card), assumed: pass "
                "--mem-fraction-static in extra_args to set it"
            ),
            share=share,
            declared=declared,
        )

    def launch(self, o: Any, *, dtype: str | None, files: Mapping[str, str], port: int) -> Launch:
        b: Any = self.backend(o, dtype=dtype, files=files, port=port)
        program = ["python3", "-m", "sglang.launch_server"]
        return Launch(renamed(b.command(), "sglang.launch_server", program))

    def frozen(
        self, o: Any, cores: int | None
    ) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
        return server_frozen(o, o.model)


__all__ = ["SglangAdapter", "SglangOptions"]
