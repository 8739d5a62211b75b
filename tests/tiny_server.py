"""``python tests/tiny_server.py PORT``: the specpilot server over the tests' tiny random engine
(SmolLM2's tokenizer, no draft, one torch thread) in a process of its own, for tests that time
the server from outside (a client in the same process would share its interpreter);
``running()`` starts it from a test and yields its URL once ``/health`` answers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
import uvicorn

from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.serve import ServerConfig, create_app
from test_server import MODEL, TOKEN, free_port, make_engine  # this folder: on sys.path


@contextlib.contextmanager
def running() -> Iterator[str]:
    """This script in a process of its own on a free loopback port; its URL once healthy."""
    port = free_port()
    env = {**os.environ, "SPECPILOT_CALIBRATION": "skip"}
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        else:
            pytest.fail("the tiny server did not come up in 60 s")
        yield base
    finally:
        proc.kill()
        proc.wait(10)


if __name__ == "__main__":
    torch.set_num_threads(1)
    engine = make_engine(load_tokenizer(default_target_path()), draft=False)
    app = create_app(ServerConfig(model_name=MODEL, admin_token=TOKEN), engine=engine)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
