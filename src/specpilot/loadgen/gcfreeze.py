"""The collector held off a run's clock, once for every runner in flight in the process.

A full collection over a big heap (torch loaded) pauses every event loop of the process for
~0.1 s, which shows as dispatch lag and fake gaps. ``held()`` collects and freezes what is
alive when the first runner starts, and unfreezes when the last one ends: runners in threads
(the pilot's mirrored episodes) never take the freeze from one another, and a later runner's
collection does not pause the others mid-run.

    >>> with held():
    ...     with held():
    ...         inner = gc.get_freeze_count() > 0
    ...     still = gc.get_freeze_count() > 0
    >>> inner, still, gc.get_freeze_count()
    (True, True, 0)
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_LOCK = threading.Lock()
_HOLDERS = 0


@contextlib.contextmanager
def held() -> Iterator[None]:
    global _HOLDERS
    with _LOCK:
        if _HOLDERS == 0:
            gc.collect()
            gc.freeze()
        _HOLDERS += 1
    try:
        yield
    finally:
        with _LOCK:
            _HOLDERS -= 1
            if _HOLDERS == 0:
                gc.unfreeze()
