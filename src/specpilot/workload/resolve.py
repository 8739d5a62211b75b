"""Groups resolution: the workload's ``groups:`` section -> task groups and their prompt cycles.

A configured group is a built-in one (or an import from a prompt file) with the YAML's
overrides of output lengths, sampling and SLOs. Its prompts (of the selected split) are used in
a seeded shuffled cycle: every prompt once before any repeats.

    >>> from specpilot.workload import parse_workload
    >>> cfg = parse_workload({"groups": {"code": {"split": "train"}},
    ...     "phases": [{"name": "p", "duration_s": 1, "arrival": {"kind": "constant", "rate": 1}}]})
    >>> groups = resolve_groups(cfg, Path("."))
    >>> cycle = PromptCycle(groups["code"].split("train"), seed=0, group="code")
    >>> len({cycle.next().id for _ in range(len(cycle.prompts))}) == len(cycle.prompts)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specpilot.definitions import SLOCondition
from specpilot.errors import ConfigError
from specpilot.workload.config import GroupModel, WorkloadConfig
from specpilot.workload.groups import (
    SLO,
    LengthSpec,
    Prompt,
    Sampling,
    TaskGroup,
    import_prompts,
    load_group,
)
from specpilot.workload.seeds import PROMPTS, stable_id, stream
from specpilot.workload.slo import SLOModel


def resolve_path(path: str, base_dir: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else base_dir / p


def resolve_group(name: str, g: GroupModel, base_dir: Path) -> TaskGroup:
    """A configured group: the built-in one (or an import) with the YAML's overrides."""
    if g.source is not None:
        src = g.source
        prompts = import_prompts(
            resolve_path(src.path, base_dir),
            src.format,
            name,
            categories=src.categories,
            limit=src.limit,
        )
        assert g.output is not None and g.slo is not None  # the config validator enforces it
        base = TaskGroup(
            name=name,
            description=g.description or f"{src.format} prompts from {Path(src.path).name}",
            prompts=tuple(prompts),
            output=LengthSpec(**g.output.model_dump()),
            sampling=Sampling(),
            slo=slo_of(g.slo),
        )
    else:
        base = load_group(name)
    return TaskGroup(
        name=name,
        description=g.description or base.description,
        prompts=base.prompts,
        output=LengthSpec(**g.output.model_dump()) if g.output else base.output,
        sampling=(
            Sampling(g.sampling.temperature, g.sampling.top_p, tuple(g.sampling.stop))
            if g.sampling
            else base.sampling
        ),
        slo=slo_of(g.slo) if g.slo else base.slo,
        input_tokens=base.input_tokens,
        quality_checks=base.quality_checks,
        checks=base.checks,
    )


def slo_of(m: SLOModel) -> SLO:
    """The YAML's ``slo`` as the group's SLO."""
    conditions = tuple(SLOCondition(c.metric, c.percentile, c.max) for c in m.conditions)
    return SLO(m.ttft_s, m.deadline_s, conditions)


def slo_section(slo: SLO) -> dict[str, Any]:
    """The schedule's copy of a group's SLO; ``conditions`` only where there are some (a
    schedule without them keeps its JSON, so pilots started before they existed resume)."""
    out = asdict(slo)
    if slo.conditions:
        out["conditions"] = [asdict(c) for c in slo.conditions]
    else:
        out.pop("conditions")
    return out


def resolve_groups(cfg: WorkloadConfig, base_dir: Path) -> dict[str, TaskGroup]:
    return {name: resolve_group(name, g, base_dir) for name, g in cfg.groups.items()}


class PromptCycle:
    """A group's prompts in a seeded shuffled order, restarted (reshuffled) when used up."""

    def __init__(self, prompts: Sequence[Prompt], seed: int, group: str) -> None:
        if not prompts:
            raise ConfigError(
                f"group {group!r} has no prompts in the selected split",
                fix="pick another split (train, dev, eval, all) or give the group prompts",
            )
        self.prompts = list(prompts)
        self.rng = stream(seed, PROMPTS, stable_id(group))
        self.order: list[int] = []

    def next(self) -> Prompt:
        if not self.order:
            self.order = [int(i) for i in self.rng.permutation(len(self.prompts))]
        return self.prompts[self.order.pop(0)]


def prompt_cycles(
    cfg: WorkloadConfig, groups: dict[str, TaskGroup], seed: int
) -> dict[str, PromptCycle]:
    return {n: PromptCycle(g.split(cfg.groups[n].split), seed, n) for n, g in groups.items()}


def groups_section(
    cfg: WorkloadConfig, groups: dict[str, TaskGroup], cycles: dict[str, PromptCycle]
) -> dict[str, dict[str, Any]]:
    """The schedule's ``groups`` section: what each group was resolved to."""
    return {
        n: {
            "description": g.description,
            "split": cfg.groups[n].split,
            "prompts": len(cycles[n].prompts),
            "output": asdict(g.output),
            "sampling": {**asdict(g.sampling), "stop": list(g.sampling.stop)},
            "slo": slo_section(g.slo),
            "quality_checks": list(g.quality_checks),
            "source": _source(cfg.groups[n]),
        }
        for n, g in groups.items()
    }


def _source(g: GroupModel) -> dict[str, Any] | str:
    return g.source.model_dump(mode="json") if g.source is not None else "builtin"
