"""What every backend shares: the Protocol, the frozen manifest, normalised metric names, and
the plumbing to run an engine as a subprocess (free port, /health polling, clean stop).

Normalised names (``MetricSnapshot.metrics`` and ``RequestRecord.spec``) follow DESIGN.md's
definitions, whatever the engine's own convention:

- ``spec_rounds``: verification steps that carried a draft (vLLM ``num_drafts``, llama.cpp
  ``num_drafts``, SGLang ``spec_verify_ct``).
- ``spec_proposed_tokens``: draft tokens proposed (sum of k).
- ``spec_accepted_tokens``: draft tokens accepted, the bonus/correction token *excluded*.
- ``spec_committed_tokens``: tokens those rounds appended = accepted + rounds (bonus included).
- ``spec_accepted_pos_{i}`` (i from 1): rounds that accepted at least i drafts, so
  P(a >= i) = spec_accepted_pos_i / spec_rounds.
- ``generation_tokens``, ``prompt_tokens``, ``requests_running``, ``requests_waiting``,
  ``process_rss_bytes``, ``gpu_memory_used_bytes``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import httpx

from specpilot.records import MetricSnapshot

SPEC_ROUNDS = "spec_rounds"
SPEC_PROPOSED = "spec_proposed_tokens"
SPEC_ACCEPTED = "spec_accepted_tokens"
SPEC_COMMITTED = "spec_committed_tokens"
SPEC_POS = "spec_accepted_pos_"  # + str(i), i >= 1


class BackendError(RuntimeError):
    """An engine that would not start, answer or stop; the message says why and where to look."""


@dataclass(frozen=True)
class ModelFile:
    role: str  # "target" | "draft"
    path: str
    sha256: str | None
    bytes: int | None


@dataclass(frozen=True)
class Manifest:
    """The frozen description of one arm's engine (R6: freeze and record everything)."""

    engine: str
    engine_version: str
    endpoint: str
    models: tuple[ModelFile, ...]
    tokenizer_sha256: str | None
    launch: tuple[str, ...]  # the command line, or its llama-server equivalent
    speculative: dict[str, Any]
    hardware: dict[str, Any]
    notes: tuple[str, ...] = ()
    created_unix: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))


@runtime_checkable
class Backend(Protocol):
    """Start, stop, describe and scrape one engine; the load generator only sees ``endpoint``."""

    name: str

    @property
    def endpoint(self) -> str: ...

    def start(self, timeout_s: float = 120.0) -> None: ...

    def stop(self) -> None: ...

    def describe(self) -> Manifest: ...

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot: ...

    def response_extras(self, obj: dict[str, Any]) -> dict[str, Any]: ...


# -- facts about files and the machine ---------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _sha256(path: str, mtime: float, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_file(role: str, path: str | Path | None) -> ModelFile | None:
    """A model file (or directory: every file in it, hashed in name order) with its sha256."""
    if path is None:
        return None
    p = Path(path)
    if p.is_file():
        st = p.stat()
        return ModelFile(
            role, str(p.resolve()), _sha256(str(p.resolve()), st.st_mtime, st.st_size), st.st_size
        )
    if p.is_dir():
        h = hashlib.sha256()
        total = 0
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            st = f.stat()
            h.update(f.relative_to(p).as_posix().encode() + b"\0")
            h.update(_sha256(str(f.resolve()), st.st_mtime, st.st_size).encode())
            total += st.st_size
        return ModelFile(role, str(p.resolve()), h.hexdigest(), total)
    return ModelFile(role, str(path), None, None)  # a hub id or remote name: not hashable here


@functools.lru_cache(maxsize=16)
def gguf_tokenizer_sha256(path: str) -> str | None:
    """Hash of a GGUF's ``tokenizer.*`` metadata (tokens, merges, specials, chat template)."""
    try:
        import gguf
    except ImportError:
        return None
    reader = gguf.GGUFReader(path)
    h = hashlib.sha256()
    for key in sorted(k for k in reader.fields if k.startswith("tokenizer.")):
        h.update(key.encode() + b"\0")
        h.update(
            json.dumps(reader.fields[key].contents(), ensure_ascii=False, default=str).encode()
        )
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


@functools.lru_cache(maxsize=1)
def hardware_info() -> dict[str, Any]:
    """CPU model, cores, RAM, GPUs (nvidia-smi when present), OS and Python."""
    import psutil

    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info: dict[str, Any] = {
        "cpu_model": cpu,
        "cpu_logical_cores": os.cpu_count(),
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_bytes": psutil.virtual_memory().total,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "gpus": [],
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [
                    smi,
                    "--query-gpu=name,memory.total,driver_version",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
            for line in out.strip().splitlines():
                name, mem, driver = (x.strip() for x in line.split(","))
                info["gpus"].append(
                    {"name": name, "memory_bytes": int(float(mem)) * 2**20, "driver": driver}
                )
    return info


def process_memory(pid: int | None) -> dict[str, float]:
    """RSS of a process and its children, and its GPU memory when nvidia-smi can tell."""
    import psutil

    out: dict[str, float] = {}
    if pid is None:
        return out
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
        pids = {p.pid for p in procs}
        out["process_rss_bytes"] = float(sum(p.memory_info().rss for p in procs if p.is_running()))
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
                out["gpu_memory_used_bytes"] = sum(used) * 2**20
    return out


# -- running an engine as a subprocess -------------------------------------------------------------
def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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

    def start(self, timeout_s: float) -> None:
        fd, name = tempfile.mkstemp(prefix="specpilot-server-", suffix=".log")
        self.log_path = Path(name)
        env = {**os.environ, **(self.env or {})}
        with os.fdopen(fd, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.wait_healthy(timeout_s)

    def log_tail(self, n: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BackendError(
                    f"server exited with code {self.proc.returncode} before it was healthy; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + self.health, timeout=2.0).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise BackendError(
            f"server not healthy after {timeout_s:g}s; log {self.log_path}:\n{self.log_tail()}"
        )

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
        """Kill -9, as a crash would (for rollback drills and tests)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def get_text(url: str, timeout_s: float = 10.0) -> str:
    r = httpx.get(url, timeout=timeout_s)
    r.raise_for_status()
    return r.text


def snapshot(
    engine: str, metrics: dict[str, float], raw: str, run_id: str, arm: str, phase: str, label: str
) -> MetricSnapshot:
    return MetricSnapshot(
        run_id=run_id,
        arm=arm,
        phase=phase,
        label=label,
        t=time.perf_counter(),
        engine=engine,
        metrics=metrics,
        raw=raw,
    )


def spec_summary(
    engine: str,
    source: str,
    proposed: float | None,
    accepted: float | None,
    rounds: float | None,
    raw: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A per-request speculative summary in our definitions (bonus token counted in committed)."""
    out: dict[str, Any] = {
        "engine": engine,
        "source": source,
        "rounds": rounds,
        "proposed": proposed,
        "accepted": accepted,
    }
    if accepted is not None and rounds is not None:
        out["committed"] = accepted + rounds
        out["mean_accept_length"] = 1.0 + accepted / rounds if rounds else None
    if accepted is not None and proposed:
        out["acceptance_rate"] = accepted / proposed
    if raw is not None:
        out["raw"] = raw
    return out


class SubprocessLifecycle:
    """``start``/``stop``/``kill`` for a backend whose engine runs as ``command()`` in a subprocess.

    Subclasses provide ``endpoint`` and ``command()``, set ``self._server = None`` and may
    override ``start_timeout_s`` (how long loading the model may take).
    """

    _server: ServerProcess | None
    start_timeout_s: ClassVar[float] = 900.0

    @property
    def endpoint(self) -> str:
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout_s: float | None = None) -> None:
        self._server = ServerProcess(self.command(), self.endpoint)
        self._server.start(self.start_timeout_s if timeout_s is None else timeout_s)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (failure drills)."""
        if self._server is None:
            raise BackendError("not started")
        self._server.kill()
