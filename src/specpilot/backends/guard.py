"""``python -m specpilot.backends.guard PARENT_PID -- CMD ...``: run an engine we did not write
(vLLM, SGLang) so that it cannot outlive the pilot that started it.

specpilot's own servers stop themselves when their starter dies (``process.die_with_parent``);
a foreign server cannot be told to. A killed or SIGTERMed pilot otherwise leaves ``vllm serve``
holding both cores for every later run. The guard starts ``CMD`` as its child, forwards SIGTERM
and SIGINT to it, and once ``PARENT_PID`` is gone terminates it (SIGKILL after a grace period);
it exits with the child's code. ``ServerProcess`` signals the whole process group, so a normal
stop reaches the engine directly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

GRACE_S = 15.0


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m specpilot.backends.guard PARENT_PID -- CMD ...", file=sys.stderr)
        return 2
    parent, cmd = int(argv[0]), argv[2:]
    child = subprocess.Popen(cmd)

    def forward(sig: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while child.poll() is None:
        if os.getppid() != parent:  # the pilot is gone: so is its engine
            child.terminate()
            try:
                child.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
            break
        time.sleep(0.5)
    return child.wait()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
