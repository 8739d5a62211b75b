"""The body guard never holds the event loop: while hostile bodies are checked, ``/health``
and a running stream keep answering within 50 ms.

The server runs in a process of its own (``tests/tiny_server.py``) and the hostile bodies go
through ``curl``, so neither shares the timing client's interpreter. The bodies are the
probe's: an unterminated string of 2 million escaped quotes (4 MiB; the regex guard it replaced
held the loop for hours at that size, 5 s at 24 KB), 4 Mi brackets, 1.4 million empty arrays
(json.loads took 0.2-0.9 s on them, all on the loop) and the same escapes in UTF-16. A machine
that pauses the process for a while (a shared VM) can spoil one attempt: the best of three is
kept; a guard that holds the loop fails all three.

The stream's own pace is a token step of the tiny model (22-26 ms on the AMD EPYC AVX2-only
kind, under 10 ms on the AVX-512 kind), so its gaps are read against the worst gap the same
stream showed in the 0.3 s before the bodies: the loop may add at most 50 ms to it. A valid
4 MiB string costs ``json.loads`` 8-21 ms there, on the loop as in every FastAPI server (vLLM's
too), and is not a guard's to remove.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from test_server import MODEL
from tiny_server import running

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
LIMIT_S = 0.050
HOSTILE = {
    "escapes": b'"' + b'\\"' * 2_000_000,
    "brackets": b"[" * (4 << 20),
    "empty arrays": b"[" + b"[]," * 1_390_000 + b"[]]",
    "utf-16 escapes": ('"' + '\\"' * 1_000_000).encode("utf-16-le"),
}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running() as base:
        yield base


class Watch:
    """/health polled and a stream read in threads, each answer's time on one clock."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.health: list[tuple[float, float]] = []  # (sent, took)
        self.chunks: list[float] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f) for f in (self._poll, self._stream)]

    def _poll(self) -> None:
        with httpx.Client(timeout=30) as c:
            while not self.stop.is_set():
                t = time.perf_counter()
                c.get(self.base + "/health")
                self.health.append((t, time.perf_counter() - t))
                time.sleep(0.003)

    def _stream(self) -> None:
        body = {
            "model": MODEL,
            "stream": True,
            "ignore_eos": True,
            "max_tokens": 200,
            "messages": [{"role": "user", "content": "hi"}],
        }
        while not self.stop.is_set():  # one stream after another until the watch ends
            url = self.base + "/v1/chat/completions"
            with httpx.stream("POST", url, json=body, timeout=30) as r:
                for line in r.iter_lines():
                    if line.startswith("data:"):
                        self.chunks.append(time.perf_counter())

    def __enter__(self) -> Watch:
        for t in self.threads:
            t.start()
        while len(self.chunks) < 5:  # the stream is running
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def worst(self, t0: float, t1: float) -> tuple[float, float, int]:
        """(the slowest /health sent in [t0, t1], the longest gap between stream chunks that
        overlaps it, how many /health were sent in it)."""
        health = [took for sent, took in self.health if t0 <= sent <= t1]
        gaps = [
            b - a for a, b in zip(self.chunks, self.chunks[1:], strict=False) if b >= t0 and a <= t1
        ]
        return max(health, default=0.0), max(gaps, default=0.0), len(health)


def _curl(base: str, body_file: Path) -> str:
    out = subprocess.run(
        ["curl", "-s", "--max-time", "20", "-H", "Content-Type: application/json",
         "--data-binary", f"@{body_file}", base + "/v1/chat/completions"],
        capture_output=True, check=False,
    )  # fmt: skip
    return out.stdout.decode(errors="replace")


def test_hostile_bodies_do_not_hold_health_or_a_stream(url: str, tmp_path: Path) -> None:
    files = {}
    for name, body in HOSTILE.items():
        files[name] = tmp_path / name.replace(" ", "_")
        files[name].write_bytes(body)
    attempts = []
    for _ in range(3):
        with Watch(url) as w:
            q0 = time.perf_counter()
            time.sleep(0.3)
            t0 = time.perf_counter()
            answers = {name: _curl(url, f) for name, f in files.items()}
            t1 = time.perf_counter()
            time.sleep(0.05)
        assert all('"error"' in a for a in answers.values()), answers  # each one refused
        _, quiet, _ = w.worst(q0, t0 - 0.03)  # the stream's own pace, before the bodies
        health, gap, polls = w.worst(t0, t1)
        attempts.append((max(health, gap - quiet), health, gap, quiet, polls, t1 - t0))
        if max(health, gap - quiet) <= LIMIT_S:
            break
    best = min(attempts)
    print(f"best of {len(attempts)}: {best}")
    _, health, gap, quiet, polls, took = best
    assert polls >= 5, f"too few /health probes overlapped the hostile bodies: {attempts}"
    assert health <= LIMIT_S and gap - quiet <= LIMIT_S, (
        f"while {len(HOSTILE)} hostile bodies were checked ({took:.2f} s), /health took up to "
        f"{health * 1000:.0f} ms and the stream paused {gap * 1000:.0f} ms against "
        f"{quiet * 1000:.0f} ms before them (best of {len(attempts)}: {attempts})"
    )
