"""Which paired requests count as one observation: the busy periods they shared on the server.

Requests that were on a server at the same time share its queue and its batches: a slow step,
a pause of the machine or a long prompt ahead of them delays all of them alike, so their
paired differences move together and more of them are not more evidence. Two pairs belong to
one cluster when their requests overlapped (sent to done, a failed request until it gave up)
in *either* arm's run of that phase and repetition; a cluster ends where both arms were idle.
The verdict's test counts clusters: a cluster-robust standard error with clusters - 1 degrees
of freedom and a sign-flip test that flips whole clusters (``analysis.paired``). Pairs
without send times (older files) are their own clusters: the independent-pairs test.

Measured (AMD EPYC AVX-512 kind, 2026-12-02, ``/tmp/demoB`` and ``/tmp/poissonA``, the A/A
control against the baseline): in a 6 s burst every request was on the server with another,
and the per-pair log differences moved together (+0.07 to +0.13 in one pilot, -0.15 to -0.02
in the other; lag-1 autocorrelation 0.50 and 0.75); counted as 8 and 13 independent pairs
they made the A/A control "slower" by 9.6% and "faster" by 7.6% (t = 14 and -5.3). Each burst
was one busy period: one observation, too few to give a direction.

    >>> import numpy as np
    >>> key = np.zeros(4, dtype=np.int64)
    >>> sent = np.array([0.0, 1.0, 5.0, 9.0])
    >>> busy_periods(key, sent, sent + 2.0, sent, sent + 0.5).tolist()  # 0-1 overlap in one arm
    [0, 0, 1, 2]
    >>> nan = np.full(4, np.nan)
    >>> busy_periods(key, nan, nan, nan, nan).tolist()  # no times: each pair its own
    [0, 1, 2, 3]
"""

from __future__ import annotations

import numpy as np

from specpilot.analysis import stats


def _starts(key: np.ndarray, sent: np.ndarray, done: np.ndarray) -> np.ndarray:
    """Per row (already ordered by run, then send time): does a busy period start here?"""
    n = key.size
    known = np.isfinite(sent)
    end = np.where(np.isfinite(done), done, np.where(known, sent, -np.inf))
    new = np.ones(n, dtype=bool)
    edges = np.flatnonzero(np.diff(key)) + 1
    for lo, hi in zip(np.r_[0, edges], np.r_[edges, n], strict=True):
        if hi - lo < 2:
            continue
        busy_until = np.maximum.accumulate(end[lo:hi])[:-1]
        new[lo + 1 : hi] = ~known[lo + 1 : hi] | (sent[lo + 1 : hi] > busy_until)
    return new


def busy_periods(
    key: np.ndarray,
    sent_b: np.ndarray,
    done_b: np.ndarray,
    sent_c: np.ndarray,
    done_c: np.ndarray,
) -> np.ndarray:
    """A cluster label (0, 1, ...) per pair: ``key`` names the run (repetition and phase) the
    pair was measured in; ``sent_*`` / ``done_*`` the baseline's and candidate's request times
    (NaN: unknown). Pairs are ordered by the baseline's send time within a run (both arms
    replay one schedule, so the order is the same in both)."""
    n = key.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order_key = np.where(np.isfinite(sent_b), sent_b, np.inf)
    order = np.lexsort((np.arange(n), order_key, key))
    k = key[order]
    new = _starts(k, sent_b[order], done_b[order]) & _starts(k, sent_c[order], done_c[order])
    new[0] = True
    labels = np.empty(n, dtype=np.int64)
    labels[order] = np.cumsum(new) - 1
    return labels


def cluster_sums(labels: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per cluster present in ``labels``: the sum of ``values`` (rows: pairs; 1-D or 2-D)."""
    _, inv = np.unique(labels, return_inverse=True)
    g = int(inv.max()) + 1 if inv.size else 0
    if values.ndim == 1:
        return np.bincount(inv, weights=values, minlength=g)
    return np.stack(
        [np.bincount(inv, weights=values[:, j], minlength=g) for j in range(values.shape[1])],
        axis=1,
    )


def min_clusters(alpha: float) -> int:
    """The fewest clusters whose sign-flip test can reach ``alpha`` at all (6 at 0.05).

    >>> min_clusters(0.05), min_clusters(0.01)
    (6, 8)
    """
    g = 2
    while stats.sign_flip_min_p(g) >= alpha:
        g += 1
    return g


def queued_short(clusters: int | None, fewest: int | None, both_ok: int) -> bool:
    """The cell's pairs fell in fewer busy periods than a direction needs (and fewer than its
    pairs: the queue, not the pair count, is what it lacks)."""
    return clusters is not None and fewest is not None and 0 < clusters < min(fewest, both_ok)


def needs(
    pairs_needed: int | None,
    clusters: int | None,
    fewest: int | None,
    both_ok: int,
    episodes_needed: int | None = None,
    processes_needed: int | None = None,
    episodic: bool = False,
) -> str:
    """What an insufficient cell lacks, in words (the verdict and the report both say it). In
    the episode design (``episodes_needed`` given, or ``clusters`` counting episodes) in
    episodes per level, the unit the pilot repeats.

    >>> needs(24, 1, 6, 8)
    '8 pairs in 1 busy period (requests on the server together move as one); a decision needs at least 6 busy periods: a lower load, a longer phase or repetitions'
    >>> needs(24, 9, 6, 8), needs(24, 1, 6, 1)
    ('a decision needs about 24 both-ok pairs', 'a decision needs about 24 both-ok pairs')
    >>> needs(80, 12, 6, 40, episodes_needed=30)
    'about 30 episodes per level would decide it at the effect and spread measured (this cell has 12)'
    >>> needs(80, 12, 6, 40, processes_needed=9, episodic=True)
    'more episodes alone would not decide it: the processes differ, and that spread shrinks only with more of them; about 9 processes per arm (at the episodes each serves now) would'
    """
    if episodes_needed is not None:
        return (
            f"about {episodes_needed} episodes per level would decide it at the effect and "
            f"spread measured (this cell has {clusters})"
        )
    if processes_needed is not None:
        return (
            "more episodes alone would not decide it: the processes differ, and that spread "
            f"shrinks only with more of them; about {processes_needed} processes per arm (at "
            "the episodes each serves now) would"
        )
    if episodic:
        return (
            "no number of episodes decides it at the effect and spread measured (the effect "
            "sits where neither a direction nor the equivalence margin can be shown, or the "
            "processes' spread would need many more of them)"
        )
    if queued_short(clusters, fewest, both_ok):
        periods = "busy period" if clusters == 1 else "busy periods"
        return (
            f"{both_ok} pairs in {clusters} {periods} (requests on the server together move "
            f"as one); a decision needs at least {fewest} busy periods: a lower load, a longer "
            "phase or repetitions"
        )
    if pairs_needed is None:
        return "no number of pairs decides it while the drift between arm runs is this large"
    return f"a decision needs about {pairs_needed} both-ok pairs"


__all__ = ["busy_periods", "cluster_sums", "min_clusters", "needs", "queued_short"]
