"""Entry point of a llama.cpp server subprocess: ``python -m specpilot.backends.llamacpp_child
CONFIG_JSON`` serves until SIGTERM/SIGINT (``LlamaCppBackend`` starts and stops it)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    from specpilot.backends.llamacpp import LlamaCppConfig
    from specpilot.backends.process import die_with_parent

    die_with_parent()

    args = sys.argv[1:] if argv is None else argv
    cfg = LlamaCppConfig(**json.loads(args[0]))
    import xllamacpp as xl

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = xl.Server(cfg.common_params())
    print(f"llama.cpp serving on {server.listening_address}", flush=True)
    while not stop.wait(0.5):
        pass
    # llama-server stops its task loop on SIGTERM and exits without draining its slots;
    # xllamacpp's destructor waits for in-flight requests instead, which would make a restart
    # (the rollback drill) look slower than the real server's. Leave as llama-server does.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
