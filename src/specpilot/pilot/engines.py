"""From an arm's plan to the backend that starts, describes, scrapes and stops its engine.

An arm given by URL gets a ``backends.openai.OpenAIBackend``: nothing to start or stop, a
manifest that says what is unknown, counters only if its engine's ``/metrics`` parser is known,
no drill.

    >>> from specpilot.pilot.config import parse_pilot
    >>> from specpilot.pilot.arms import plan_arms
    >>> cfg = parse_pilot({"workload": "w.yaml", "arms": [
    ...   {"name": "b", "role": "baseline", "engine": "vllm", "options": {"model": "m"}},
    ...   {"name": "s", "role": "speculative", "engine": "vllm",
    ...    "options": {"model": "m", "draft": "d", "k": 4, "max_num_seqs": 64}}]})
    >>> plans = plan_arms(cfg, resolve_files=False)
    >>> cmd = make_backend(plans[1]).command()
    >>> cmd[cmd.index("--speculative-config") + 1], cmd[cmd.index("--max-num-seqs") + 1]
    ('{"method": "draft_model", "model": "d", "num_speculative_tokens": 4}', '64')
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specpilot.backends.protocol import Backend
from specpilot.pilot.arms import ArmPlan
from specpilot.pilot.config import (
    BuiltinOptions,
    EngineOptions,
    LlamaCppOptions,
    SglangOptions,
    VllmOptions,
)


def _builtin_args(o: BuiltinOptions, dtype: str | None) -> list[str]:
    args = ["--dtype", dtype or o.dtype, "--max-slots", str(o.max_slots)]
    args += ["--max-seq-len", str(o.max_seq_len), "--max-queued", str(o.max_queued)]
    args += ["--queue-timeout", str(o.queue_timeout_s)]  # admin token: $SPECPILOT_ADMIN_TOKEN
    if o.threads is not None:
        args += ["--threads", str(o.threads)]
    if o.max_batch_size is not None:
        args += ["--max-batch-size", str(o.max_batch_size)]
    return args + list(o.extra_args)


def _vllm_args(o: VllmOptions) -> list[str]:
    args: list[str] = []
    for flag, value in (
        ("--max-model-len", o.max_model_len),
        ("--max-num-seqs", o.max_num_seqs),
        ("--gpu-memory-utilization", o.gpu_memory_utilization),
        ("--tensor-parallel-size", o.tensor_parallel_size),
    ):
        if value is not None:
            args += [flag, str(value)]
    return args + list(o.extra_args)


def engine_options(
    engine: str, raw: Mapping[str, Any], where: str = "--engine-opt"
) -> EngineOptions:
    """``raw`` validated as a pilot file's ``arms[].options`` for ``engine``: the one option
    vocabulary (``specpilot load --start --engine-opt`` takes the same names).

        >>> engine_options("llamacpp", {"spec_type": "ngram-mod", "threads": 2}).draft_n_max
        3
    """
    from pydantic import ValidationError

    from specpilot.errors import ConfigError
    from specpilot.pilot.config import OPTIONS
    from specpilot.validation import format_errors

    model = OPTIONS.get(engine)
    if model is None:
        raise ConfigError(
            f"engine {engine!r} cannot be started by specpilot", fix=f"one of {', '.join(OPTIONS)}"
        )
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, where, root=model)) from None


def one_arm(
    engine: str,
    name: str | None,
    role: str | None,
    raw: Mapping[str, Any],
    *,
    resolve_files: bool = True,
) -> ArmPlan:
    """``specpilot load --start``'s arm as a pilot file would give it: ``raw`` checked as its
    ``arms[].options`` and the arm resolved by ``plan_arm`` (the same role rules, frozen
    settings and manifest). ``name`` defaults to ``role``, else ``baseline`` for plain decoding
    and ``speculative`` otherwise; ``role`` to the name when it is a role, else ``extra``.

        >>> plan = one_arm("builtin", None, None, {"draft": "truncate:0,1", "k": 2},
        ...                resolve_files=False)
        >>> plan.name, plan.role, plan.strategy.k, plan.frozen["threads"] >= 1
        ('speculative', 'speculative', 2, True)
    """
    from pydantic import ValidationError

    from specpilot.errors import ConfigError
    from specpilot.pilot.arms import plan_arm, strategy_of
    from specpilot.pilot.config import ARM_MODELS, BuiltinArm, LlamaCppArm, SglangArm, VllmArm
    from specpilot.records import ARM_ROLES
    from specpilot.validation import format_errors

    o = engine_options(engine, raw)
    model = ARM_MODELS[engine]

    def arm(n: str, r: str) -> BuiltinArm | LlamaCppArm | VllmArm | SglangArm:
        try:
            return model.model_validate({"name": n, "role": r, "engine": engine, "options": o})
        except ValidationError as exc:
            raise ConfigError(format_errors(exc, "--arm/--role", root=model)) from None

    if name is None:
        plain = strategy_of(arm("arm", "extra")).kind == "none"
        name = role or ("baseline" if plain else "speculative")
    chosen = role or (name if name in ARM_ROLES else "extra")
    return plan_arm(arm(name, chosen), resolve_files=resolve_files)


def make_backend(
    plan: ArmPlan,
    *,
    dtype: str | None = None,
    llamacpp_draft: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    port: int | None = None,
) -> Backend:
    """The backend of an arm (not started). ``dtype`` pins the builtin engine's weight format
    (every arm of a pilot uses the first arm's choice); ``llamacpp_draft`` is the GGUF file a
    ``shipped:`` draft was exported to; ``overrides`` replace option fields (the alternative's
    derived ``max_slots``; the drill's plain restart); ``port`` keeps a restarted engine on
    its port (the drill)."""
    if plan.url is not None:
        from specpilot.backends.openai import OpenAIBackend

        return OpenAIBackend(plan.url, engine=plan.engine, unknown=tuple(plan.unknown))
    if plan.spec.options is None:
        from specpilot.errors import ConfigError

        raise ConfigError(f"arm {plan.name!r}: give options: or url:", fix="see examples/")
    o = plan.spec.options.model_copy(update=overrides or {})
    return backend_for(
        plan.engine, o, name=plan.name, dtype=dtype, llamacpp_draft=llamacpp_draft, port=port
    )


def backend_for(
    engine: str,
    o: EngineOptions,
    *,
    name: str = "",
    dtype: str | None = None,
    llamacpp_draft: str | Path | None = None,
    port: int | None = None,
) -> Backend:
    """The backend for ``engine`` from its validated options (``engine_options``)."""
    if engine == "builtin" and isinstance(o, BuiltinOptions):
        from specpilot.backends.builtin import BuiltinBackend

        return BuiltinBackend(
            target=o.target,
            draft=o.draft,
            no_draft=o.draft is None,
            k=o.k if o.draft is not None else None,
            per_request_metrics="detailed",
            extra_args=_builtin_args(o, dtype),
            port=port or 0,
        )
    if engine == "llamacpp" and isinstance(o, LlamaCppOptions):
        from specpilot.backends.llamacpp import LlamaCppBackend, LlamaCppConfig
        from specpilot.engine.loader import default_target_path

        draft = llamacpp_draft if o.draft is not None else None
        if o.draft is not None and draft is None:
            draft = o.draft
        cfg = LlamaCppConfig(
            model=o.model or default_target_path(),
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
        return LlamaCppBackend(cfg)
    if engine == "vllm" and isinstance(o, VllmOptions):
        from specpilot.backends.vllm import VllmBackend

        return VllmBackend(
            model=o.model or "default-target",  # converted by the pilot (Pilot.prepare)
            draft=o.draft,
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
            env=dict(o.env),
            extra_args=_vllm_args(o),
            port=port or 0,
        )
    if engine == "sglang" and isinstance(o, SglangOptions):
        from specpilot.backends.sglang import SglangBackend

        return SglangBackend(
            model=o.model,
            draft=o.draft,
            k=o.k,
            algorithm=o.algorithm,
            extra_args=list(o.extra_args),
            port=port or 0,
        )
    from specpilot.errors import ConfigError

    raise ConfigError(
        f"arm {name!r}: engine {engine!r} cannot be started by specpilot with {type(o).__name__}"
    )
