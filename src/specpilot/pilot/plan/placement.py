"""Where every engine process of a pilot runs on this machine's GPUs, decided before any start
(the capacity probe's included): each process gets its own ``CUDA_VISIBLE_DEVICES``
(``backends.gpus.visible_env``, applied by ``pilot.plan.engines.make_backend``).

An arm's ``devices:`` says where its ``episodes.processes`` processes go:

- ``auto``: the pilot takes devices in ``nvidia-smi``'s order, as many a process as the engine
  needs (vLLM: ``tensor_parallel_size`` x pipeline parallel; SGLang: ``--tp-size``; builtin: 1;
  llama.cpp: 1), skipping devices another process holds and devices whose free memory is below
  the process's need (someone else's job). Limited to the pilot's own ``CUDA_VISIBLE_DEVICES``
  where a scheduler set one.
- ``[0, 1, 2, 3]``: this arm's devices, taken in order, as many a process as the engine needs.
- ``[[0, 1], [2, 3]]``: one list per process, exactly as written.
- absent: not placed (every process sees every device, as before; the CPU engines).

Every process of every arm is up at once (the episode design), so a device goes to one process
only. Two processes share a device only where the file names it for both *and* each declares
the memory share it reserves (vLLM ``gpu_memory_utilization``, SGLang ``--mem-fraction-static``):
the shares must then fit together. That is sound in the episode design because one arm serves
load at a time: a process sharing a device with an idle one gets its compute alone while it is
measured, and only the memory is split. ``auto`` never shares.

Each process's need (``backends.gpus.GpuNeed``: a share of the device's total memory for vLLM
and SGLang, an estimate from the model files' bytes for the builtin engine and llama.cpp) is
checked against each device's free memory as ``nvidia-smi`` reads it now. A pilot that cannot
be placed is refused with the largest ``episodes.processes`` that can, as the host-memory check
(``pilot.run.episode_run.processes_that_fit``) refuses one that does not fit in RAM.

    >>> from specpilot.backends.gpus import GpuInfo, GpuNeed
    >>> one = GpuNeed(per_process=1, basis="vLLM", share=0.9)
    >>> arms = [ArmGpus("b", "auto", one), ArmGpus("s", "auto", one)]
    >>> [(p.arm, p.process, p.devices) for p in place(arms, 2, None).placed]
    [('b', 0, (0,)), ('b', 1, (1,)), ('s', 0, (2,)), ('s', 1, (3,))]
    >>> gpus = [GpuInfo(i, 80 * 2**30, 0, 80 * 2**30) for i in range(3)]
    >>> print(refusal(arms, 2, gpus))  # doctest: +NORMALIZE_WHITESPACE
    episodes.processes 2: 4 engine processes (2 arms x 2) cannot be placed on the 3 GPUs
    nvidia-smi lists (0-2): arm s process 1: no free device left (1 a process; every device
    is another process's or has too little free memory) -> set episodes.processes to at most 1
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from specpilot.backends.gpus import GIB, GpuInfo, GpuNeed

Written = str | tuple[int, ...] | tuple[tuple[int, ...], ...]  # an arm's devices: as validated


@dataclass(frozen=True)
class ArmGpus:
    """An arm with processes of its own and a ``devices:``, as the placement sees it;
    ``need``: one process's (None: the engine runs on the CPU with these options)."""

    arm: str
    devices: Written
    need: GpuNeed | None


@dataclass(frozen=True)
class Placed:
    """Process ``process`` of ``arm`` on ``devices`` (``nvidia-smi``'s numbers)."""

    arm: str
    process: int
    devices: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    """Every placed process, and why this ``m`` cannot be placed (empty: it can)."""

    placed: tuple[Placed, ...]
    problems: tuple[str, ...]

    def of(self, arm: str) -> tuple[tuple[int, ...], ...]:
        """The arm's devices, process by process."""
        mine = sorted((p for p in self.placed if p.arm == arm), key=lambda p: p.process)
        return tuple(p.devices for p in mine)


def said(devices: object) -> str:
    """Devices as a pilot file writes them: ``((0,), (1, 2))`` -> ``[[0], [1, 2]]``."""
    if isinstance(devices, (tuple, list)):
        return "[" + ", ".join(said(x) for x in devices) + "]"
    return str(devices)


def per_process(a: ArmGpus) -> int:
    return a.need.per_process if a.need is not None else 1


def process_lists(a: ArmGpus) -> list[tuple[int, ...]]:
    """An arm's written devices as one tuple per process it can hold (``auto``: none here)."""
    d = a.devices
    if isinstance(d, str):
        return []
    if d and isinstance(d[0], tuple):
        return [tuple(p) for p in d if isinstance(p, tuple)]
    flat = [x for x in d if isinstance(x, int)]
    n = per_process(a)
    return [tuple(flat[i : i + n]) for i in range(0, len(flat) - n + 1, n)]


def count_problems(arms: Sequence[ArmGpus]) -> list[str]:
    """Lists that give a process another number of devices than its engine takes: wrong at
    every ``episodes.processes`` (a config error, not a lack of devices)."""
    out = []
    for a in arms:
        nested = (
            isinstance(a.devices, tuple) and bool(a.devices) and isinstance(a.devices[0], tuple)
        )
        if a.need is None or not a.need.exact or not nested:
            continue
        n = a.need.per_process
        why = "its tensor parallel size" if n > 1 else "its engine runs on one"
        for j, p in enumerate(process_lists(a)):
            if len(p) != n:
                out.append(
                    f"arm {a.arm}: process {j} is given {len(p)} device"
                    f"{'s' if len(p) != 1 else ''} ({said(p)}), and each of its processes takes "
                    f"{n} ({why})"
                )
    return out


def _pool(gpus: Sequence[GpuInfo] | None, allowed: Sequence[int] | None) -> Iterator[int]:
    """The devices ``auto`` may take, in order; unbounded where none could be read."""
    if gpus is not None:
        yield from (g.index for g in gpus if allowed is None or g.index in allowed)
        return
    if allowed is not None:
        yield from allowed
        return
    i = 0
    while True:
        yield i
        i += 1


def _explicit(arms: Sequence[ArmGpus], m: int) -> tuple[list[Placed], list[str]]:
    placed, problems = [], []
    for a in arms:
        if a.devices == "auto":
            continue
        lists = process_lists(a)
        if len(lists) < m:
            problems.append(
                f"arm {a.arm}: devices {said(a.devices)} hold {len(lists)} process"
                f"{'es' if len(lists) != 1 else ''} of {per_process(a)} device"
                f"{'s' if per_process(a) != 1 else ''}"
            )
        placed += [Placed(a.arm, j, lists[j]) for j in range(min(m, len(lists)))]
    return placed, problems


def _auto(
    a: ArmGpus,
    m: int,
    gpus: Sequence[GpuInfo] | None,
    allowed: Sequence[int] | None,
    taken: set[int],
) -> tuple[list[Placed], str | None]:
    """``m`` processes of an ``auto`` arm on devices not ``taken`` with room for its need."""
    assert a.need is not None
    by_index = {g.index: g for g in gpus or ()}
    out: list[Placed] = []
    pool = _pool(gpus, allowed)
    for j in range(m):
        got: list[int] = []
        for d in pool:
            need = a.need.on(by_index.get(d))
            if d in taken or (d in by_index and need is not None and need > by_index[d].free_bytes):
                continue
            got.append(d)
            if len(got) == a.need.per_process:
                break
        if len(got) < a.need.per_process:
            n = a.need.per_process
            return out, (
                f"arm {a.arm} process {j}: no free device left ({n} a process; every device is "
                "another process's or has too little free memory)"
            )
        taken.update(got)
        out.append(Placed(a.arm, j, tuple(got)))
    return out, None


def by_device(
    placed: Sequence[Placed], needs: dict[str, GpuNeed | None]
) -> dict[int, list[tuple[Placed, GpuNeed]]]:
    """Device -> the processes on it that use a GPU, with their need."""
    on: dict[int, list[tuple[Placed, GpuNeed]]] = {}
    for p in placed:
        need = needs.get(p.arm)
        if need is not None:
            for d in p.devices:
                on.setdefault(d, []).append((p, need))
    return dict(sorted(on.items()))


def _shared(on: dict[int, list[tuple[Placed, GpuNeed]]]) -> list[str]:
    """Devices named for two processes where not every one of them declares its share."""
    out = []
    for d, ps in on.items():
        undeclared = [p for p, need in ps if not need.declared]
        if len(ps) > 1 and undeclared:
            out.append(
                f"device {d} is named for {_who(ps)}, and {undeclared[0].arm} declares no memory "
                "share (every process on a shared device must: gpu_memory_utilization, "
                "--mem-fraction-static)"
            )
    return out


def _memory(
    on: dict[int, list[tuple[Placed, GpuNeed]]], gpus: Sequence[GpuInfo] | None
) -> list[str]:
    """Devices not on this machine, and devices whose processes need more than is free (or,
    unread, shares that add up to more than the whole device)."""
    by_index = {g.index: g for g in gpus or ()}
    out = []
    for d, ps in on.items():
        gpu = by_index.get(d)
        if gpus is not None and gpu is None:
            listed = ", ".join(str(i) for i in sorted(by_index)) or "none"
            out.append(f"device {d} ({_who(ps[:1])}) is not one nvidia-smi lists ({listed})")
            continue
        if gpu is None:
            shares = [n.share for _, n in ps if n.share is not None]
            if len(shares) == len(ps) and sum(shares) > 1.0:
                out.append(f"device {d}: the shares of {_who(ps)} add up to more than the device")
            continue
        total = sum(n.on(gpu) or 0 for _, n in ps)
        if total > gpu.free_bytes:
            out.append(
                f"device {d}: {_who(ps)} need {total / GIB:.1f} GiB "
                f"({' + '.join(n.said(gpu) for _, n in ps)}), and "
                f"{gpu.free_bytes / GIB:.1f} GiB of its {gpu.total_bytes / GIB:.1f} GiB is free"
            )
    return out


def _who(ps: Sequence[tuple[Placed, GpuNeed]]) -> str:
    return ", ".join(f"{p.arm} p{p.process}" for p, _ in ps)


def place(
    arms: Sequence[ArmGpus],
    m: int,
    gpus: Sequence[GpuInfo] | None,
    allowed: Sequence[int] | None = None,
) -> Placement:
    """``m`` processes of every arm: the written lists first, then ``auto`` arms on what is
    left; ``gpus``: ``nvidia-smi``'s devices (None: not read, nothing is checked against free
    memory); ``allowed``: the pilot's own ``CUDA_VISIBLE_DEVICES`` (``auto`` keeps to them)."""
    placed, problems = _explicit(arms, m)
    gpu_arms = [a for a in arms if a.need is not None]
    taken = {d for p in placed if any(a.arm == p.arm for a in gpu_arms) for d in p.devices}
    for a in gpu_arms:
        if a.devices == "auto":
            got, problem = _auto(a, m, gpus, allowed, taken)
            placed += got
            problems += [problem] if problem else []
    on = by_device(placed, {a.arm: a.need for a in arms})
    problems += _shared(on) + _memory(on, gpus)
    return Placement(tuple(placed), tuple(problems))


def largest_processes(
    arms: Sequence[ArmGpus],
    m: int,
    gpus: Sequence[GpuInfo] | None,
    allowed: Sequence[int] | None = None,
) -> int:
    """The largest number of processes per arm, at most ``m``, that can be placed (0: none)."""
    return next((k for k in range(m, 0, -1) if not place(arms, k, gpus, allowed).problems), 0)


def refusal(
    arms: Sequence[ArmGpus],
    m: int,
    gpus: Sequence[GpuInfo] | None,
    allowed: Sequence[int] | None = None,
) -> str | None:
    """None when ``m`` processes of every arm can be placed; else why not, naming the field
    and the largest value that can (``processes_that_fit``'s wording)."""
    problems = place(arms, m, gpus, allowed).problems
    if not problems:
        return None
    fits = largest_processes(arms, m - 1, gpus, allowed)
    fix = (
        f"set episodes.processes to at most {fits}"
        if fits >= 1
        else "free devices, name others under devices:, or run fewer arms: not even one "
        "process per arm can be placed"
    )
    where = (
        f"on the {len(gpus)} GPUs nvidia-smi lists ({_span([g.index for g in gpus])})"
        if gpus is not None
        else "(free memory not read)"
    )
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return (
        f"episodes.processes {m}: {m * len(arms)} engine processes ({len(arms)} arms x {m}) "
        f"cannot be placed {where}: {problems[0]}{more} -> {fix}"
    )


def _span(indices: Sequence[int]) -> str:
    s = sorted(indices)
    if s and s == list(range(s[0], s[-1] + 1)) and len(s) > 2:
        return f"{s[0]}-{s[-1]}"
    return ", ".join(str(i) for i in s) or "none"


__all__ = [
    "ArmGpus",
    "Placed",
    "Placement",
    "by_device",
    "count_problems",
    "largest_processes",
    "place",
    "process_lists",
    "refusal",
    "said",
]
