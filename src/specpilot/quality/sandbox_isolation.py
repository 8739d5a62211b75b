"""The isolation modes' command prefixes (``quality.sandbox`` runs the child under them) and
the interpreter the child runs. Under ``bwrap`` or ``unshare`` the child sees the system
directories and the interpreter's prefix, read-only, and a fresh tmpfs as its working
directory; every other top-level directory is left out (``bwrap``) or covered by an empty
tmpfs (``unshare``). ``rlimits`` has no prefix: the child runs on the host as it is.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path

_SYSTEM_DIRS = (
    "usr",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "bin",
    "sbin",
    "etc",
    "proc",
    "sys",
    "dev",
)


def _world_usable(path: str) -> bool:
    """Every directory on the way is searchable and the file executable by any user."""
    p = Path(path)
    try:
        if not p.stat().st_mode & 0o001:
            return False
        return all(d.stat().st_mode & 0o001 for d in p.parents)
    except OSError:
        return False


@cache
def sandbox_python() -> str:
    """An interpreter the throw-away uid can run: this one's base if every user may, else the
    system's ``python3`` (the harness needs the standard library only)."""
    base = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    if os.geteuid() != 0 or _world_usable(base):
        return base
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        real = os.path.realpath(cand)
        if os.path.exists(real) and _world_usable(real):
            return real
    return base


def _visible_dirs() -> list[str]:
    keep = set(_SYSTEM_DIRS)
    for p in (sandbox_python(),):
        parts = Path(os.path.realpath(p)).parts
        if len(parts) > 1:
            keep.add(parts[1])
    return sorted(keep)


def _bwrap_prefix() -> list[str]:
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    for d in _visible_dirs():
        src = "/" + d
        if d in ("proc", "dev", "sys") or not os.path.exists(src):
            continue
        argv += ["--ro-bind", src, src]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp"]
    return [*argv, "--"]


def _unshare_prefix() -> list[str]:
    keep = {*_visible_dirs(), "tmp"}
    hide = sorted(
        "/" + d
        for d in os.listdir("/")
        if d not in keep and os.path.isdir("/" + d) and not os.path.islink("/" + d)
    )
    # Hidden directories become empty read-only tmpfs; /tmp (the working directory) and
    # /dev/shm fresh writable ones, gone when the namespace ends.
    mounts = "".join(f"mount -t tmpfs -o ro,size=4k none {d} || exit 97; " for d in hide)
    mounts += "mount -t tmpfs -o size=16m,mode=1777 none /tmp || exit 97; "
    mounts += "if [ -d /dev/shm ]; then mount -t tmpfs -o size=1m none /dev/shm || exit 97; fi; "
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "--net",
        "--mount",
        "--ipc",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "/bin/sh",
        "-c",
        f'{mounts}cd /tmp && exec "$@"',
        "sandbox",
    ]


def isolation_prefix(isolation: str) -> list[str]:
    if isolation == "bwrap":
        return _bwrap_prefix()
    if isolation == "unshare":
        return _unshare_prefix()
    return []
