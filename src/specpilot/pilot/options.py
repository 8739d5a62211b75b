"""Engine options of a pilot arm (``arms[].options``), one model per engine, and the arm's
resource budget: the one vocabulary of engine options, shared by pilot files and
``specpilot load --start --engine-opt`` (:func:`specpilot.pilot.engines.engine_options`).

    >>> BuiltinOptions(draft="shipped:smollm2-135m-instruct-d4", k=3).max_slots
    4
    >>> OPTIONS["llamacpp"](spec_type="ngram-mod").draft_n_max
    3

A check across fields raises :class:`specpilot.validation.FieldProblem` with the field it is
about, so a file's error names that field's line.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from specpilot.validation import FieldProblem, StrictModel

_Model = StrictModel
SHIPPED_DRAFT = "shipped:smollm2-135m-instruct-d4"  # the draft specpilot ships


class BuiltinOptions(_Model):
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


class LlamaCppOptions(_Model):
    """llama.cpp through ``xllamacpp``; ``draft: shipped:NAME`` is exported to GGUF first."""

    model: str | None = None  # GGUF; None: the default target
    draft: str | None = None
    spec_type: (
        Literal["draft-simple", "ngram-simple", "ngram-mod", "ngram-map-k", "ngram-cache"] | None
    ) = None
    draft_n_max: int = Field(3, ge=1)
    draft_n_min: int = Field(0, ge=0)
    draft_p_min: float | None = Field(None, ge=0, le=1)
    n_ctx: int = Field(4096, ge=64)
    n_parallel: int = Field(2, ge=1)
    threads: int | None = Field(None, ge=1)
    ngram: dict[str, int] = Field(default_factory=dict)
    # synthetic acceptance (invalid text by design): checks that the quality gates say no
    synth_rates: list[Annotated[float, Field(ge=0, le=1)]] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _spec(self) -> LlamaCppOptions:
        if self.spec_type == "draft-simple" and self.draft is None:
            raise FieldProblem(
                "spec_type draft-simple needs a draft",
                fix=f'set draft (e.g. "{SHIPPED_DRAFT}") or another spec_type',
                path=("spec_type",),
            )
        if self.draft is not None and self.spec_type not in (None, "draft-simple"):
            raise FieldProblem(
                f"a draft and spec_type {self.spec_type} are two strategies",
                fix="one switch at a time: remove draft or spec_type",
                path=("spec_type",),
            )
        return self


class VllmOptions(_Model):
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


class SglangOptions(_Model):
    model: str
    draft: str | None = None
    k: int = Field(3, ge=1)
    algorithm: str = "STANDALONE"
    extra_args: list[str] = Field(default_factory=list)


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
OPTIONS: dict[str, type[EngineOptions]] = {
    "builtin": BuiltinOptions,
    "llamacpp": LlamaCppOptions,
    "vllm": VllmOptions,
    "sglang": SglangOptions,
}
