"""llama.cpp (through ``xllamacpp``) as the pilot sees it: its options and its adapter
(``backends.adapter``). A specpilot draft is exported to one GGUF file first (``Asset``).

    >>> a = LlamaCppAdapter()
    >>> o = LlamaCppOptions(spec_type="ngram-mod")
    >>> s = a.strategy(o)
    >>> s.kind, s.k, s.ngram_type, a.switch, a.assets(o)
    ('ngram', 3, 'ngram-mod', 'restart', {})
    >>> a.assets(LlamaCppOptions(draft="shipped:smollm2-135m-instruct-d4"))["draft"].kind
    'gguf_draft'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from specpilot.backends.adapter import Asset, EngineAdapter, Launch, ModelField, default_target
from specpilot.backends.builtin_arm import SHIPPED_DRAFT
from specpilot.backends.gpus import ALLOWANCE, GpuNeed, files_bytes
from specpilot.backends.protocol import Backend
from specpilot.records import StrategySpec
from specpilot.validation import FieldProblem, StrictModel


class LlamaCppOptions(StrictModel):
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


class LlamaCppAdapter(EngineAdapter):
    engine = "llamacpp"
    options = LlamaCppOptions
    start_prior_s = 2.0
    option_of: ClassVar[dict[str, str]] = {
        "target": "model",
        "tokenizer_sha256": "model",
        "context_limit": "n_ctx",
        "engine_args": "extra",
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
        from specpilot.backends.llamacpp import LlamaCppBackend, LlamaCppConfig

        draft = (files.get("draft") or o.draft) if o.draft is not None else None
        cfg = LlamaCppConfig(
            model=o.model or default_target(),
            draft=draft,
            spec_type=o.spec_type,
            draft_n_max=o.draft_n_max,
            draft_n_min=o.draft_n_min,
            draft_p_min=o.draft_p_min,
            n_ctx=o.n_ctx,
            n_parallel=o.n_parallel,
            threads=o.threads,
            ngram=dict(o.ngram),
            synth_rates=list(o.synth_rates) if o.synth_rates else None,
            extra=dict(o.extra),
            port=port or 0,
        )
        return LlamaCppBackend(cfg, env=env)

    def strategy(self, o: Any) -> StrategySpec:
        # synthetic acceptance is recorded with the method it fakes (the label says "synthetic")
        synth = {"synth_rates": o.synth_rates} if o.synth_rates else {}
        if o.draft is not None:
            params = {"n_min": o.draft_n_min, "p_min": o.draft_p_min, **synth}
            return StrategySpec(kind="draft", k=o.draft_n_max, draft_id=o.draft, params=params)
        if o.spec_type is not None:
            params = {"n_max": o.draft_n_max, **o.ngram, **synth}
            kind = "ngram" if o.spec_type.startswith("ngram") else "other"
            return StrategySpec(kind=kind, k=o.draft_n_max, ngram_type=o.spec_type, params=params)
        return StrategySpec()

    def gpu(self, o: Any) -> GpuNeed | None:
        """A llama.cpp built with CUDA offloads its layers to every device it sees
        (``n_gpu_layers``, default all that fit; ``extra: {n_gpu_layers: 0}`` keeps it on the
        CPU, and a CPU build ignores devices): any number of devices a process. The need is an
        estimate: the GGUF files' bytes (it holds their own quantisation) and ``ALLOWANCE``
        for the CUDA context and the KV cache."""
        if o.extra.get("n_gpu_layers") == 0:
            return None
        try:
            model = o.model or default_target()
        except Exception:  # no default target installed here: the need is unknown
            model = None
        from specpilot.backends.builtin import draft_path

        weights = files_bytes([model, draft_path(o.draft)])
        return GpuNeed(
            per_process=1,
            exact=False,
            basis="an estimate: the GGUF files' bytes and "
            f"{ALLOWANCE / 2**30:g} GiB for the CUDA context and KV cache",
            bytes=weights + ALLOWANCE if weights is not None else None,
        )

    rollout_note: ClassVar[str] = (
        "Flag names are llama-server's since its speculative options became `--spec-*` "
        "(`--spec-type`, `--spec-draft-n-max`, `--spec-draft-n-min`, `--spec-draft-p-min`, "
        "`--spec-ngram-<type>-<field>`; `-md` is `--model-draft`), as the xllamacpp build that "
        "measured it names them; older releases call them `--draft-max`, `--draft-min` and "
        "`--draft-p-min`."
    )

    def launch(self, o: Any, *, dtype: str | None, files: Mapping[str, str], port: int) -> Launch:
        """``llama-server`` with the measured flags; a CommonParams field given in ``extra``
        has no flag name here and is left out, said in ``notes``."""
        b: Any = self.backend(o, dtype=dtype, files=files, port=port)
        flags: list[str] = list(b.cfg.flags())
        unnamed = [f for f in flags if f.startswith("--x-")]
        out = [w for i, w in enumerate(flags) if w not in unnamed and flags[i - 1] not in unnamed]
        notes: tuple[str, ...] = ()
        if unnamed:
            notes = (
                "llama.cpp settings given as CommonParams fields have no llama-server flag name "
                f"here and are left out of the launch: {', '.join(unnamed)}; add their flags "
                "by hand",
            )
        return Launch(out, notes=notes)

    def frozen(
        self, o: Any, cores: int | None
    ) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
        target = o.model or default_target()
        frozen = {
            "target": target,
            "dtype": "gguf",  # the file's own quantisation: same file, same format
            "threads": o.threads or cores,
            "context_limit": o.n_ctx // o.n_parallel,
            # the server parameters passed verbatim, less the speculative ones (the switch)
            "engine_args": tuple(
                sorted((k, repr(v)) for k, v in o.extra.items() if not _speculative(k))
            ),
        }
        return target, frozen, {"n_parallel": o.n_parallel}

    def plain(self) -> dict[str, Any]:
        return {"draft": None, "spec_type": None}

    def models(self, o: Any) -> list[ModelField]:
        return [ModelField("model", o.model, True), ModelField("draft", o.draft, True)]

    def assets(self, o: Any) -> dict[str, Asset]:
        if o.draft is None:
            return {}
        return {"draft": Asset("gguf_draft", o.draft, o.model)}


__all__ = ["LlamaCppAdapter", "LlamaCppOptions"]


def _speculative(param: str) -> bool:
    """A server parameter of the speculative switch (``speculative.n_max``, ``draft_*``...)."""
    return "spec" in param or "draft" in param
