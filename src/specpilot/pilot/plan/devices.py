"""The pilot's GPU placement from its arms (``pilot.plan.placement`` decides; this module
gathers what it decides from and says the outcome): which arms have processes of their own
and a ``devices:``, what one of their processes needs (each engine's adapter,
``backends.adapter.EngineAdapter.gpu``), the devices ``nvidia-smi`` lists, and the lines the
run and ``--dry-run`` print. A pilot that cannot be placed is refused here, before any engine
starts (the capacity probe's included).

    >>> from specpilot.backends.gpus import GpuReading
    >>> from specpilot.pilot.config.file import parse_pilot
    >>> from specpilot.pilot.plan.arms import plan_arms
    >>> cfg = parse_pilot({"workload": "w.yaml", "episodes": {"processes": 2}, "arms": [
    ...   {"name": "b", "role": "baseline", "engine": "vllm", "options": {"model": "m",
    ...    "tensor_parallel_size": 2}, "devices": "auto"},
    ...   {"name": "s", "role": "speculative", "engine": "vllm", "devices": [4, 5, 6, 7],
    ...    "options": {"model": "m", "draft": "d", "tensor_parallel_size": 2}}]})
    >>> plans, placement = decide(plan_arms(cfg, resolve_files=False), cfg, GpuReading(None, "no nvidia-smi"))
    >>> [p.devices for p in plans]
    [((0, 1), (2, 3)), ((4, 5), (6, 7))]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from specpilot.backends.adapters import adapter_of
from specpilot.backends.gpus import GIB, GpuReading, inherited_devices, read_gpus
from specpilot.pilot.config.file import PilotConfig, PilotConfigError
from specpilot.pilot.plan.arms import ArmPlan
from specpilot.pilot.plan.placement import (
    ArmGpus,
    Placement,
    by_device,
    count_problems,
    place,
    refusal,
)

__all__ = ["arm_gpus", "decide", "placed_plans", "placement_lines", "summary"]


def arm_gpus(plans: Sequence[ArmPlan], cfg: PilotConfig) -> list[ArmGpus]:
    """The arms specpilot starts on processes of their own that give ``devices:``, each with
    one process's need (None: its options run it on the CPU). In place, the baseline runs on
    the speculative arm's processes: it has none to place."""
    out = []
    for p in plans:
        d = p.spec.devices
        if p.url is not None or d is None or (cfg.episodes.in_place and p.role == "baseline"):
            continue
        a = adapter_of(p.engine)
        need = a.gpu(p.spec.options) if a is not None and p.spec.options is not None else None
        out.append(ArmGpus(p.name, d, need))
    return out


def decide(
    plans: Sequence[ArmPlan],
    cfg: PilotConfig,
    reading: GpuReading,
    allowed: Sequence[int] | None = None,
) -> tuple[list[ArmPlan], Placement]:
    """``plans`` with each placed arm's devices per process (``ArmPlan.devices``), and the
    placement; refused (``PilotConfigError``) where a process list has the wrong number of
    devices, or ``episodes.processes`` cannot be placed (with the largest that can)."""
    arms = arm_gpus(plans, cfg)
    if not arms:
        return list(plans), Placement((), ())
    for problem in count_problems(arms):
        i = next(i for i, p in enumerate(plans) if problem.startswith(f"arm {p.name}:"))
        raise PilotConfigError(
            problem,
            fix="give each process as many devices as its tensor parallel size, or list the "
            "devices flat ([0, 1, 2, 3]) to have them split",
            at=("arms", i, "devices"),
        )
    m = cfg.episodes.processes
    why = refusal(arms, m, reading.gpus, allowed)
    if why is not None:
        raise PilotConfigError(why)
    placement = place(arms, m, reading.gpus, allowed)
    placed = {a.arm for a in arms}
    out = [
        dataclasses.replace(p, devices=placement.of(p.name)) if p.name in placed else p
        for p in plans
    ]
    return out, placement


def placement_lines(
    plans: Sequence[ArmPlan],
    cfg: PilotConfig,
    placement: Placement,
    reading: GpuReading,
    allowed: Sequence[int] | None = None,
) -> list[str]:
    """The placement in words: each arm's processes and devices with one process's need,
    each device's processes and free memory (where read; else the shared ones), and what the
    placement does not cover."""
    arms = {a.arm: a for a in arm_gpus(plans, cfg)}
    if not arms:
        return []
    head = "GPU placement (each process's CUDA_VISIBLE_DEVICES"
    if reading.gpus is None:
        head += (
            f"): free memory not checked ({reading.why}), the devices are assumed present and "
            "free; the run reads them before any start"
        )
    else:
        head += (
            f"), checked against the free memory of the {len(reading.gpus)} GPUs nvidia-smi lists"
        )
    out = [head + (f"; auto keeps to this process's own {list(allowed)}" if allowed else "")]
    for a in arms.values():
        mine = [x for x in placement.placed if x.arm == a.arm]
        where = ", ".join(f"p{x.process} -> {_csv(x.devices)}" for x in mine) or "not placed"
        what = (
            f"each needs {a.need.said()} of its device's memory ({a.need.basis})"
            if a.need is not None and a.need.share is not None
            else f"each needs {a.need.said()} ({a.need.basis})"
            if a.need is not None
            else "on the CPU with its options (no --device cuda, or n_gpu_layers 0): "
            "CUDA_VISIBLE_DEVICES only"
        )
        out.append(f"  {a.arm:<16} {where}; {what}")
    gpus = {g.index: g for g in reading.gpus or ()}
    for d, ps in by_device(placement.placed, {a: x.need for a, x in arms.items()}).items():
        who = " + ".join(f"{x.arm} p{x.process}" for x, _ in ps)
        if d in gpus:
            need = sum(n.on(gpus[d]) or 0 for _, n in ps) / GIB
            out.append(
                f"  device {d}: {who} need {need:.1f} GiB, {gpus[d].free_bytes / GIB:.1f} free"
            )
        elif len(ps) > 1:
            out.append(f"  device {d} shared: {who} ({' + '.join(n.said() for _, n in ps)})")
    for p in plans:
        own = p.url is None and not (cfg.episodes.in_place and p.role == "baseline")
        if own and p.name not in arms:
            out.append(
                f"  {p.name} gives no devices: its processes see every GPU, the placed ones too"
            )
    return out


def placed_plans(
    plans: Sequence[ArmPlan], cfg: PilotConfig, reading: GpuReading | None = None
) -> tuple[list[ArmPlan], list[str]]:
    """The run's placement, before any start: ``plans`` with their devices and the lines to
    say. ``nvidia-smi`` is read only where an arm gives ``devices:``; where it cannot be read
    and a placed arm runs on a GPU, the pilot is refused (its free memory would go unchecked)."""
    arms = arm_gpus(plans, cfg)
    if not arms:
        return list(plans), []
    reading = reading if reading is not None else read_gpus()
    on_gpu = [a.arm for a in arms if a.need is not None]
    if reading.gpus is None and on_gpu:
        raise PilotConfigError(
            f"arm {on_gpu[0]!r} gives devices:, and this machine's GPUs cannot be read "
            f"({reading.why}): free memory would go unchecked",
            fix="run where nvidia-smi is on PATH, or remove devices: (nothing is then placed "
            "or checked; --dry-run shows the placement without it)",
        )
    allowed = inherited_devices()
    placed, placement = decide(plans, cfg, reading, allowed)
    return placed, placement_lines(placed, cfg, placement, reading, allowed)


def summary(
    plans: Sequence[ArmPlan], cfg: PilotConfig, reading: GpuReading | None = None
) -> dict[str, Any]:
    """What ``--dry-run`` shows of the placement (refused as the run refuses it, except that
    devices it cannot read are assumed present and free, and said to be): each process's
    devices, the lines, whether free memory was read."""
    if not arm_gpus(plans, cfg):
        return {"checked": False, "why_not_checked": "no arm gives devices:", "lines": []}
    reading = reading if reading is not None else read_gpus()
    allowed = inherited_devices()
    placed, placement = decide(plans, cfg, reading, allowed)
    return {
        "checked": reading.gpus is not None,
        "why_not_checked": reading.why,
        "processes": {f"{p.arm}.p{p.process}": list(p.devices) for p in placement.placed},
        "lines": placement_lines(placed, cfg, placement, reading, allowed),
    }


def _csv(devices: Sequence[int]) -> str:
    return ",".join(str(d) for d in devices)
