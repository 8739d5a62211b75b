"""The GPUs of this machine as ``nvidia-smi`` lists them, and what one engine process needs of
each device it is given: the facts the pilot's placement (``pilot.plan.placement``) decides from.

``nvidia-smi --query-gpu=index,memory.total,memory.used,memory.free --format=csv,noheader,nounits``
prints one line per device in MiB (NVIDIA's documented CSV format); NVML through ``pynvml``
would say the same, and is not used (not installed here, and one more dependency for a figure
``nvidia-smi`` already gives).

    >>> gpus = parse_gpu_csv("0, 81559, 0, 81042\\n1, 81559, 70311, 10731\\n")
    >>> [(g.index, g.free_bytes // 2**20) for g in gpus]
    [(0, 81042), (1, 10731)]
    >>> visible_env((2, 3))
    {'CUDA_VISIBLE_DEVICES': '2,3', 'CUDA_DEVICE_ORDER': 'PCI_BUS_ID'}

A process's need is either a **share** (vLLM's ``gpu_memory_utilization``, SGLang's
``--mem-fraction-static``: the engine reserves that fraction of each device's *total* memory
at start and refuses to start when less is free) or an **estimate in bytes** (the builtin engine
and llama.cpp reserve no fraction: their weights at the format they hold plus ``ALLOWANCE``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MIB = 2**20
GIB = 2**30
QUERY = (
    "--query-gpu=index,memory.total,memory.used,memory.free",
    "--format=csv,noheader,nounits",
)
# what an engine that reserves no fraction needs beyond its weights: the CUDA context (~0.5 GiB),
# the KV cache of a few slots of a small model, activations. An estimate, said to be one.
ALLOWANCE = GIB


@dataclass(frozen=True)
class GpuInfo:
    """One device as ``nvidia-smi`` lists it (its index is the one ``CUDA_VISIBLE_DEVICES``
    takes under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, which ``visible_env`` sets)."""

    index: int
    total_bytes: int
    used_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class GpuReading:
    """What was read of the devices: ``gpus`` (None: nothing could be read, ``why`` says why)."""

    gpus: tuple[GpuInfo, ...] | None
    why: str = ""


@dataclass(frozen=True)
class GpuNeed:
    """What one engine process needs of each of its devices. ``per_process``: how many devices
    a process takes (tensor x pipeline parallel); ``exact``: it must get exactly that many (a
    llama.cpp process splits its layers over whatever it is given). ``share``: the fraction of
    each device's total memory it reserves; else ``bytes`` (None: unknown, not checked).
    ``declared``: the share is set in the arm's options (a device may be shared only by
    processes that each declare theirs). ``basis``: how the need was found, in words."""

    per_process: int
    basis: str
    share: float | None = None
    bytes: int | None = None
    exact: bool = True
    declared: bool = False

    def on(self, gpu: GpuInfo | None) -> int | None:
        """Bytes needed on ``gpu`` (None: not known without the device, or not estimated)."""
        if self.share is not None:
            return int(self.share * gpu.total_bytes) if gpu is not None else None
        return self.bytes

    def said(self, gpu: GpuInfo | None = None) -> str:
        """The need in words, with its bytes where known."""
        b = self.on(gpu)
        if self.share is not None and gpu is not None:
            return f"{self.share:g} x {gpu.total_bytes / GIB:.1f} GiB = {(b or 0) / GIB:.1f} GiB"
        if self.share is not None:
            return f"{self.share:g}"
        return f"{b / GIB:.1f} GiB" if b is not None else "need unknown"


def parse_gpu_csv(text: str) -> list[GpuInfo]:
    """``nvidia-smi``'s ``index, memory.total, memory.used, memory.free`` lines (MiB, no header,
    no units) -> devices in index order; a line that is not four numbers is an error."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            raise ValueError(f"nvidia-smi line {line!r}: expected index, total, used, free (MiB)")
        i, total, used, free = (int(p) for p in parts)
        out.append(GpuInfo(i, total * MIB, used * MIB, free * MIB))
    return sorted(out, key=lambda g: g.index)


def read_gpus(timeout_s: float = 20.0) -> GpuReading:
    """The devices ``nvidia-smi`` (on PATH) lists with their free memory now."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return GpuReading(None, "no nvidia-smi on PATH")
    try:
        done = subprocess.run(
            [exe, *QUERY], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuReading(None, f"nvidia-smi failed: {exc}")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return GpuReading(None, f"nvidia-smi exited {done.returncode}: {tail[0]}")
    try:
        return GpuReading(tuple(parse_gpu_csv(done.stdout)))
    except ValueError as exc:
        return GpuReading(None, str(exc))


def inherited_devices() -> tuple[int, ...] | None:
    """The device indices this process was itself limited to (``CUDA_VISIBLE_DEVICES`` of
    integers, as a scheduler sets it); None when unset or given as UUIDs.

        >>> os.environ["CUDA_VISIBLE_DEVICES"] = "4,5"; inherited_devices()
        (4, 5)
        >>> del os.environ["CUDA_VISIBLE_DEVICES"]
    """
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def visible_env(devices: Sequence[int]) -> dict[str, str]:
    """The environment that gives a process ``devices`` (as ``nvidia-smi`` numbers them: the
    PCI bus order, not CUDA's default fastest-first)."""
    return {
        "CUDA_VISIBLE_DEVICES": ",".join(str(d) for d in devices),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


def flag_value(args: Sequence[str], *names: str) -> str | None:
    """The value of the last of ``names`` in ``args`` (``--flag V`` or ``--flag=V``).

    >>> flag_value(["--tp", "2", "--mem-fraction-static=0.4"], "--mem-fraction-static")
    '0.4'
    """
    got = None
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                got = args[i + 1]
            elif a.startswith(n + "="):
                got = a.split("=", 1)[1]
    return got


def number_flag(args: Sequence[str], default: float, *names: str) -> float:
    """``flag_value`` as a number (``default`` when absent or not a number: the engine itself
    refuses a bad value at start, with its own message).

    >>> number_flag(["--tp-size", "4"], 1, "--tp-size", "--tp"), number_flag([], 0.9, "--x")
    (4.0, 0.9)
    """
    raw = flag_value(args, *names)
    try:
        return float(raw) if raw is not None else default
    except ValueError:
        return default


def files_bytes(paths: Sequence[str | None]) -> int | None:
    """The bytes of the model files at ``paths`` (a directory: all its files); None when any is
    not a file here (a hub id, a path on another machine)."""
    total = 0
    for p in paths:
        if p is None:
            continue
        path = Path(p)
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        else:
            return None
    return total


def gguf_bf16_bytes(path: str | None) -> int | None:
    """A GGUF's weights dequantised to bf16 (parameters x 2 bytes, from its tensor shapes):
    what the builtin engine holds on a GPU; None when it is not a GGUF file here."""
    if path is None or not str(path).endswith(".gguf") or not Path(path).is_file():
        return None
    from specpilot.engine.gguf_read import read_gguf

    params = 0
    for t in read_gguf(path).tensors.values():
        n = 1
        for d in t.shape:
            n *= int(d)
        params += n
    return 2 * params


__all__ = [
    "ALLOWANCE",
    "GpuInfo",
    "GpuNeed",
    "GpuReading",
    "files_bytes",
    "flag_value",
    "gguf_bf16_bytes",
    "inherited_devices",
    "number_flag",
    "parse_gpu_csv",
    "read_gpus",
    "visible_env",
]
