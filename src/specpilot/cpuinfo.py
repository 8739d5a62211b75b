"""``/proc/cpuinfo`` read once for everyone: the CPU model, every flag and the physical cores.

The engine's hardware probe (``engine.hardware``) keeps the flags its kernels care about; the
manifests (``backends.facts``) record them all. A leaf (stdlib only): a command that only
describes the machine loads no torch.

    >>> c = parse_cpuinfo("model name\\t: Xeon\\nflags\\t\\t: sse2 avx2 avx512_bf16\\n")
    >>> c.model, c.flags, c.physical_cores
    ('Xeon', ('avx2', 'avx512_bf16', 'sse2'), None)
"""

from __future__ import annotations

import contextlib
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: tuple[str, ...]  # every flag, sorted ("Features" on ARM)
    physical_cores: int | None  # distinct (physical id, core id) pairs; None when not listed


def parse_cpuinfo(text: str) -> CpuInfo:
    """Parse ``/proc/cpuinfo`` text (x86 layout; other layouts give what they have)."""
    model, flags = "", set[str]()
    cores: set[tuple[str, str]] = set()
    phys = core = ""
    for line in [*text.splitlines(), ""]:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and not model:
            model = value
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif key == "physical id":
            phys = value
        elif key == "core id":
            core = value
        elif not key:  # a blank line ends one logical processor
            if core:
                cores.add((phys, core))
            phys = core = ""
    return CpuInfo(
        model=model or platform.processor() or platform.machine(),
        flags=tuple(sorted(flags)),
        physical_cores=len(cores) or None,
    )


def this_cpu(path: str | Path = "/proc/cpuinfo") -> CpuInfo:
    text = ""
    with contextlib.suppress(OSError):
        text = Path(path).read_text(errors="replace")
    return parse_cpuinfo(text)
