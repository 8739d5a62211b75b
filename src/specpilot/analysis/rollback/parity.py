"""Post-rollback parity: after the rollback, does the arm with speculation switched off serve like the baseline?

vLLM's own issue threads show that "k = 0" in a dynamic speculation schedule is not the same
as no speculation (users measured a 21-52% tax), and a restart can come back in another state
(cold caches, another compile). So the drill's requests served while the switch was in force
are paired with the baseline's requests for the same prompts (the drill replays a measured
phase: ``drill-000012`` is ``peak-000012``'s prompt at the same offset) and compared by the
geometric mean of per-pair E2E ratios with an exact sign-flip p and a t interval.

``parity``: the interval lies inside +-``margin`` (rolled back means back to baseline); the
analysis passes its own settings (``verdict.equivalence_margin``, ``ci_level``,
``verdict.min_pairs``: ``drill_parity``), so ``specpilot report --config`` changes them here too;
``differs``: the sign-flip p is below ``alpha`` and the interval is beyond the margin;
``insufficient``: fewer than ``min_pairs`` pairs, or neither. The restart's own cost
(interruption) is the drill record's; ``weigh`` sets it against the measured gain.

    >>> from specpilot.records import DrillRecord, RequestRecord
    >>> def rec(arm, rid, e2e):
    ...     return RequestRecord("r", arm, rid.split("-")[0], "g", rid, 0.0, "ok", prompt_id=rid[-2:],
    ...                          sent_t=0.0, done_t=e2e)
    >>> base = [rec("b", f"peak-0000{i:02d}", 1.0 + i / 100) for i in range(10)]
    >>> drill = [rec("s", f"drill-0000{i:02d}", 1.0 + i / 100) for i in range(10)]
    >>> c = post_rollback(drill, base, "s", "b", in_force_t=-1.0, back_t=None, margin=0.1,
    ...                   alpha=0.05, min_pairs=8)
    >>> c.pairs, c.outcome, round(c.ratio, 3)
    (10, 'parity', 1.0)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from specpilot.analysis.base.stats import sign_flip_p, t_interval
from specpilot.analysis.comparison.paired import PairedComparison
from specpilot.analysis.config import AnalysisConfig
from specpilot.records import DRILL_PHASE, DrillRecord, PilotData, RequestRecord


@dataclass(frozen=True)
class RollbackParity:
    arm: str
    reference_arm: str
    pairs: int
    ratio: float | None  # geometric mean of drill E2E / baseline E2E, same prompts
    ci: tuple[float, float] | None
    p: float | None
    outcome: str  # parity | differs | insufficient
    text: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _suffix(request_id: str) -> str:
    return request_id.rsplit("-", 1)[-1]


def _e2e(r: RequestRecord) -> float | None:
    if r.status != "ok" or r.sent_t is None or r.done_t is None or r.done_t <= r.sent_t:
        return None
    return r.done_t - r.sent_t


def post_rollback(
    drill: Sequence[RequestRecord],
    reference: Sequence[RequestRecord],
    arm: str,
    reference_arm: str,
    *,
    in_force_t: float | None,
    back_t: float | None,
    margin: float,
    alpha: float,
    min_pairs: int,
) -> RollbackParity:
    """Pair the drill requests sent while the rollback was in force with the reference arm's
    requests for the same prompt and offset; see the module doc for the outcomes."""
    logs = _rolled_back_logs(drill, reference, in_force_t, back_t)
    n = len(logs)
    if n < 2:
        return RollbackParity(
            arm,
            reference_arm,
            n,
            None,
            None,
            None,
            "insufficient",
            f"{n} request(s) served while rolled back pair with the baseline's: no comparison "
            "(the drill phase must outlast the switch being in force: a longer drill.phase, "
            "a shorter switch_after_s, or a longer hold_s)",
        )
    d = np.asarray(logs)
    est, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    lo, hi = t_interval(est, se, n - 1, 1.0 - alpha)
    p = sign_flip_p(d)
    ratio, ci = math.exp(est), (math.exp(lo), math.exp(hi))
    band = (math.log(1 - margin), math.log(1 + margin))
    if n >= min_pairs and band[0] <= lo and hi <= band[1]:
        outcome = "parity"
    elif n >= min_pairs and p < alpha and (hi < band[0] or lo > band[1]):
        outcome = "differs"
    else:
        outcome = "insufficient"
    what = {
        "parity": f"back to the baseline's latency (within +-{margin:.0%})",
        "differs": "not back to the baseline's latency: rolling back does not restore it",
        "insufficient": f"not decided ({n} pairs; a decision needs >= {min_pairs} and an "
        f"interval inside or beyond +-{margin:.0%})",
    }[outcome]
    text = (
        f"after the rollback {arm} vs {reference_arm}, same prompts: E2E x{ratio:.2f} "
        f"({1 - alpha:.0%} CI {ci[0]:.2f}-{ci[1]:.2f}, {n} pairs, sign-flip p {p:.3f}): {what}"
    )
    return RollbackParity(arm, reference_arm, n, ratio, ci, p, outcome, text)


def _rolled_back_logs(
    drill: Sequence[RequestRecord],
    reference: Sequence[RequestRecord],
    in_force_t: float | None,
    back_t: float | None,
) -> list[float]:
    """log(E2E drill / E2E reference) of each drill request sent while the rollback was in
    force (and done before the switch back), paired by prompt and offset."""
    ref = {
        (_suffix(r.request_id), r.prompt_id): x
        for r in reference
        if r.phase != DRILL_PHASE and not r.warmup and (x := _e2e(r)) is not None
    }
    logs = []
    for r in drill:
        if r.phase != DRILL_PHASE or r.sent_t is None or in_force_t is None:
            continue
        if r.sent_t < in_force_t or (back_t is not None and (r.done_t or r.sent_t) > back_t):
            continue
        x, y = _e2e(r), ref.get((_suffix(r.request_id), r.prompt_id))
        if x is not None and y is not None:
            logs.append(math.log(x / y))
    return logs


def weigh(
    downtime_s: float | None, interrupted: int, gain: float | None, rate_rps: float | None
) -> str:
    """One sentence setting the rollback's cost against the measured gain: the seconds the
    service is down and the requests that fail, and how long the gain takes to pay them back
    (gain: the fraction of task time saved per request, e.g. 0.12; None: not measured)."""
    if downtime_s is None:
        return "the rollback was not measured"
    cost = f"a rollback costs {downtime_s:.0f} s of switching and {interrupted} failed request(s)"
    if gain is None or gain <= 0 or not rate_rps:
        return cost + "; no measured gain to weigh it against"
    # requests needed for the saved time to add up to the downtime
    per_request = gain  # fraction of one request's time saved
    n = downtime_s / per_request if per_request else math.inf
    return (
        f"{cost}; at {gain:.0%} saved per request, the gain takes about {n / rate_rps / 60:.0f} "
        f"min of traffic at {rate_rps:.2f} req/s to make up that downtime in request-seconds"
    )


def drill_parity(
    drills: Sequence[DrillRecord],
    requests: Sequence[RequestRecord],
    baseline: str,
    *,
    margin: float,
    alpha: float,
    min_pairs: int,
) -> dict[str, RollbackParity]:
    """``post_rollback`` of every done drill against the baseline's run of its source phase."""
    out = {}
    for d in drills:
        phase = (d.detail or {}).get("source_phase")
        if d.status != "done" or d.in_force_t is None or phase is None:
            continue
        drill = [r for r in requests if r.arm == d.arm and r.run_id == d.run_id]
        ref = [r for r in requests if r.arm == baseline and r.phase == phase]
        out[d.arm] = post_rollback(
            drill,
            ref,
            d.arm,
            baseline,
            in_force_t=d.in_force_t,
            back_t=d.switched_back_t,
            margin=margin,
            alpha=alpha,
            min_pairs=min_pairs,
        )
    return out


_FIELDS = ("run_id", "arm", "phase", "task_group", "request_id", "scheduled_t", "status")


def records_of_columns(cols: dict[str, Any], keep: np.ndarray) -> list[RequestRecord]:
    """The rows ``keep`` of columnar requests (``PilotData.request_columns``) as records with
    the fields the parity reads (NaN -> None)."""

    def val(name: str, i: int) -> Any:
        x = cols[name][i] if name in cols else None
        return None if isinstance(x, float) and math.isnan(x) else x

    return [
        RequestRecord(
            **{f: val(f, int(i)) for f in _FIELDS},
            prompt_id=val("prompt_id", int(i)) or "",
            warmup=bool(val("warmup", int(i))),
            sent_t=val("sent_t", int(i)),
            done_t=val("done_t", int(i)),
        )
        for i in np.flatnonzero(keep)
    ]


def parity_of(data: PilotData, baseline: str, cfg: AnalysisConfig) -> dict[str, RollbackParity]:
    """``drill_parity`` of a pilot's drills with the analysis config's thresholds (the
    equivalence margin, the CI level, min_pairs), from records or columns."""
    if not any(d.status == "done" for d in data.drills):
        return {}
    reqs = data.requests
    if data.request_columns is not None:
        cols = data.request_columns
        keep = (cols["phase"] == DRILL_PHASE) | (cols["arm"] == baseline)
        reqs = records_of_columns(cols, np.asarray(keep, dtype=bool))
    v = cfg.verdict
    return drill_parity(
        data.drills,
        reqs,
        baseline,
        margin=v.equivalence_margin,
        alpha=1.0 - cfg.ci_level,
        min_pairs=v.min_pairs,
    )


def drill_outcomes(
    drills: Sequence[DrillRecord],
    parity: Mapping[str, RollbackParity],
    comparisons: Sequence[PairedComparison],
    candidates: Sequence[str],
) -> list[dict[str, Any]]:
    """Every drill as the report shows it: its record, the post-rollback parity (``parity``)
    and ``weigh``'s sentence against the gain its pooled cell measured at the drill's source
    phase (a gain only where that cell says "faster"); a candidate with no drill record gets a
    row saying so."""
    out = [dataclasses.asdict(d) for d in drills]
    for d in out:
        if d.get("status") != "done":
            continue
        detail = d.get("detail") or {}
        if d["arm"] in parity:
            d["detail"] = {**detail, "post_rollback": parity[d["arm"]].to_dict()}
        cell = next(
            (
                c
                for c in comparisons
                if c.candidate_arm == d["arm"]
                and c.task_group == "*"
                and c.phase == detail.get("source_phase")
            ),
            None,
        )
        est = cell.task_rel_change.estimate if cell is not None else None
        gain = -est if est is not None and cell is not None and cell.outcome == "faster" else None
        d["weighed"] = weigh(
            d.get("switch_in_force_s"),
            int(d.get("interrupted") or 0),
            gain,
            cell.offered_rate if cell is not None else None,
        )
    drilled = {d.arm for d in drills}
    why = "no drill record in the pilot file"
    out += [
        {"arm": arm, "status": "not_drilled", "kind": "none", "reason": why}
        for arm in candidates
        if arm not in drilled
    ]
    return out
