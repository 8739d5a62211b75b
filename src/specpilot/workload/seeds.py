"""Seeded random streams of a schedule: one generator per (seed, phase, purpose).

Every random choice of :func:`specpilot.workload.build_schedule` draws from its own stream, so
adding a stage or a phase does not shift the draws of the others, and no global state is used.

    >>> a, b = stream(7, 1, GROUPS), stream(7, 1, GROUPS)
    >>> a.random() == b.random(), stream(7, 1, LENGTHS).random() != stream(7, 1, GROUPS).random()
    (True, True)
"""

from __future__ import annotations

import zlib

import numpy as np

# Purposes (part of every stream's key; the values are part of the schedule format: keep them).
ARRIVALS, GROUPS, LENGTHS, SEEDS, STAGES, PROMPTS = range(6)


def stream(seed: int, *key: int) -> np.random.Generator:
    """The generator for ``SeedSequence([seed, *key])``."""
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


def stable_id(name: str) -> int:
    """A name as a stream key, the same in every process (unlike ``hash``)."""
    return zlib.crc32(name.encode("utf-8"))


def derived_seed(seed: int, *key: int) -> int:
    """One integer seed for a component that seeds itself (an arrival process)."""
    return int(np.random.SeedSequence([seed, *key]).generate_state(1)[0])
