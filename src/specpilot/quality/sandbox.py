"""Run untrusted model code in a contained subprocess (the ``code_tests`` check).

Layers, strongest available first (``available_isolation()`` probes once per process):

- ``bwrap`` (Debian ``bubblewrap``): new user, network, PID, IPC and mount namespaces; only the
  system directories (``/usr``, ``/lib*``, ``/bin``, ``/etc`` and the interpreter's prefix) are
  visible, read-only; an empty tmpfs is the working directory.
- ``unshare`` (util-linux, no install on Debian): the same namespaces through ``unshare
  --user --net --mount --pid``; every top-level directory except the system ones is covered by
  an empty tmpfs (so ``/work``, ``/root``, ``/home`` and ``/tmp`` show nothing), and the
  working directory is a fresh tmpfs.
- ``rlimits``: resource limits and a throw-away user id only. The network is **not** cut and
  world-readable/writable host paths stay reachable; the result says so.

Always, in every mode: the child runs under a fresh unprivileged user id (root is exempt from
``RLIMIT_NPROC``, so a fork bomb needs a real uid), with CPU-time, address-space, file-size,
process-count and open-file limits, no core files, an empty environment, its own session, and
a wall timeout; afterwards every process of that uid is killed. The harness (the standard
library only: model code cannot import site packages; run with ``python -I -S``) executes the code, then each test with a per-test time limit, and prints
one JSON line of results. The verdict comes from the same process as the code: the sandbox
contains side effects, it does not make a deliberately forged verdict impossible.

    >>> r = run_tests("def f(x):\\n    return x + 1\\n", {"t1": "assert f(1) == 2"})  # doctest: +SKIP
    >>> r.status, r.passed, r.isolation                                              # doctest: +SKIP
    ('ok', ['t1'], 'unshare')
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from specpilot.quality.sandbox_isolation import isolation_prefix, sandbox_python

ISOLATIONS = ("bwrap", "unshare", "rlimits")
_UID_BASE, _UID_SPAN = 3_000_000, 1_000_000  # throw-away uids: no passwd entry, no files

# Runs inside the sandbox: read {"code", "tests", "per_test_s", "marker"} from stdin, exec the
# code, then each test in a copy of its namespace; print marker + JSON results on stdout.
_HARNESS = r"""
import json, signal, sys, types, traceback
job = json.loads(sys.stdin.read())
marker = job.pop("marker")
_code = job.pop("exit_code")  # the parent accepts results only with this exit status
out = sys.stdout
import os as _os
class _Raises:
    def __init__(self, exc, match=None):
        self.exc, self.match = exc, match
    def __enter__(self):
        return self
    def __exit__(self, et, ev, tb):
        if et is None:
            raise AssertionError("DID NOT RAISE " + getattr(self.exc, "__name__", str(self.exc)))
        if not issubclass(et, self.exc):
            return False
        if self.match is not None:
            import re
            if not re.search(self.match, str(ev)):
                raise AssertionError("exception message does not match " + repr(self.match))
        return True
shim = types.ModuleType("pytest")
shim.raises = _Raises
shim.approx = lambda v, rel=1e-6, abs=1e-12: _Approx(v, rel, abs)
class _Approx:
    def __init__(self, v, rel, abs_):
        self.v, self.rel, self.abs = v, rel, abs_
    def __eq__(self, other):
        return abs(other - self.v) <= max(self.rel * abs(self.v), self.abs)
sys.modules["pytest"] = shim
def _alarm(*_):
    raise TimeoutError("test exceeded its time limit")
signal.signal(signal.SIGALRM, _alarm)
res = {"load": None, "tests": {}}
ns = {"__name__": "solution"}
try:
    signal.setitimer(signal.ITIMER_REAL, job["per_test_s"])
    exec(compile(job["code"], "solution.py", "exec"), ns)
    signal.setitimer(signal.ITIMER_REAL, 0)
except BaseException as e:
    signal.setitimer(signal.ITIMER_REAL, 0)
    res["load"] = type(e).__name__ + ": " + str(e)[:300]
if res["load"] is None:
    for name, test in job["tests"].items():
        try:
            signal.setitimer(signal.ITIMER_REAL, job["per_test_s"])
            exec(compile(test, name, "exec"), dict(ns))
            signal.setitimer(signal.ITIMER_REAL, 0)
            res["tests"][name] = None
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            res["tests"][name] = type(e).__name__ + (": " + str(e)[:200] if str(e) else "")
out.write("\n" + marker + json.dumps(res) + "\n")
out.flush()
_os._exit(_code)
"""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed run (each test also gets ``per_test_s`` of wall time)."""

    cpu_s: int = 10
    wall_s: float = 20.0
    per_test_s: float = 5.0
    memory_bytes: int = 1 << 30  # address space
    file_bytes: int = 1 << 20  # largest file the code may write
    processes: int = 32  # for the throw-away uid, every process it has
    open_files: int = 64
    output_bytes: int = 64 << 10  # stdout/stderr kept


@dataclass
class SandboxResult:
    """status: ok (the harness ran; see ``tests``) | load_error (the code raised when loaded)
    | timeout (the wall limit) | no_result (it ended without reporting: a CPU or memory
    limit, a signal, or the code's own exit)."""

    status: str
    isolation: str
    tests: dict[str, str | None] = field(default_factory=dict)  # name -> None (pass) or error
    load_error: str | None = None
    returncode: int | None = None
    duration_s: float = 0.0
    stdout: str = ""
    stderr: str = ""
    uid: int | None = None  # the throw-away uid it ran under (None: not root, own uid)

    @property
    def passed(self) -> list[str]:
        return [n for n, e in self.tests.items() if e is None]

    @property
    def failed(self) -> dict[str, str]:
        return {n: e for n, e in self.tests.items() if e is not None}


def _limits(lim: SandboxLimits, uid: int | None) -> Callable[[], None]:
    nproc = lim.processes
    if uid is None:  # not root: the limit counts this user's other processes too
        import psutil

        me = os.getuid()
        nproc += sum(1 for p in psutil.process_iter(["uids"]) if p.info["uids"].real == me)

    def apply() -> None:  # runs in the child between fork and exec
        os.setsid()
        for what, value in (
            (resource.RLIMIT_CPU, (lim.cpu_s, lim.cpu_s + 1)),
            (resource.RLIMIT_AS, (lim.memory_bytes, lim.memory_bytes)),
            (resource.RLIMIT_FSIZE, (lim.file_bytes, lim.file_bytes)),
            (resource.RLIMIT_NPROC, (nproc, nproc)),
            (resource.RLIMIT_NOFILE, (lim.open_files, lim.open_files)),
            (resource.RLIMIT_CORE, (0, 0)),
        ):
            resource.setrlimit(what, value)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)

    return apply


def _throwaway_uid() -> int | None:
    """A uid no file and no process has (only root may switch; others keep their own)."""
    if os.geteuid() != 0:
        return None
    return _UID_BASE + secrets.randbelow(_UID_SPAN)


@cache
def available_isolation() -> tuple[str, ...]:
    """Isolation modes that work on this machine, strongest first (``rlimits`` always)."""
    found = []
    for mode, tool in (("bwrap", "bwrap"), ("unshare", "unshare")):
        if shutil.which(tool) is None:
            continue
        uid = _throwaway_uid()
        try:
            r = subprocess.run(
                [
                    *isolation_prefix(mode),
                    sandbox_python(),
                    "-I",
                    "-S",
                    "-c",
                    "import os; print(os.getcwd())",
                ],
                capture_output=True,
                timeout=20,
                preexec_fn=_limits(SandboxLimits(), uid),
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if r.returncode == 0 and r.stdout.strip() == b"/tmp":
            found.append(mode)
    return (*found, "rlimits")


def _alive(uid: int) -> list[Any]:
    """Processes of ``uid`` that still run (zombies wait for their parent: not counted)."""
    import psutil

    out = []
    for p in psutil.process_iter(["uids", "status"]):
        info = p.info
        if info["uids"] and info["uids"].real == uid and info["status"] != psutil.STATUS_ZOMBIE:
            out.append(p)
    return out


def _kill_uid(uid: int | None, proc: subprocess.Popen[bytes]) -> None:
    """Kill the session, then every process left under the throw-away uid: ``kill -KILL -1``
    run *as that uid* signals all of them at once (a fork bomb cannot outrun it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if uid is None:
        return

    def as_uid() -> None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    for _ in range(20):
        if not _alive(uid):
            return
        subprocess.run(["kill", "-KILL", "-1"], preexec_fn=as_uid, capture_output=True, check=False)
        time.sleep(0.02)


def run_tests(
    code: str,
    tests: Mapping[str, str],
    limits: SandboxLimits | None = None,
    isolation: str = "auto",
) -> SandboxResult:
    """Exec ``code``, then each named test, in a contained subprocess. Never raises for what
    the code does; ``isolation`` "auto" takes the strongest available mode."""
    lim = limits or SandboxLimits()
    mode = _isolation_mode(isolation)
    uid = _throwaway_uid()
    workdir = _rlimits_workdir(uid) if mode == "rlimits" else None
    cwd = workdir or "/"
    job, marker, exit_code = _job(code, tests, lim)
    argv = [*isolation_prefix(mode), sandbox_python(), "-I", "-S", "-c", _HARNESS]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": cwd if workdir else "/tmp"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_limits(lim, uid),
        cwd=cwd,
        env=env,
    )
    timed_out = False
    try:
        out, err, timed_out = _bounded_communicate(proc, job, lim.wall_s, lim.output_bytes)
    finally:
        _kill_uid(uid, proc)
        proc.wait()
        _close_pipes(proc)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    res = SandboxResult(
        status="timeout" if timed_out else "no_result",
        isolation=mode,
        uid=uid,
        returncode=proc.returncode,
        duration_s=time.perf_counter() - t0,
        stdout=out[: lim.output_bytes].decode("utf-8", "replace"),
        stderr=err[: lim.output_bytes].decode("utf-8", "replace"),
    )
    if proc.returncode != exit_code:  # not the harness's own end: whatever it printed is void
        return res
    return _parse(res, out.decode("utf-8", "replace"), marker, timed_out)


def _job(code: str, tests: Mapping[str, str], lim: SandboxLimits) -> tuple[bytes, str, int]:
    """What the harness reads on stdin (the code, the tests, the per-test limit), with the
    marker its results are printed under and the exit status they count with."""
    marker = "@@specpilot-result-" + secrets.token_hex(8) + "@@"
    # results count only with this exit status (the harness exits with it after the tests):
    # a snippet that prints fake results and exits early reports nothing. This raises the bar;
    # code that digs the value out of its own process could still forge, since the tests run
    # in the process that runs the code: sandbox results are evidence about a model's output,
    # not a security boundary (the isolation is the boundary)
    exit_code = 3 + secrets.randbelow(120)
    job = {
        "code": code,
        "tests": dict(tests),
        "per_test_s": lim.per_test_s,
        "marker": marker,
        "exit_code": exit_code,
    }
    return json.dumps(job).encode(), marker, exit_code


def _isolation_mode(isolation: str) -> str:
    """``isolation`` checked against the modes that work here ("auto": the strongest)."""
    modes = available_isolation()
    mode = modes[0] if isolation == "auto" else isolation
    if mode not in ISOLATIONS:
        raise ValueError(f"isolation {isolation!r}: use auto or one of {', '.join(ISOLATIONS)}")
    if mode not in modes:
        raise ValueError(
            f"isolation {mode!r} does not work on this machine (have: {', '.join(modes)})"
        )
    return mode


def _rlimits_workdir(uid: int | None) -> str:
    """An empty host directory for the run, owned by ``uid`` when there is one: the
    namespaces give a fresh tmpfs, rlimits alone do not."""
    workdir = tempfile.mkdtemp(prefix="specpilot-sandbox-")
    if uid is not None:
        os.chown(workdir, uid, uid)
    return workdir


def _bounded_communicate(
    proc: subprocess.Popen[bytes], data: bytes, wall_s: float, keep: int
) -> tuple[bytes, bytes, bool]:
    """Feed ``data`` to stdin and read stdout / stderr in chunks, keeping at most ``keep``
    bytes of each (the first ``keep``, and for stdout also its last ``keep``, where the
    harness's result line is): a snippet that writes 1 GiB costs the parent nothing. Returns
    (stdout, stderr, timed out)."""
    import selectors

    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(data)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    head = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    tail = bytearray()
    sel = selectors.DefaultSelector()
    for f in head:
        os.set_blocking(f.fileno(), False)
        sel.register(f, selectors.EVENT_READ)
    deadline = time.monotonic() + wall_s
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(head[proc.stdout]), bytes(head[proc.stderr]), True
        for key, _ in sel.select(min(left, 0.5)):
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            buf = head[key.fileobj]  # type: ignore[index]
            if len(buf) < keep:
                buf += chunk[: keep - len(buf)]
            if key.fileobj is proc.stdout:
                tail += chunk
                del tail[: max(0, len(tail) - keep)]
    out = bytes(head[proc.stdout])
    if len(out) >= keep:  # the result line is at the end: keep the tail too
        out = out + b"\n" + bytes(tail)
    try:
        proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return out, bytes(head[proc.stderr]), True
    return out, bytes(head[proc.stderr]), False


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()


def _parse(res: SandboxResult, out: str, marker: str, timed_out: bool) -> SandboxResult:
    at = out.rfind(marker)
    got: dict[str, Any] = {}
    if at >= 0 and not timed_out:
        with contextlib.suppress(json.JSONDecodeError, IndexError):
            got = json.loads(out[at + len(marker) :].splitlines()[0])
    if got:
        res.tests = dict(got.get("tests") or {})
        res.load_error = got.get("load")
        res.status = "load_error" if res.load_error else "ok"
        res.stdout = out[:at][-4096:]
    return res
