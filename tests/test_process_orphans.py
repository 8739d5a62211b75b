"""A server subprocess stops when the process that started it dies (a killed pilot or test
must not leave an engine holding the cores)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from specpilot.backends.process import PARENT_ENV


def test_a_server_child_stops_when_its_parent_is_killed(tmp_path):
    child = textwrap.dedent(
        """
        import time
        from specpilot.backends.process import die_with_parent
        die_with_parent(poll_s=0.05)
        time.sleep(60)
        """
    )
    parent = textwrap.dedent(
        f"""
        import os, signal, subprocess, sys
        env = {{**os.environ, {PARENT_ENV!r}: str(os.getpid())}}
        p = subprocess.Popen([sys.executable, "-c", {child!r}], env=env, start_new_session=True)
        print(p.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60)
    _gone_within(int(out.stdout.strip()), 20, "the child")


def _gone_within(pid: int, seconds: float, what: str) -> None:
    """Wait until ``pid`` is gone (a zombie of init counts as gone); else kill it and fail."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(")")[-1].split()[0] == "Z":
                return
        time.sleep(0.1)
    os.kill(pid, 9)
    raise AssertionError(f"{what} outlived its parent by {seconds:g} s")


def test_without_the_marker_nothing_is_watched(monkeypatch):
    import threading

    from specpilot.backends.process import die_with_parent

    monkeypatch.delenv(PARENT_ENV, raising=False)
    before = {t.name for t in threading.enumerate()}
    die_with_parent()
    assert "die-with-parent" not in {t.name for t in threading.enumerate()} - before


def test_a_foreign_engine_under_the_guard_stops_when_its_parent_is_killed():
    """vLLM cannot watch its parent: ``backends.guard`` does it for any command."""
    parent = textwrap.dedent(
        """
        import os, signal, subprocess, sys
        cmd = [sys.executable, "-m", "specpilot.backends.guard", str(os.getpid()), "--",
               sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(60)"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
        print(p.stdout.readline().strip(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60)
    _gone_within(int(out.stdout.strip()), 20, "the guarded command")  # the guard's child
