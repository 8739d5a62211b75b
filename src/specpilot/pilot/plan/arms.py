"""Arms of a pilot: the strategy each one switches on, what is frozen, and the R6 check that
an arm differs from its reference in exactly one switch.

An arm's *reference* is what it is compared with: the speculative and alternative arms are
compared with the baseline; an ``extra`` arm with a strategy with ``compare_to`` (default: the
strategy-less arm of its engine). Comparisons stay within one engine: a llama.cpp arm beside
the builtin ones is reported side by side, never as a difference of one switch.

    >>> from specpilot.pilot.config.file import parse_pilot
    >>> cfg = parse_pilot({"workload": "w.yaml", "arms": [
    ...     {"name": "b", "role": "baseline", "engine": "builtin", "options": {"dtype": "float32"}},
    ...     {"name": "s", "role": "speculative", "engine": "builtin",
    ...      "options": {"dtype": "bfloat16", "draft": "shipped:x", "k": 3}}]})
    >>> check_one_switch(plan_arms(cfg, resolve_files=False))
    Traceback (most recent call last):
    ...
    specpilot.pilot.config.file.PilotConfigError: arms 's' and 'b' differ in dtype ('bfloat16' vs 'float32'), not only in their strategy: one switch at a time (R6)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from specpilot.backends.adapters import adapter_of
from specpilot.backends.facts import model_file, tokenizer_sha256
from specpilot.backends.freeze import frozen_sha256
from specpilot.backends.freeze import strategy_of as served_strategy
from specpilot.pilot.config import credentials
from specpilot.pilot.config.arms import Arm
from specpilot.pilot.config.file import PilotConfig, PilotConfigError
from specpilot.pilot.config.files import missing_models
from specpilot.records import ResourceBudget, StrategySpec

# Settings that must be equal between an arm and its reference (R6). "capacity" may differ
# only for the equal-budget alternative, and only where its budget declares it.
FROZEN = (
    "target",
    "tokenizer_sha256",
    "dtype",
    "threads",
    "context_limit",
    "tensor_parallel_size",  # vLLM: devices per replica
    "engine_args",  # flags passed verbatim (extra_args / extra), less the speculative ones
)
CAPACITY = (
    "max_slots",
    "max_batch_size",
    "n_parallel",
    "max_num_seqs",
    "gpu_memory_utilization",
    "kv_space_gib",  # vLLM's CPU KV cache (VLLM_CPU_KVCACHE_SPACE)
)


@dataclass
class ArmPlan:
    """One arm, resolved: strategy, frozen settings, capacity, reference, budget."""

    name: str
    role: str
    engine: str
    url: str | None
    strategy: StrategySpec
    frozen: dict[str, Any]
    capacity: dict[str, Any]
    reference: str | None
    budget: ResourceBudget
    drill: bool
    spec: Arm  # the validated arm model (pilot.config.file)
    unknown: list[str] = field(default_factory=list)  # frozen fields a URL arm cannot tell
    # each process's GPUs (pilot.plan.placement; empty: not placed), its CUDA_VISIBLE_DEVICES
    devices: tuple[tuple[int, ...], ...] = ()


def strategy_of(arm: Arm) -> StrategySpec:
    """The one speculative switch the arm's options turn on (kind ``none`` when off)."""
    engine = adapter_of(arm.engine)
    if engine is not None and arm.options is not None:
        return engine.strategy(arm.options)
    # an endpoint given by URL: specpilot cannot see what it runs
    return StrategySpec(
        kind="none" if arm.role in ("baseline", "alternative", "control") else "other",
        params={"declared_by_role": arm.role, "verified": False},
    )


def frozen_of(
    arm: Arm, resolve_files: bool = True
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(frozen settings, capacity settings, unknown fields) of an arm, before it starts.

    ``resolve_files``: hash the model file and its tokenizer (the real check; off in doctests).
    """
    o = arm.options
    cores = os.cpu_count()
    if o is None:  # an endpoint given by URL (openai, or another engine without options)
        return {}, {}, list(FROZEN)
    engine = adapter_of(arm.engine)
    if engine is None:
        return {}, {}, list(FROZEN)
    target, frozen, capacity = engine.frozen(o, cores)
    if resolve_files and target is not None:
        # the file's content, not its path, is what must be equal
        frozen["target_path"] = target
        frozen["target"] = _content_hash(target)
        frozen["tokenizer_sha256"] = _tokenizer_hash(target)
    return frozen, capacity, []


def _content_hash(path: str) -> str:
    mf = model_file("target", path)
    return f"sha256:{mf.sha256}" if mf is not None and mf.sha256 else path


def _tokenizer_hash(path: str) -> str | None:
    try:
        return tokenizer_sha256(path)
    except Exception:  # not a GGUF/HF checkpoint we can read: the model hash still decides
        return None


def _reference(arm: Arm, cfg: PilotConfig, strategies: dict[str, StrategySpec]) -> str | None:
    if arm.compare_to is not None:
        return str(arm.compare_to)
    baseline = next(a for a in cfg.arms if a.role == "baseline")
    if arm.role in ("speculative", "alternative", "control"):
        return str(baseline.name)
    if arm.role == "baseline" or strategies[arm.name].kind == "none":
        return None
    if arm.url is not None:  # an endpoint we cannot see into: reported side by side
        return None
    plain = [
        a.name
        for a in cfg.arms
        if a.engine == arm.engine and a.name != arm.name and strategies[a.name].kind == "none"
    ]
    if len(plain) == 1:
        return str(plain[0])
    if baseline.engine == arm.engine:
        return str(baseline.name)
    raise PilotConfigError(
        f"arm {arm.name!r} switches on a strategy but has no plain {arm.engine} arm to be "
        "compared with",
        fix=f"add a plain {arm.engine} arm (role: extra, no strategy) or set compare_to",
        at=("arms", cfg.arms.index(arm)),
    )


def plan_arm(
    a: Arm,
    *,
    reference: str | None = None,
    budget: ResourceBudget | None = None,
    drill: bool = False,
    resolve_files: bool = True,
    at: tuple[Any, ...] | None = None,
) -> ArmPlan:
    """One arm resolved (its strategy checked against its role, frozen settings, capacity): a
    pilot's arms (``plan_arms``) and ``specpilot load --start``'s one arm alike. ``at``: where
    the arm sits in its file (``("arms", 2)``), for the line of an error."""
    s = strategy_of(a)
    if a.role == "speculative" and s.kind == "none":
        raise PilotConfigError(
            f"arm {a.name!r} is the speculative arm but switches nothing on",
            fix="give it a draft and k (or an engine's n-gram mode)",
            at=None if at is None else (*at, "options"),
        )
    if a.role in ("baseline", "alternative", "control") and s.kind != "none":
        raise PilotConfigError(
            f"arm {a.name!r} is the {a.role} arm but switches on a {s.kind} strategy",
            fix=f"the {a.role} runs plain decoding: remove its strategy, or set role: extra",
            at=None if at is None else (*at, "role"),
        )
    frozen, capacity, unknown = frozen_of(a, resolve_files)
    return ArmPlan(
        name=a.name,
        role=a.role,
        engine=a.engine,
        url=a.url,
        strategy=s,
        frozen=frozen,
        capacity=capacity,
        reference=reference,
        budget=budget or ResourceBudget(),
        drill=drill,
        spec=a,
        unknown=unknown,
    )


def plan_arms(cfg: PilotConfig, *, resolve_files: bool = True) -> list[ArmPlan]:
    """Resolve every arm of ``cfg`` (strategy, frozen settings, reference, budget).

    ``resolve_files``: every model file an arm names must exist (``pilot.config.files``), and each
    target is hashed; a run plans with it before any engine starts."""
    if resolve_files:
        _check_files(cfg)
    strategies = {a.name: strategy_of(a) for a in cfg.arms}
    out = []
    for i, a in enumerate(cfg.arms):
        b = a.budget
        matched = b.matched_against
        if a.role == "alternative" and matched is None:
            matched = next(x.name for x in cfg.arms if x.role == "speculative")
        budget = ResourceBudget(
            memory_bytes=b.memory_bytes,
            cores=b.cores,
            devices=list(b.devices),
            matched_against=matched,
            notes=list(b.notes),
        )
        drill = a.drill if a.drill is not None else (a.role == "speculative")
        out.append(
            plan_arm(
                a,
                reference=_reference(a, cfg, strategies),
                budget=budget,
                drill=bool(drill and cfg.drill.enabled),
                resolve_files=resolve_files,
                at=("arms", i),
            )
        )
    return out


def _check_files(cfg: PilotConfig) -> None:
    missing = missing_models(cfg)
    if missing:
        m = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise PilotConfigError(
            m.message + more, fix=m.fix, at=("arms", m.index, "options", m.field)
        )


def arm_manifest(
    described: dict[str, Any], plan: ArmPlan, overrides: dict[str, Any]
) -> dict[str, Any]:
    """The backend's description plus the frozen settings (R6) and the manifest's hash.

    The strategy the engine reports must be the one the arm asked for: a builtin server that
    silently fell back to plain decoding would otherwise pass as speculative.
    """
    if plan.url is None:
        served = served_strategy(described)
        if (served.kind == "none") != (plan.strategy.kind == "none"):
            raise PilotConfigError(
                f"arm {plan.name!r}: the engine reports strategy {served.kind!r} but the "
                f"config asks for {plan.strategy.kind!r}"
            )
    frozen = dict(plan.frozen)
    engine = adapter_of(plan.engine)
    if engine is not None and plan.url is None:
        chosen = engine.chosen_format(described)  # the backend's describe() carries it
        if chosen:
            frozen["dtype"] = chosen
    capacity = {**plan.capacity, **{k: v for k, v in overrides.items() if k in plan.capacity}}
    out = {
        **described,
        "frozen": frozen,
        "capacity": capacity,
        "overrides": overrides,
        "unknown": plan.unknown,
        "frozen_sha256": frozen_sha256(described),
    }
    if plan.url is not None:  # the names of the headers sent, never their values
        out["headers_sent"] = credentials.names(plan.spec.headers, plan.spec.api_key_env)
    return out


def _allowed_capacity(plan: ArmPlan, i: int) -> set[str]:
    if plan.role != "alternative":
        return set()
    allowed = set(plan.spec.budget.changes)
    if plan.spec.budget.derive == "kv_slots":
        allowed |= {"max_slots", "max_batch_size"}
    unknown = sorted(allowed - set(CAPACITY))
    if unknown:
        raise PilotConfigError(
            f"arm {plan.name!r}: budget.changes {', '.join(unknown)} are not capacity settings: "
            "the alternative may change capacity only",
            fix=f"list only capacity settings ({', '.join(CAPACITY)})",
            at=("arms", i, "budget", "changes"),
        )
    return allowed


def check_one_switch(plans: list[ArmPlan]) -> None:
    """Refuse arms that differ from their reference in more than their one switch (R6).
    ``plans`` in the pilot's arm order: an error's ``at`` is the option in the file."""
    by_name = {p.name: p for p in plans}
    for i, p in enumerate(plans):
        if p.reference is None:
            continue
        ref = by_name[p.reference]
        if ref.engine != p.engine:
            raise PilotConfigError(
                f"arm {p.name!r} ({p.engine}) is compared with {ref.name!r} ({ref.engine}): a "
                "different engine is a second switch",
                fix="compare within one engine (set compare_to)",
                at=("arms", i, "engine"),
            )
        _check_frozen(p, ref, i)
        _check_capacity(p, ref, i)


def _check_frozen(p: ArmPlan, ref: ArmPlan, i: int) -> None:
    for key in FROZEN:
        if key in p.unknown or key in ref.unknown:
            continue
        a, b = p.frozen.get(key), ref.frozen.get(key)
        if a != b:
            engine = adapter_of(p.engine)
            option = engine.option_of.get(key, key) if engine is not None else key
            raise PilotConfigError(
                f"arms {p.name!r} and {ref.name!r} differ in {key} ({a!r} vs {b!r}), not only "
                f"in their strategy: one switch at a time (R6)",
                fix=f"give both the same {key} (options.{option})",
                at=("arms", i, "options", option),
            )


def _check_capacity(p: ArmPlan, ref: ArmPlan, i: int) -> None:
    allowed = _allowed_capacity(p, i)
    for key in CAPACITY:
        a, b = p.capacity.get(key), ref.capacity.get(key)
        if a != b and key not in allowed:
            what = (
                "declare it in budget.changes (the alternative's equal-budget change)"
                if p.role == "alternative"
                else "keep capacity equal: only the strategy may differ"
            )
            raise PilotConfigError(
                f"arms {p.name!r} and {ref.name!r} differ in {key} ({a!r} vs {b!r})",
                fix=what,
                at=("arms", i, "options", key),
            )
