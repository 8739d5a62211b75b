"""Which arm is compared with which (R6), whether the traffic was representative, the machine.

- baseline: the arm with role ``baseline`` (first by run order), else the first arm that runs
  no speculative strategy;
- candidates: every arm whose strategy is not ``none``, each compared with a plain arm on the
  same engine when the pilot has one (a llama.cpp draft arm against llama.cpp plain), else with
  the baseline;
- alternative: the arm with role ``alternative`` (the equal-budget arm);
- control: the arm with role ``control``, the baseline's config on processes of its own (the
  A/A comparison: any direction it shows is the measurement's);
- planted: the arm with role ``planted``, the baseline's processes through a proxy that
  dilates every latency by a known factor (the effect the pilot must find).

    >>> from specpilot.records import ArmRecord, StrategySpec
    >>> arms = [ArmRecord("p", "r1", "base", "baseline", "builtin"),
    ...         ArmRecord("p", "r2", "spec", "speculative", "builtin", strategy=StrategySpec("draft", k=3)),
    ...         ArmRecord("p", "r3", "lc", "extra", "llamacpp"),
    ...         ArmRecord("p", "r4", "lc-draft", "extra", "llamacpp", strategy=StrategySpec("draft", k=3))]
    >>> p = pair_arms(arms, [])
    >>> p.baseline, p.pairs
    ('base', (('base', 'spec'), ('lc', 'lc-draft')))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specpilot.records import ArmRecord, HardwareFacts


@dataclass(frozen=True)
class Pairing:
    baseline: str | None
    pairs: tuple[tuple[str, str], ...]  # (baseline, candidate)
    alternative: str | None
    arms: tuple[ArmRecord, ...]  # one record per arm name (the first run)
    notes: tuple[str, ...] = field(default_factory=tuple)
    control: str | None = None  # the A/A copy of the baseline (compared with it, never judged)
    planted: str | None = None  # the baseline dilated by a known factor: the pilot's power check
    # (speculative arm, its own processes with speculation switched off): the second estimate
    within: tuple[tuple[str, str], ...] = ()

    @property
    def candidates(self) -> tuple[str, ...]:
        return tuple(c for _, c in self.pairs)

    def record(self, arm: str) -> ArmRecord | None:
        return next((a for a in self.arms if a.arm == arm), None)


def pair_arms(arms: Sequence[ArmRecord], request_arms: Iterable[str]) -> Pairing:
    """The comparisons the analysis makes (module docstring)."""
    first: dict[str, ArmRecord] = {}
    for a in sorted(arms, key=lambda a: (a.run_order, a.repetition)):
        first.setdefault(a.arm, a)
    notes = []
    for name in sorted(set(request_arms) - set(first)):
        notes.append(f"arm {name} has requests but no arm record: treated as plain, role unknown")
        first[name] = ArmRecord(
            "", "", name, "baseline" if name == "baseline" else "extra", "unknown"
        )
    recs = list(first.values())
    plain = [
        a
        for a in recs
        if a.strategy.kind == "none"
        and a.role not in ("alternative", "control", "planted", "within")
    ]
    base = next((a for a in recs if a.role == "baseline"), plain[0] if plain else None)
    pairs = []
    for a in recs:
        if a.strategy.kind == "none":
            continue
        same = [p for p in plain if p.engine == a.engine]
        ref = next((p for p in same if p.role == "baseline"), same[0] if same else base)
        if ref is None or ref.arm == a.arm:  # an arm is never its own reference
            notes.append(f"candidate {a.arm} has no plain arm to compare with")
            continue
        pairs.append((ref.arm, a.arm))
    alt = next((a.arm for a in recs if a.role == "alternative"), None)
    control = next((a.arm for a in recs if a.role == "control"), None)
    planted = next((a.arm for a in recs if a.role == "planted"), None)
    names = {a.arm for a in recs}
    within = tuple(
        (a.arm, a.arm.removesuffix("-k0"))
        for a in recs
        if a.role == "within" and a.arm.removesuffix("-k0") in names
    )
    return Pairing(
        base.arm if base else None,
        tuple(pairs),
        alt,
        tuple(recs),
        tuple(notes),
        control,
        planted,
        within,
    )


def representative(config: dict[str, Any]) -> bool:
    """Representative traffic: the pilot config says so (``representative_traffic``: its
    prompts and arrivals are the service's own); without that key, every phase's arrivals
    replay a trace (``kind: trace``) or a request log (``kind: request_log``: its times and
    bodies). A trace's arrivals with built-in prompts are not representative: the pilot config
    marks such runs ``representative_traffic: false``.

        >>> representative({"representative_traffic": False, "phases": [{"arrival": {"kind": "trace"}}]})
        False
        >>> representative({"phases": [{"arrival": {"kind": "request_log"}}]})
        True
    """
    if "representative_traffic" in config:
        return bool(config["representative_traffic"])
    kinds = list(_arrival_kinds(config))
    return bool(kinds) and all(k in ("trace", "request_log") for k in kinds)


def _arrival_kinds(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "arrival" and isinstance(v, dict) and "kind" in v:
                yield str(v["kind"])
            else:
                yield from _arrival_kinds(v)
    elif isinstance(node, list):
        for v in node:
            yield from _arrival_kinds(v)


def hardware_text(hw: HardwareFacts) -> str:
    """One line naming the machine and the flags that decide verify cost."""
    flags = [f for f in ("avx512_bf16", "amx_tile", "avx512f", "avx2") if f in hw.cpu_flags]
    parts = [hw.cpu_model or "CPU not recorded"]
    if flags:
        parts.append("/".join(flags))
    if hw.cpu_affinity or hw.cpu_logical_cores:
        parts.append(f"{hw.cpu_affinity or hw.cpu_logical_cores} cores")
    for g in hw.gpus:
        parts.append(str(g.get("name", "GPU")))
    return ", ".join(parts)
