"""From an arm's plan to the backend that starts, describes, scrapes and stops its engine.

An arm given by URL gets a ``backends.openai.OpenAIBackend``: nothing to start or stop, a
manifest that says what is unknown, counters only if its engine's ``/metrics`` parser is known,
no drill; its credentials (``pilot.config.credentials``) read from the environment when it is made.

    >>> from specpilot.pilot.config.file import parse_pilot
    >>> from specpilot.pilot.plan.arms import plan_arms
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
from typing import Any, cast

from specpilot.backends.adapters import adapter_of
from specpilot.backends.gpus import visible_env
from specpilot.backends.openai import OpenAIBackend
from specpilot.backends.protocol import Backend
from specpilot.backends.replicas import replica_differences
from specpilot.errors import ConfigError
from specpilot.pilot.config import credentials
from specpilot.pilot.config.arms import (
    ARM_MODELS,
    Arm,
    BuiltinArm,
    LlamaCppArm,
    OpenAIArm,
    SglangArm,
    VllmArm,
)
from specpilot.pilot.config.file import PilotConfigError
from specpilot.pilot.config.options import OPTIONS, EngineOptions
from specpilot.pilot.plan.arms import ArmPlan, plan_arm, strategy_of
from specpilot.records import ARM_ROLES
from specpilot.validation import format_errors


def engine_options(
    engine: str, raw: Mapping[str, Any], where: str = "--engine-opt"
) -> EngineOptions:
    """``raw`` validated as a pilot file's ``arms[].options`` for ``engine``: the one option
    vocabulary (``specpilot load --start --engine-opt`` takes the same names).

        >>> engine_options("llamacpp", {"spec_type": "ngram-mod", "threads": 2}).draft_n_max
        3
    """
    from pydantic import ValidationError

    model = OPTIONS.get(engine)
    if model is None:
        raise ConfigError(
            f"engine {engine!r} cannot be started by specpilot", fix=f"one of {', '.join(OPTIONS)}"
        )
    try:
        return cast(EngineOptions, model.model_validate(dict(raw)))
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, where, root=model)) from None


def one_arm(
    engine: str,
    name: str | None,
    role: str | None,
    raw: Mapping[str, Any],
    *,
    url: str | None = None,
    model_name: str | None = None,
    headers: Mapping[str, str] | None = None,
    api_key_env: str | None = None,
    resolve_files: bool = True,
) -> ArmPlan:
    """``specpilot load``'s arm as a pilot file would give it: ``raw`` checked as its
    ``arms[].options`` (``--start``), or the endpoint ``url`` someone else runs (with its
    ``headers`` and ``api_key_env`` as written: references, not values), and the arm
    resolved by ``plan_arm`` (the same role rules, frozen settings and manifest). ``name``
    defaults to ``role``, else ``baseline`` for plain decoding and ``speculative`` otherwise;
    ``role`` to the name when it is a role, else ``extra``.

        >>> plan = one_arm("builtin", None, None, {"draft": "truncate:0,1", "k": 2},
        ...                resolve_files=False)
        >>> plan.name, plan.role, plan.strategy.k, plan.frozen["threads"] >= 1
        ('speculative', 'speculative', 2, True)
    """
    from pydantic import TypeAdapter, ValidationError

    if url is None:
        fields: dict[str, Any] = {"options": engine_options(engine, raw)}
        model: TypeAdapter[Any] = TypeAdapter(ARM_MODELS[engine])
    else:  # an endpoint someone else runs: a pilot file's arm with url:
        fields, model = {"url": url}, TypeAdapter(Arm)
        fields.update(headers=dict(headers or {}), api_key_env=api_key_env)
    if model_name is not None:
        fields["model_name"] = model_name
    root = ARM_MODELS.get(engine, OpenAIArm)

    def arm(n: str, r: str) -> BuiltinArm | LlamaCppArm | VllmArm | SglangArm | OpenAIArm:
        try:
            a = model.validate_python({"name": n, "role": r, "engine": engine, **fields})
        except ValidationError as exc:
            raise ConfigError(format_errors(exc, "--arm/--role", root=root)) from None
        # by URL its options are unknown, not the engine's defaults: no strategy, no frozen
        # settings are claimed for it (pilot.plan.arms.strategy_of, frozen_of)
        a = a if url is None else a.model_copy(update={"options": None})
        return cast("BuiltinArm | LlamaCppArm | VllmArm | SglangArm | OpenAIArm", a)

    if name is None:
        plain = strategy_of(arm("arm", "extra")).kind == "none"
        name = role or ("baseline" if plain else "speculative")
    chosen = role or (name if name in ARM_ROLES else "extra")
    return plan_arm(arm(name, chosen), resolve_files=resolve_files)


def make_backend(
    plan: ArmPlan,
    *,
    dtype: str | None = None,
    files: Mapping[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
    port: int | None = None,
    process: int = 0,
) -> Backend:
    """The backend of an arm's ``process`` (not started; an arm by URL: that replica), on the
    GPUs the placement gave that process (``plan.devices``: its ``CUDA_VISIBLE_DEVICES``).
    ``dtype`` pins the weight format of engines that choose one (every arm of a pilot uses the
    first arm's choice); ``files``: what the pilot prepared for the arm
    (``backends.adapter.Asset``: a draft exported to GGUF, a target converted for vLLM);
    ``overrides`` replace option fields (the alternative's derived ``max_slots``; the drill's
    plain restart); ``port`` keeps a restarted engine on its port (the drill)."""
    if plan.url is not None:  # its credentials read from the environment now
        a = plan.spec
        return OpenAIBackend(
            a.replicas[process],
            engine=plan.engine,
            unknown=tuple(plan.unknown),
            name=plan.name,
            headers=credentials.arm_headers(a),
            source=credentials.source(a.headers, a.api_key_env),
        )
    if plan.spec.options is None:
        raise ConfigError(f"arm {plan.name!r}: give options: or url:", fix="see examples/")
    o = plan.spec.options.model_copy(update=overrides or {})
    env = visible_env(plan.devices[process]) if process < len(plan.devices) else None
    return backend_for(plan.engine, o, name=plan.name, dtype=dtype, files=files, port=port, env=env)


def backend_for(
    engine: str,
    o: EngineOptions,
    *,
    name: str = "",
    dtype: str | None = None,
    files: Mapping[str, str] | None = None,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Backend:
    """The backend for ``engine`` from its validated options (``engine_options``), by its
    adapter (``backends.adapters``); ``env``: variables its process gets."""
    a = adapter_of(engine)
    if a is None or not isinstance(o, a.options):
        raise ConfigError(
            f"arm {name!r}: engine {engine!r} cannot be started by specpilot with "
            f"{type(o).__name__}"
        )
    return a.backend(o, dtype=dtype, files=files or {}, port=port, env=env)


def check_replicas(plans: list[ArmPlan]) -> list[str]:
    """Every arm by URL with several replicas: what each replica reports of itself
    (``OpenAIBackend.describe``, ``backends.reported``) compared across them
    (``backends.replicas``), before anything is measured. Replicas whose served models, engine
    version or speculative settings differ are refused (they are not one configuration); the
    lines returned say what could not be compared, and model paths that differ (the same
    weights may sit at another path on another host)."""
    notes: list[str] = []
    for plan in plans:
        if len(plan.spec.replicas) < 2:
            continue
        manifests = [
            make_backend(plan, process=i).describe() for i in range(len(plan.spec.replicas))
        ]
        for d in replica_differences(manifests):
            if d.refuse and d.field != "model paths":
                raise PilotConfigError(
                    f"arm {plan.name!r}: {d}: replicas of one arm must run one configuration",
                    fix="list under urls: only replicas started alike (same model, engine "
                    "version and speculative settings), or give the others an arm of their own",
                    at=("arms", plans.index(plan), "urls"),
                )
            notes.append(f"arm {plan.name}: {d}")
    return notes


def check_credentials(plans: list[ArmPlan]) -> None:
    """Every arm by URL: its headers read from the environment and tried on ``/v1/models``,
    so a missing variable or a refused key (401, 403) stops the pilot before anything is
    measured, not after the other arms ran."""
    for plan in plans:
        for process in range(len(plan.spec.replicas)):  # every replica of an arm by URL
            backend = make_backend(plan, process=process)
            if isinstance(backend, OpenAIBackend):
                backend.check_credentials()
