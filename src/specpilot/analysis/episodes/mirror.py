"""What a mirrored episode design (``episodes.design: mirrored``) did: every arm of an episode ran
at once, each scheduled request sent at one instant to a process of each arm. The pairs'
send times say how close "at once" was: the load generators run in one process on one clock
(``time.perf_counter``), so a pair's two send times compare directly.

    >>> import numpy as np
    >>> from types import SimpleNamespace as T
    >>> t = T(arm=np.array(["b", "b", "s", "s"]), request_id=np.array(["r1", "r2", "r1", "r2"]),
    ...       sent_t=np.array([10.0, 11.0, 10.002, 11.004]))
    >>> print(mirror_note(t, "b", ["s"], shared=False))
    mirrored replay: every arm of an episode at once; a pair's two requests were sent 3.0 ms apart at the median (95th percentile 3.9 ms, 2 pairs); the arms ran on machines or devices of their own
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

LATE_S = 0.05  # a pair sent further apart than this did not meet one moment's load


class _Table(Protocol):
    arm: np.ndarray
    request_id: np.ndarray
    sent_t: np.ndarray


def send_gaps(table: _Table, baseline: str, others: Sequence[str]) -> np.ndarray:
    """Seconds between the baseline's send of each scheduled request and each other arm's
    send of the same one (pairs where both were sent)."""
    if len(table.sent_t) != len(table.arm):
        return np.zeros(0)
    mine = table.arm == baseline
    at = dict(zip(table.request_id[mine].tolist(), table.sent_t[mine].tolist(), strict=True))
    out = []
    for arm in others:
        sel = table.arm == arm
        for rid, t in zip(table.request_id[sel].tolist(), table.sent_t[sel].tolist(), strict=True):
            b = at.get(rid)
            if b is not None and np.isfinite(b) and np.isfinite(t):
                out.append(abs(float(t) - float(b)))
    return np.asarray(out)


def mirror_note(table: _Table, baseline: str, others: Sequence[str], shared: bool) -> str:
    """The report's line on a mirrored design: how far apart the pairs were sent, and whether
    the arms shared a machine (``episodes.share_machine``: then they competed for it, and the
    comparison measured each arm beside the other)."""
    gaps = send_gaps(table, baseline, others)
    head = "mirrored replay: every arm of an episode at once"
    if gaps.size:
        head += (
            f"; a pair's two requests were sent {np.median(gaps) * 1e3:.1f} ms apart at the "
            f"median (95th percentile {np.percentile(gaps, 95) * 1e3:.1f} ms, {gaps.size} pairs)"
        )
        late = int(np.count_nonzero(gaps > LATE_S))
        if late:
            head += (
                f"; {late} pairs were sent more than {LATE_S * 1e3:.0f} ms apart (a run that "
                "started late: its arm's setup or first scrape took longer than the lead), "
                "so those pairs did not meet the same moment's load"
            )
    if shared:
        return head + (
            "; the arms shared one machine (episodes.share_machine): each was measured beside "
            "the other's load, not alone, and the capacity and rates are the shared machine's"
        )
    return head + "; the arms ran on machines or devices of their own"
