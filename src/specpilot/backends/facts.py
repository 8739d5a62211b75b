"""Facts that freeze a result: model file hashes, tokenizer hashes, the machine, process memory.

    >>> from specpilot.backends.facts import hardware_facts
    >>> hw = hardware_facts()
    >>> hw.cpu_logical_cores >= 1 and hw.memory_bytes > 0
    True

The CPU flags come from ``/proc/cpuinfo`` (Linux): whether a verify of k+1 tokens costs about one
token (AVX-512 BF16, AMX) or k+1 tokens (AVX2 only) depends on them (DESIGN.md, "Hardware").
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from specpilot.backends.protocol import ModelFile
from specpilot.cpuinfo import parse_cpuinfo
from specpilot.hashing import file_sha256
from specpilot.records import HardwareFacts


def model_file(role: str, path: str | Path | None) -> ModelFile | None:
    """A model file (or directory: every file in it, hashed in name order) with its sha256."""
    if path is None:
        return None
    p = Path(path)
    if p.is_file():
        st = p.stat()
        return ModelFile(role, str(p.resolve()), file_sha256(p), st.st_size)
    if p.is_dir():
        h = hashlib.sha256()
        total = 0
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            st = f.stat()
            h.update(f.relative_to(p).as_posix().encode() + b"\0")
            h.update(file_sha256(f).encode())
            total += st.st_size
        return ModelFile(role, str(p.resolve()), h.hexdigest(), total)
    return ModelFile(role, str(path), None, None)  # a hub id or remote name: not hashable here


@functools.lru_cache(maxsize=16)
def gguf_tokenizer_sha256(path: str) -> str | None:
    """Hash of a GGUF's ``tokenizer.*`` metadata (tokens, merges, specials, chat template)."""
    try:
        from specpilot.engine.gguf_read import read_gguf

        fields = read_gguf(path).fields
    except ImportError:
        return None
    h = hashlib.sha256()
    for key in sorted(k for k in fields if k.startswith("tokenizer.")):
        h.update(key.encode() + b"\0")
        h.update(json.dumps(fields[key], ensure_ascii=False, default=str).encode())
    return h.hexdigest()


def tokenizer_sha256(path: str | Path | None) -> str | None:
    """Tokenizer hash of a GGUF file or a Hugging Face directory's tokenizer files."""
    if path is None:
        return None
    p = Path(path)
    if p.is_file() and p.suffix == ".gguf":
        return gguf_tokenizer_sha256(str(p.resolve()))
    if p.is_dir():
        files = [p / n for n in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")]
        present = [f for f in files if f.exists()]
        if present:
            h = hashlib.sha256()
            for f in present:
                h.update(f.name.encode() + b"\0" + f.read_bytes())
            return h.hexdigest()
    return None


def cpu_model_and_flags(text: str) -> tuple[str, list[str]]:
    """The CPU model and every flag of a ``/proc/cpuinfo`` text (``specpilot.cpuinfo``).

    >>> cpu_model_and_flags("model name\\t: Xeon\\nflags\\t\\t: sse2 avx2 avx512_bf16\\n")
    ('Xeon', ['avx2', 'avx512_bf16', 'sse2'])
    """
    c = parse_cpuinfo(text)
    return c.model if "model name" in text else "", list(c.flags)


def _gpus() -> list[dict[str, Any]]:
    smi = shutil.which("nvidia-smi")
    out: list[dict[str, Any]] = []
    if not smi:
        return out
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        text = subprocess.run(
            [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        for line in text.strip().splitlines():
            name, mem, driver = (x.strip() for x in line.split(","))
            out.append({"name": name, "memory_bytes": int(float(mem)) * 2**20, "driver": driver})
    return out


@functools.lru_cache(maxsize=1)
def hardware_facts() -> HardwareFacts:
    """This machine: CPU model and flags, cores, memory, GPUs (nvidia-smi), OS and Python."""
    import psutil

    text = ""
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text()
    model, flags = cpu_model_and_flags(text)
    return HardwareFacts(
        cpu_model=model or platform.processor() or "",
        cpu_flags=flags,
        cpu_logical_cores=os.cpu_count(),
        cpu_affinity=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        memory_bytes=int(psutil.virtual_memory().total),
        gpus=_gpus(),
        os=platform.platform(),
        python=sys.version.split()[0],
    )


def hardware_info() -> dict[str, Any]:
    """``hardware_facts()`` as the dict a ``Manifest`` carries."""
    return hardware_facts().to_dict()


def process_memory(pid: int | None) -> dict[str, int]:
    """RSS of a process and its children, and its GPU memory when nvidia-smi can tell (bytes).

    Keys: ``rss_bytes`` and ``gpu_memory_bytes`` (as in ``MetricSnapshot``); empty when ``pid``
    is None or gone.
    """
    import psutil

    out: dict[str, int] = {}
    if pid is None:
        return out
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
        pids = {p.pid for p in procs}
        out["rss_bytes"] = int(sum(p.memory_info().rss for p in procs if p.is_running()))
    except psutil.Error:
        return out
    smi = shutil.which("nvidia-smi")
    if smi:
        with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
            text = subprocess.run(
                [smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
            used = [
                float(m)
                for p, m in (line.split(",") for line in text.strip().splitlines())
                if int(p) in pids
            ]
            if used:
                out["gpu_memory_bytes"] = int(sum(used) * 2**20)
    return out


@dataclasses.dataclass(frozen=True)
class CpuSample:
    """The machine's CPU seconds (all cores, from ``/proc/stat``) and this process tree's, at
    one instant (``time.monotonic``)."""

    t: float
    busy_s: float  # user + nice + system + irq + softirq (guest time is inside user)
    steal_s: float  # taken by the hypervisor for other tenants
    # user + system of this process and its live descendants (the engines), with the children
    # each of them has reaped (an exited engine's time stays in the tree)
    tree_s: float
    cores: int = 0  # the cpuN lines /proc/stat sums over (0: unknown)


def cpu_sample(stat: str = "/proc/stat") -> CpuSample | None:
    """Now; None where ``/proc/stat`` cannot be read (not Linux)."""
    import psutil

    try:
        with open(stat) as f:
            lines = f.read().splitlines()
        fields = [float(v) for v in lines[0].split()[1:]]
        tick = float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
    cores = sum(1 for ln in lines[1:] if ln.startswith("cpu") and ln[3:4].isdigit())
    fields += [0.0] * (8 - len(fields))
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    tree = 0.0
    me = psutil.Process()
    for p in (me, *me.children(recursive=True)):
        with contextlib.suppress(psutil.Error):
            c = p.cpu_times()
            tree += c.user + c.system + c.children_user + c.children_system
    return CpuSample(
        time.monotonic(), (user + nice + system + irq + softirq) / tick, steal / tick, tree, cores
    )


def cpu_contention(
    a: CpuSample | None, b: CpuSample | None, cores: int | None = None
) -> tuple[float, float] | None:
    """(cores used by processes outside this tree, share of the machine's time stolen by the
    hypervisor) between two samples; None without both or over no time. A descendant that
    exited in between stays inside once its parent has reaped it (until then its last
    seconds count as outside). irq and softirq time is the machine's, never the tree's: a
    small upward bias under heavy network load.

        >>> cpu_contention(CpuSample(0.0, 10.0, 0.0, 4.0), CpuSample(10.0, 25.0, 1.0, 14.0), 2)
        (0.5, 0.05)
    """
    if a is None or b is None or b.t <= a.t:
        return None
    wall = b.t - a.t
    other = max(0.0, (b.busy_s - a.busy_s) - (b.tree_s - a.tree_s)) / wall
    cores = cores or b.cores or os.cpu_count() or 1
    steal = max(0.0, b.steal_s - a.steal_s) / (wall * cores)
    return round(other, 3), round(steal, 3)
