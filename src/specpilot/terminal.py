"""One rule for progress output, used by every display (the pilot's status line, the load
run's progress bar): a live display only on a terminal outside CI; otherwise (``$CI`` set, or
stderr not a terminal: logs, pipes, tests) plain lines, one per event, so logs stay short and
readable. An explicit choice (``--quiet``, ``progress=False``) wins.

    >>> live(False), live(True)
    (False, True)

Standard library only: every layer may use it.
"""

from __future__ import annotations

import os
import sys


def live(requested: bool | None = None) -> bool:
    """Whether a display may redraw itself in place (``requested``: an explicit choice)."""
    if requested is not None:
        return requested
    return not os.environ.get("CI") and sys.stderr.isatty()
