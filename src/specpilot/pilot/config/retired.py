"""The keys of measurement designs retired for the episode design (issue 47), each refused with
its fix, and ``design: mirrored`` written at the top level (it is ``episodes.design``)."""

from __future__ import annotations

from typing import Any

MIRRORED_FIX = (
    "mirrored replay is an episode design: write it under episodes: -> episodes: {design: mirrored}"
)
# keys of the measurement designs retired for the episode design (issue 47): each with its fix
RETIRED = {
    "design": "every pilot runs the episode design (pilot.design): every arm's processes up at "
    "once, each load level cut into episodes replayed on every arm in a balanced order -> remove "
    "design:, and size the design with episodes: {per_level, processes} (examples/pilot-"
    "default.yaml); arms whose engines cannot be up together (several servers on one GPU) fit "
    "with a smaller memory share each (vLLM's gpu_memory_utilization), or by url: on devices of "
    "their own",
    "repetitions": "the episode design repeats engine processes as episodes.processes -> "
    "remove repetitions: and set episodes.processes",
}


def retired(data: dict[str, Any]) -> tuple[str, str, str] | None:
    """(the key, what is wrong, the fix) of the first retired key in ``data``; None: none.

    >>> retired({"design": "mirrored"})[1]
    "'mirrored': at the top level"
    >>> retired({"repetitions": 3})[1]
    '3: a retired key'
    """
    if data.get("design") in ("mirrored", "turns"):
        return "design", f"{data['design']!r}: at the top level", MIRRORED_FIX
    for key, fix in RETIRED.items():
        if key in data:
            what = "a measurement design that was retired" if key == "design" else "a retired key"
            return key, f"{data[key]!r}: {what}", fix
    return None
