"""vLLM as the pilot sees it: its options and its adapter (``backends.adapter``). vLLM loads no
GGUF, so a GGUF target (or the default one) and a specpilot draft are converted to Hugging Face
directories first (``Asset``).

    >>> a = VllmAdapter()
    >>> o = VllmOptions(model="m", speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    >>> s = a.strategy(o)
    >>> s.kind, s.k, s.ngram_type, a.assets(o)
    ('ngram', 4, 'ngram', {})
    >>> sorted(a.assets(VllmOptions(draft="shipped:smollm2-135m-instruct-d4")))
    ['draft', 'model']
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from specpilot.backends.adapter import (
    Asset,
    EngineAdapter,
    Launch,
    ModelField,
    default_target,
    renamed,
)
from specpilot.backends.gpus import GpuNeed, number_flag
from specpilot.backends.protocol import Backend
from specpilot.records import StrategySpec
from specpilot.validation import StrictModel

VLLM_DEFAULT_SHARE = 0.9  # vLLM's gpu_memory_utilization when not given


class VllmOptions(StrictModel):
    """``vllm serve`` on a GPU, or on the CPU from ``specpilot engines install vllm``'s venv.
    Typed fields become flags or variables; ``extra_args`` are passed verbatim.

    ``model``: a Hugging Face directory or hub id in the local cache; a ``.gguf`` file or None
    (the default target) is converted to a Hugging Face directory first (vLLM loads no GGUF),
    and so is a ``shipped:NAME`` or specpilot draft directory given as ``draft``.
    """

    model: str | None = None
    draft: str | None = None
    k: int = Field(3, ge=1)
    method: str = "draft_model"
    speculative_config: dict[str, Any] | None = None
    dtype: str | None = None
    max_model_len: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    tensor_parallel_size: int | None = Field(None, ge=1)
    served_model_name: str | None = None
    enforce_eager: bool = False  # no torch.compile: starts in ~40 s instead of ~3 min on a CPU
    per_request_metrics: Literal["summary", "detailed"] | None = "detailed"  # recent vLLM
    per_request_timings: bool = True  # --enable-per-request-metrics (recent vLLM)
    executable: str | None = None
    venv: str | None = None  # where `specpilot engines install vllm` put it (.venv-vllm)
    kv_space_gib: int | None = Field(None, ge=1)  # CPU: VLLM_CPU_KVCACHE_SPACE (whole GiB)
    threads_bind: str | None = None  # CPU: VLLM_CPU_OMP_THREADS_BIND, e.g. "0-1"
    env: dict[str, str] = Field(default_factory=dict)
    extra_args: list[str] = Field(default_factory=list)


def served_strategy(o: Any, speculative_config: dict[str, Any] | None) -> StrategySpec:
    """vLLM's and SGLang's strategy: the explicit speculative config, else the draft."""
    sc = speculative_config
    if sc is not None:
        method = str(sc.get("method", ""))
        kind = "ngram" if method == "ngram" else ("draft" if method == "draft_model" else "other")
        return StrategySpec(
            kind=kind,
            k=sc.get("num_speculative_tokens"),
            draft_id=sc.get("model"),
            ngram_type=method if kind == "ngram" else None,
            params={k2: v for k2, v in sc.items() if k2 not in ("model",)},
        )
    if o.draft is not None:
        return StrategySpec(kind="draft", k=o.k, draft_id=o.draft)
    return StrategySpec()


def engine_args(args: Sequence[str]) -> tuple[str, ...]:
    """The launch flags an arm passes verbatim (``extra_args``) less its speculative ones
    (``--speculative-*`` with their values: the one switch), compared between arms (R6):
    ``--quantization fp8`` or ``--kv-cache-dtype fp8`` on one arm only is a second switch.

    >>> engine_args(["--quantization", "fp8", "--speculative-num-steps", "3", "--enforce-eager"])
    ('--quantization', 'fp8', '--enforce-eager')
    >>> engine_args(["--speculative-config={}", "--kv-cache-dtype=fp8"])
    ('--kv-cache-dtype=fp8',)
    """
    out: list[str] = []
    skip_value = False
    for a in args:
        if skip_value and not a.startswith("-"):
            skip_value = False
            continue
        skip_value = False
        if a.startswith("--speculative"):
            skip_value = "=" not in a
            continue
        out.append(a)
    return tuple(out)


def server_frozen(o: Any, target: str | None) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """vLLM's and SGLang's frozen and capacity settings (what their options say)."""
    frozen = {
        "target": target,
        "dtype": getattr(o, "dtype", None),
        "threads": getattr(o, "threads_bind", None),
        "context_limit": getattr(o, "max_model_len", None),
        "tensor_parallel_size": getattr(o, "tensor_parallel_size", None),
        "engine_args": engine_args(getattr(o, "extra_args", None) or []),
    }
    capacity = {
        "max_num_seqs": getattr(o, "max_num_seqs", None),
        "gpu_memory_utilization": getattr(o, "gpu_memory_utilization", None),
        "kv_space_gib": getattr(o, "kv_space_gib", None),
    }
    return target, frozen, capacity


# the variables a launch outside the pilot keeps (the install's own are this machine's)
LAUNCH_ENV = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "HF_HUB_OFFLINE")


class VllmAdapter(EngineAdapter):
    engine = "vllm"
    options = VllmOptions
    start_prior_s = 90.0  # it loads a model for a minute or more
    option_of: ClassVar[dict[str, str]] = {
        "target": "model",
        "tokenizer_sha256": "model",
        "threads": "threads_bind",
        "context_limit": "max_model_len",
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
        from specpilot.backends.vllm import VllmBackend

        args: list[str] = []
        for flag, value in (
            ("--max-model-len", o.max_model_len),
            ("--max-num-seqs", o.max_num_seqs),
            ("--gpu-memory-utilization", o.gpu_memory_utilization),
            ("--tensor-parallel-size", o.tensor_parallel_size),
        ):
            if value is not None:
                args += [flag, str(value)]
        return VllmBackend(
            model=files.get("model") or o.model or "default-target",
            draft=(files.get("draft") or o.draft) if o.draft is not None else None,
            k=o.k,
            method=o.method,
            speculative_config=o.speculative_config,
            served_model_name=o.served_model_name,
            dtype=o.dtype,
            enforce_eager=o.enforce_eager,
            per_request_metrics=o.per_request_metrics,
            per_request_timings=o.per_request_timings,
            executable=o.executable,
            venv=o.venv,
            kv_space_gib=o.kv_space_gib,
            threads_bind=o.threads_bind,
            env={**o.env, **(env or {})},
            extra_args=args + list(o.extra_args),
            port=port or 0,
        )

    rollout_note: ClassVar[str] = (
        "`--per-request-spec-decode-metrics` and `--enable-per-request-metrics` are the "
        "pilot's instrumentation (vLLM releases that have them); drop them otherwise."
    )

    def strategy(self, o: Any) -> StrategySpec:
        return served_strategy(o, o.speculative_config)

    def gpu(self, o: Any) -> GpuNeed | None:
        """tensor x pipeline parallel devices a process; each device's
        ``gpu_memory_utilization`` x its total memory, which vLLM reserves at start (0.9, its
        default, when the option is not set)."""
        args = list(o.extra_args)
        tp = o.tensor_parallel_size or int(number_flag(args, 1, "--tensor-parallel-size", "-tp"))
        pp = int(number_flag(args, 1, "--pipeline-parallel-size", "-pp"))
        share = o.gpu_memory_utilization
        return GpuNeed(
            per_process=max(1, tp * pp),
            basis="gpu_memory_utilization, which vLLM reserves at start"
            if share is not None
            else "vLLM's default gpu_memory_utilization, reserved at start",
            share=share or VLLM_DEFAULT_SHARE,
            declared=share is not None,
        )

    def launch(self, o: Any, *, dtype: str | None, files: Mapping[str, str], port: int) -> Launch:
        """``vllm serve`` with the measured flags, the CPU backend's variables and ``env``;
        the ``--speculative-config`` JSON also on its own."""
        b: Any = self.backend(o, dtype=dtype, files=files, port=port)
        env = {k: v for k, v in b.launch_env().items() if k in LAUNCH_ENV or k in o.env}
        sc = b.spec_config()
        out = {"speculative-config.json": json.dumps(sc, indent=1, sort_keys=True) + "\n"}
        return Launch(renamed(b.command(), "serve", ["vllm", "serve"]), env, out if sc else {})

    def frozen(
        self, o: Any, cores: int | None
    ) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
        return server_frozen(o, o.model or default_target())

    def models(self, o: Any) -> list[ModelField]:
        return [
            ModelField("model", o.model, False, hub_ids=True),
            ModelField("draft", o.draft, False),
        ]

    def assets(self, o: Any) -> dict[str, Asset]:
        out = {}
        gguf_target = o.model is None or str(o.model).endswith(".gguf")
        if gguf_target:
            out["model"] = Asset("hf_target", o.model)
        d = o.draft
        if d is not None and (d.startswith("shipped:") or (Path(d) / "draft.json").is_file()):
            out["draft"] = Asset("hf_draft", d, o.model if gguf_target else None)
        return out


__all__ = ["VllmAdapter", "VllmOptions", "engine_args", "served_strategy", "server_frozen"]
