"""The builtin engine (``specpilot serve``) as the pilot sees it: its options and its adapter
(``backends.adapter``).

    >>> a = BuiltinAdapter()
    >>> o = BuiltinOptions(draft="shipped:smollm2-135m-instruct-d4", k=3, threads=1)
    >>> a.strategy(o).kind, a.strategy(o).k, a.in_place, a.plain()
    ('draft', 3, True, {'draft': None, 'k': 0})
    >>> a.backend(o, dtype="bfloat16", files={}, port=None).command()[-2:]
    ['--threads', '1']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import Field, model_validator

from specpilot.backends.adapter import (
    EngineAdapter,
    Launch,
    ModelField,
    default_target,
    renamed,
)
from specpilot.backends.gpus import ALLOWANCE, GpuNeed, files_bytes, flag_value, gguf_bf16_bytes
from specpilot.backends.protocol import Backend
from specpilot.records import StrategySpec
from specpilot.validation import FieldProblem, StrictModel

SHIPPED_DRAFT = "shipped:smollm2-135m-instruct-d4"  # the draft specpilot ships


class BuiltinOptions(StrictModel):
    """``specpilot serve`` (the reference engine). ``draft: null`` loads no draft (k = 0)."""

    target: str | None = None  # GGUF file or checkpoint dir; None: the default target
    draft: str | None = None  # "shipped:NAME", "truncate:I,J,..." or a path; None: no draft
    k: int = Field(0, ge=0, le=16)
    dtype: str = "auto"  # auto | bfloat16 | float32 | what the engine offers
    threads: int | None = Field(None, ge=1)
    max_slots: int = Field(4, ge=1)
    max_batch_size: int | None = Field(None, ge=1)
    max_seq_len: int = Field(2048, ge=64)
    max_queued: int = Field(64, ge=0)
    queue_timeout_s: float = Field(60.0, gt=0)
    extra_args: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _draft_k(self) -> BuiltinOptions:
        if self.draft is None and self.k:
            raise FieldProblem(
                f"k = {self.k} needs a draft",
                fix=f'set draft (e.g. "{SHIPPED_DRAFT}") or k: 0',
                path=("k",),
            )
        if self.draft is not None and not self.k:
            raise FieldProblem(
                "a draft with k = 0 never proposes",
                fix="set k from 1 to 16, or draft: null",
                path=("k",),
            )
        return self


class BuiltinAdapter(EngineAdapter):
    engine = "builtin"
    options = BuiltinOptions
    switch = "runtime_switch"  # the admin API sets k = 0 for new requests, same process
    start_prior_s = 10.0  # 8-22 s from a warm weight-format cache on the 2-core machines
    target_logprobs = True  # the verify pass's target distribution, the same sampling math
    option_of: ClassVar[dict[str, str]] = {
        "context_limit": "max_seq_len",
        "tokenizer_sha256": "target",
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
        from specpilot.backends.builtin import BuiltinBackend

        args = ["--dtype", dtype or o.dtype, "--max-slots", str(o.max_slots)]
        args += ["--max-seq-len", str(o.max_seq_len), "--max-queued", str(o.max_queued)]
        args += ["--queue-timeout", str(o.queue_timeout_s)]  # admin token: $SPECPILOT_ADMIN_TOKEN
        if o.threads is not None:
            args += ["--threads", str(o.threads)]
        if o.max_batch_size is not None:
            args += ["--max-batch-size", str(o.max_batch_size)]
        return BuiltinBackend(
            target=o.target,
            draft=o.draft,
            no_draft=o.draft is None,
            k=o.k if o.draft is not None else None,
            per_request_metrics="detailed",
            extra_args=args + list(o.extra_args),
            port=port or 0,
            env=dict(env or {}),
        )

    rollout_note: ClassVar[str] = (
        "The launch keeps the pilot's `--per-request-spec-decode-metrics detailed` (every "
        "round in every response, what the pilot measured with); `off` drops it."
    )

    def strategy(self, o: Any) -> StrategySpec:
        if o.draft is None:
            return StrategySpec()
        return StrategySpec(kind="draft", k=o.k, draft_id=o.draft)

    def gpu(self, o: Any) -> GpuNeed | None:
        """On a GPU with ``--device cuda`` in ``extra_args`` (one device a process, seen as
        ``cuda``: give no index); the need is an estimate: the target's parameters at 2 bytes
        (bf16, what it runs on a GPU; 4 with ``dtype: float32``), the draft's files, and
        ``ALLOWANCE`` for the CUDA context and the KV cache."""
        device = flag_value(list(o.extra_args), "--device") or "cpu"
        if not device.startswith("cuda"):
            return None
        from specpilot.backends.builtin import draft_path

        try:
            target = o.target or default_target()
        except Exception:  # no default target installed here: the need is unknown
            target = None
        weights = gguf_bf16_bytes(target) or files_bytes([target])
        if weights is not None and o.dtype in ("float32", "fp32"):
            weights *= 2
        draft = files_bytes([draft_path(o.draft)])
        known = weights is not None and draft is not None
        return GpuNeed(
            per_process=1,
            basis="an estimate: the target's weights at its GPU format, the draft's files and "
            f"{ALLOWANCE / 2**30:g} GiB for the CUDA context and KV cache",
            bytes=(weights or 0) + (draft or 0) + ALLOWANCE if known else None,
        )

    def launch(self, o: Any, *, dtype: str | None, files: Mapping[str, str], port: int) -> Launch:
        b: Any = self.backend(o, dtype=dtype, files=files, port=port)
        return Launch(renamed(b.command(), "serve", ["specpilot", "serve"]))

    def scope_args(self, aliases: Sequence[str], strategy_file: str) -> list[str]:
        return [
            *(w for a in aliases for w in ("--model-alias", a)),
            "--strategy-file",
            strategy_file,
        ]

    def frozen(
        self, o: Any, cores: int | None
    ) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
        target = o.target or default_target()
        frozen = {
            "target": target,
            "dtype": o.dtype,
            "threads": o.threads or cores,
            "context_limit": o.max_seq_len,
        }
        return (
            target,
            frozen,
            {"max_slots": o.max_slots, "max_batch_size": o.max_batch_size or o.max_slots},
        )

    def plain(self) -> dict[str, Any]:
        return {"draft": None, "k": 0}

    def models(self, o: Any) -> list[ModelField]:
        return [ModelField("target", o.target, True), ModelField("draft", o.draft, True)]

    def chosen_format(self, manifest: Mapping[str, Any]) -> str | None:
        """The weight format the server's load-time calibration chose (its manifest)."""
        chosen = ((manifest.get("calibration") or {}).get("formats") or {}).get("target")
        return str(chosen) if chosen else None

    def measured_at_start(self, manifest: Mapping[str, Any]) -> bool:
        """The server ran the weight-format calibration at this start (the cache was cold).

        >>> BuiltinAdapter().measured_at_start({"calibration": {"mode": "measured", "seconds": 41.2}})
        True
        >>> BuiltinAdapter().measured_at_start({"calibration": {"mode": "measured", "seconds": 0.0}})
        False
        """
        cal = manifest.get("calibration") or {}
        return cal.get("mode") == "measured" and float(cal.get("seconds") or 0.0) > 0.0


__all__ = ["SHIPPED_DRAFT", "BuiltinAdapter", "BuiltinOptions"]
