"""An engine as a subprocess: a free port, the log in a file, /health polling, stop and kill.

>>> import sys
>>> srv = ServerProcess([sys.executable, "-c", "pass"], "http://127.0.0.1:9")
>>> srv.start(timeout_s=5)                                  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
specpilot.backends.protocol.BackendError: server exited with code 0 before it was healthy; ...
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from specpilot.backends.protocol import START_TIMEOUT_S, BackendError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def get_text(url: str, timeout_s: float = 10.0, headers: Mapping[str, str] | None = None) -> str:
    r = httpx.get(url, headers=dict(headers or {}), timeout=timeout_s)
    r.raise_for_status()
    return r.text


def wait_healthy(url: str, timeout_s: float, proc: ServerProcess | None = None) -> None:
    """Poll ``url`` until it answers 200; fail early when ``proc`` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.exited() is not None:
            raise BackendError(
                f"server exited with code {proc.exited()} before it was healthy; "
                f"log {proc.log_path}:\n{proc.log_tail()}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        time.sleep(0.1)
    tail = f"; log {proc.log_path}:\n{proc.log_tail()}" if proc is not None else ""
    if proc is not None:
        proc.stop()
    raise BackendError(f"server not healthy at {url} after {timeout_s:g}s{tail}")


PARENT_ENV = "SPECPILOT_DIE_WITH_PARENT"


def die_with_parent(poll_s: float = 1.0) -> None:
    """In a server subprocess started by ``ServerProcess``: stop (SIGTERM to itself) once the
    process that started it is gone, so a killed pilot or test leaves no orphan engine holding
    the cores. A watcher thread compares the parent pid (a process-level check: prctl's
    PDEATHSIG would fire when the *thread* that started the server ends, e.g. the drill's)."""
    want = os.environ.get(PARENT_ENV)
    if not want:
        return
    parent = int(want)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)

    import threading

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


class ServerProcess:
    """A server subprocess with its log in a file; ``start`` returns once /health answers 200."""

    def __init__(
        self, argv: list[str], url: str, env: dict[str, str] | None = None, health: str = "/health"
    ) -> None:
        self.argv = argv
        self.url = url
        self.env = env
        self.health = health
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def exited(self) -> int | None:
        """The exit code once the process has ended, else None."""
        return self.proc.poll() if self.proc is not None else None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        fd, name = tempfile.mkstemp(prefix="specpilot-server-", suffix=".log")
        self.log_path = Path(name)
        env = {**os.environ, **(self.env or {}), PARENT_ENV: str(os.getpid())}
        with os.fdopen(fd, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        wait_healthy(self.url + self.health, timeout_s, self)

    def log_tail(self, n: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")

    def stop(self, grace_s: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def kill(self) -> None:
        """Kill -9 the process group, as a crash would (for rollback drills and tests)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
