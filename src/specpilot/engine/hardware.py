"""What the engine runs on: CPU model and kernel-relevant flags, cores, threads, GPU.

Whether speculation pays depends on the verify-cost curve, and that depends on the machine
(docs/DESIGN.md "Hardware is part of every result"): bf16 is native with AVX-512 BF16 / AMX and
emulated on AVX2, MKL's small-M float32 path differs between vendors. The probe is recorded in
the engine's calibration and is part of its cache key.

    >>> info = parse_cpuinfo("model name\\t: AMD EPYC 7B13\\nflags\\t\\t: fpu avx2 fma\\n")
    >>> info.model, info.flags
    ('AMD EPYC 7B13', ('avx2', 'fma'))
    >>> probe().kind in ("cuda", "cpu-amx", "cpu-avx512-bf16", "cpu-avx512", "cpu-avx2", "cpu")
    True
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from specpilot import cpuinfo

# Flags that change which kernels are fast (matmul, bf16, int8 dot products, tiles).
KERNEL_FLAGS = (
    "avx2",
    "fma",
    "f16c",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)

# What a calibration depends on (not the load a busy neighbour adds).
CACHE_FIELDS = (
    "cpu_model",
    "cpu_flags",
    "usable_cores",
    "torch_threads",
    "torch_version",
    "torch_cpu_capability",
    "device",
    "gpu_name",
)


@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: tuple[str, ...]  # the KERNEL_FLAGS present, in that order
    physical_cores: int | None  # distinct (physical id, core id) pairs; None when not listed


def parse_cpuinfo(text: str) -> CpuInfo:
    """``specpilot.cpuinfo.parse_cpuinfo``, keeping the flags the kernels care about."""
    c = cpuinfo.parse_cpuinfo(text)
    return CpuInfo(c.model, tuple(f for f in KERNEL_FLAGS if f in c.flags), c.physical_cores)


@dataclass(frozen=True)
class HardwareProbe:
    cpu_model: str
    cpu_flags: tuple[str, ...]
    logical_cores: int
    physical_cores: int | None
    usable_cores: int  # this process's CPU affinity
    torch_threads: int
    torch_version: str
    torch_cpu_capability: str  # the ATen kernels in use: AVX512, AVX2, DEFAULT...
    device: str  # "cpu" or "cuda:N"
    gpu_name: str | None = None
    gpu_capability: str | None = None
    gpu_memory_bytes: int | None = None

    @property
    def kind(self) -> str:
        """A coarse class for reports: cuda, cpu-amx, cpu-avx512-bf16, cpu-avx512, cpu-avx2, cpu."""
        f = set(self.cpu_flags)
        if self.device.startswith("cuda"):
            return "cuda"
        if "amx_bf16" in f:
            return "cpu-amx"
        if "avx512_bf16" in f:
            return "cpu-avx512-bf16"
        if "avx512f" in f:
            return "cpu-avx512"
        return "cpu-avx2" if "avx2" in f else "cpu"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpu_flags"] = list(self.cpu_flags)
        d["kind"] = self.kind
        return d

    def cache_fields(self) -> dict[str, Any]:
        """What a calibration depends on (not the core count a busy neighbour changes)."""
        d = self.to_dict()
        return {k: d[k] for k in CACHE_FIELDS}


def probe(device: str | torch.device = "cpu") -> HardwareProbe:
    """Probe this process's hardware (reads /proc/cpuinfo where it exists)."""
    path = Path("/proc/cpuinfo")
    cpu = parse_cpuinfo(path.read_text(errors="replace") if path.exists() else "")
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    dev = torch.device(device)
    gpu: dict[str, Any] = {}
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        gpu = {
            "gpu_name": props.name,
            "gpu_capability": f"{props.major}.{props.minor}",
            "gpu_memory_bytes": int(props.total_memory),
        }
        dev = torch.device("cuda", idx)
    return HardwareProbe(
        cpu_model=cpu.model,
        cpu_flags=cpu.flags,
        logical_cores=os.cpu_count() or 1,
        physical_cores=cpu.physical_cores,
        usable_cores=usable,
        torch_threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        torch_cpu_capability=torch.backends.cpu.get_cpu_capability(),
        device=str(dev),
        **gpu,
    )
