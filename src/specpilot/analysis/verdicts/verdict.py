"""The service-level verdict from the group verdicts, and the PILOT_HYPOTHESIS flag (rules 5-6
of ``analysis.verdicts.decision``'s docstring; rules 1-4, each group's, are held there).

    >>> from specpilot.analysis.config import VerdictConfig
    >>> v = decide(DecisionInputs("spec", "base", None, [], [], [], [], []), VerdictConfig())
    >>> v.verdict, v.pilot_hypothesis
    ('UNDECIDED', True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from specpilot.analysis.base.columns import ALL
from specpilot.analysis.config import VerdictConfig
from specpilot.analysis.verdicts.decision import (
    ADOPT,
    NO,
    UNDECIDED,
    WINDOWS,
    Condition,
    DecisionInputs,
    GroupVerdict,
    Verdict,
    group_verdict,
)
from specpilot.analysis.verdicts.undecided import closest_text
from specpilot.analysis.verdicts.window import PAYS

BASELINE_ON_TIME_FLOOR = 0.5  # below this at the lowest load, the SLOs are not the service's


def hypothesis_reasons(inp: DecisionInputs, cfg: VerdictConfig) -> list[str]:
    """Why the verdict can only be a pilot hypothesis (empty: it is a decision): what was
    measured on (``_measured_on``), then what the cells hold (``_cell_reasons``)."""
    return _measured_on(inp, cfg) + _cell_reasons(inp, cfg)


def _measured_on(inp: DecisionInputs, cfg: VerdictConfig) -> list[str]:
    """The traffic, the steady state, the baseline's own SLOs, the A/A control and the
    machine's sharing."""
    out = []
    rep = (
        cfg.representative_traffic if cfg.representative_traffic is not None else inp.representative
    )
    if not rep:
        out.append(
            "traffic not representative of the service (its own prompts replayed on its own "
            "trace's arrivals; set representative_traffic: true in the pilot config when they are)"
        )
    if inp.steady_requests == 0:
        out.append("only cold-start requests were measured: no steady state")
    low = inp.baseline_lowest
    if low is not None and low[2] < BASELINE_ON_TIME_FLOOR:
        out.append(
            f"the baseline itself is on time for only {low[2]:.0%} of requests at {low[0]} "
            f"({low[1]:.3g} req/s, the lowest load): these SLOs are not ones the current service "
            "meets on this machine, so on-time and goodput figures say little; set the groups' "
            "SLOs from the baseline's off-peak latency (slo: in the workload)"
        )
    if inp.aa is None:
        out.append(
            "no A/A control: nothing shows that this measurement finds no difference where "
            "there is none (episodes.planted gives one, the planted arm less its known "
            "factor; or add an arm with role: control, the baseline's config again)"
        )
    elif not inp.aa.stable:
        out.append("measurement unstable: " + inp.aa.text)
    if inp.contended:
        out.append(
            f"measured on a machine shared unevenly: {'; '.join(inp.contended[:3])}"
            + (f"; {len(inp.contended) - 3} more" if len(inp.contended) > 3 else "")
            + " (load that hit one arm's run of a phase and not the others': drift the "
            "episodes' balanced order did not spread; rerun on an idle machine)"
        )
    return out


def _cell_reasons(inp: DecisionInputs, cfg: VerdictConfig) -> list[str]:
    """Groups with no pairs, undecided cells and what would decide the closest, decided cells
    on few pairs or with a wide interval."""
    out = []
    seen = {c.task_group for c in inp.comparisons if c.task_group != ALL}
    for g in sorted(set(cfg.required_groups) | set(inp.groups_expected)):
        if g not in seen:
            out.append(f"group {g} has no paired requests with the baseline: missing")
    cells = [c for c in inp.comparisons if c.task_group != ALL]
    short = [c for c in cells if c.outcome == "insufficient"]
    if short:
        out.append(
            f"{len(short)} of {len(cells)} cells (group x load level) undecided"
            + closest_text(short, inp.per_level, "cell")
        )
    few = [c for c in cells if c.outcome != "insufficient" and c.pairs < cfg.min_requests_per_group]
    if few:
        out.append(
            f"{len(few)} decided cells have fewer than {cfg.min_requests_per_group} paired requests"
        )
    wide = [
        c
        for c in cells
        if c.outcome != "insufficient"
        and c.task_rel_change.low is not None
        and c.task_rel_change.high is not None
        and (c.task_rel_change.high - c.task_rel_change.low) / 2 > cfg.max_ci_halfwidth
    ]
    if wide:
        out.append(
            f"{len(wide)} decided cells have a task-time CI half-width above "
            f"{cfg.max_ci_halfwidth:.0%}: too few samples for a firm figure"
        )
    return out


def decide(inp: DecisionInputs, cfg: VerdictConfig) -> Verdict:
    """Group verdicts, then the service's (module docstring of ``analysis.verdicts.decision``)."""
    groups = sorted(
        {c.task_group for c in inp.comparisons if c.task_group != ALL}
        | {g.task_group for g in inp.gates}
    )
    gvs = [group_verdict(inp, g, cfg) for g in groups]
    adopted = tuple(g.task_group for g in gvs if g.verdict == ADOPT)
    windows = tuple(g.task_group for g in gvs if g.verdict == WINDOWS)
    rejected = tuple(g.task_group for g in gvs if g.verdict == NO)
    open_ = tuple(g.task_group for g in gvs if g.verdict == UNDECIDED)
    pooled = group_verdict(inp, ALL, cfg)
    reasons = hypothesis_reasons(inp, cfg)
    rng: tuple[float, float] | None = None
    if adopted:
        verdict, neck = ADOPT, None
        rng, summary = _adopted(gvs, adopted, windows)
    elif windows:
        verdict, neck = WINDOWS, None
        parts = [_window_text(g) for g in gvs if g.verdict == WINDOWS]
        summary = "adopt only " + "; ".join(parts)
    else:
        verdict, neck = _not_adopted(gvs, pooled)
        summary = (
            f"undecided: {neck.removeprefix('undecided: ')}"
            if verdict == UNDECIDED
            else f"do not adopt now; fix first: {neck}"
        )
    if rejected and verdict != NO:
        summary += f"; not for {', '.join(rejected)}"
    if open_ and len(open_) < len(gvs):
        summary += f"; undecided for {', '.join(open_)}"
    conds = [
        c
        for g in gvs
        for c in g.conditions
        if not c.holds or c.kind in ("quality_gate", "e2e_change")
    ]
    return Verdict(
        candidate_arm=inp.candidate_arm,
        baseline_arm=inp.baseline_arm,
        alternative_arm=inp.alternative_arm,
        verdict=verdict,
        pilot_hypothesis=bool(reasons),
        hypothesis_reasons=tuple(reasons),
        groups_adopted=adopted,
        groups_in_windows=windows,
        groups_rejected=rejected,
        load_range_rps=rng,
        bottleneck=neck,
        summary=summary + (" (PILOT_HYPOTHESIS)" if reasons else ""),
        groups=(*gvs, pooled),
        conditions=tuple(conds),
        aa_control=inp.aa.text if inp.aa is not None else "no A/A control arm in this pilot",
    )


def _adopted(
    gvs: Sequence[GroupVerdict], adopted: tuple[str, ...], windows: tuple[str, ...]
) -> tuple[tuple[float, float], str]:
    """Some group adopted: the load range over the groups' ranges, and the summary."""
    lo = min(g.load_range_rps[0] for g in gvs if g.load_range_rps)
    hi = max(g.load_range_rps[1] for g in gvs if g.load_range_rps)
    summary = f"adopt for {', '.join(adopted)} at {_range(lo, hi)}"
    if windows:
        summary += f"; only in windows for {', '.join(windows)}"
    return (lo, hi), summary


def _not_adopted(gvs: Sequence[GroupVerdict], pooled: GroupVerdict) -> tuple[str, str]:
    """No group adopted, none in windows: DO_NOT_ADOPT with its measured reason, or UNDECIDED
    where nothing was decided (pooled undecided too, or paying pooled but for no one group)."""
    quality = [g for g in gvs if (g.bottleneck or "").startswith("quality:")]
    if quality and len(quality) == len(gvs):
        return NO, _quality_neck(quality)
    if all(g.verdict == UNDECIDED for g in gvs):  # none at all: undecided too
        need = next(
            (g.bottleneck for g in gvs if g.bottleneck),
            pooled.bottleneck or "undecided: nothing was measured",
        )
        if pooled.verdict == NO:  # measured pooled: a reason, not a lack of evidence
            return NO, (pooled.bottleneck or need) + " (all groups pooled; per group: undecided)"
        # undecided pooled too, or it pays pooled: not enough for any one group (R7)
        neck = need + (" (per group)" if gvs else "")
        if pooled.verdict in (ADOPT, WINDOWS):
            neck += (
                f"; pooled over groups speculation {pooled.window}: measure per group "
                "before switching it on"
            )
        return UNDECIDED, neck
    neck = (
        pooled.bottleneck
        or next((g.bottleneck for g in gvs if g.bottleneck), None)
        or "no measured gain"
    )
    if quality:
        neck = f"quality gate failed for {', '.join(g.task_group for g in quality)}; {neck}"
    return NO, neck


def _quality_neck(quality: Sequence[GroupVerdict]) -> str:
    """Every group failed its quality gate: the reason once where it is one (a compatibility
    regression), else each group's."""
    why = {g.task_group: (g.bottleneck or "")[len("quality: ") :] for g in quality}
    if len(set(why.values())) == 1:
        return f"quality gate failed for every group ({next(iter(why.values()))})"
    return (
        "quality gate failed for every group ("
        + "; ".join(f"{g}: {w}" for g, w in why.items())
        + ")"
    )


def _window_text(g: GroupVerdict) -> str:
    if g.below_rps is not None and g.pays_up_to_rps is not None:
        return (
            f"{g.task_group}: pays at {g.pays_up_to_rps:.3g} req/s, not at {g.below_rps:.3g}; "
            "not measured between"
        )
    return f"{g.task_group} in {', '.join(g.windows)}"


def with_triggers(v: Verdict, triggers: list[dict]) -> Verdict:
    """The verdict with its rollback triggers attached."""
    return replace(v, rollback_triggers=tuple(triggers))


def _range(lo: float, hi: float) -> str:
    """A load range in words: one level is not a range (``0.283-0.283 req/s``)."""
    return f"{lo:.3g} req/s" if lo == hi else f"{lo:.3g}-{hi:.3g} req/s"


def validation_arm(v: Verdict, rates: Sequence[float]) -> Verdict:
    """A synthetic-acceptance arm (the engine accepts drafts at ``rates`` whatever the target
    says: invalid text by design) is a check of the quality gates, never a candidate: its
    verdict is DO_NOT_ADOPT whatever its speed, and the headline says so first."""
    why = (
        f"validation arm: synthetic acceptance {list(rates)} (the text is invalid by design; "
        "it checks that the quality gates say no, and is never adopted)"
    )
    gates = v.bottleneck or ""
    return replace(
        v,
        verdict=NO,
        groups_adopted=(),
        groups_in_windows=(),
        load_range_rps=None,
        bottleneck=why + (f"; {gates}" if gates else ""),
        summary="never adopted: " + why,
    )


# -- the crossover: the verdict's window along the load axis, for the capacity section --------
# Ordering the load levels by offered rate, the lowest rate from which the paired comparison
# no longer says "faster": below it speculation pays, above it it does not.


@dataclass(frozen=True)
class Crossover:
    baseline_arm: str
    candidate_arm: str
    task_group: str
    levels: tuple[tuple[str, float, str], ...]  # (phase, rate, pays | does not pay | not measured)
    pays_up_to_rps: float | None  # the last paying rate below crossover_rps (or the highest)
    crossover_rps: float | None  # the first decided rate above a paying one where it does not pay
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def crossover(verdicts: Sequence[Verdict]) -> list[Crossover]:
    """Per (baseline, candidate, group): the verdict's own window along the load axis
    (``analysis.verdicts.window.load_window``), so the capacity section says what the verdict says."""
    return [
        Crossover(
            v.baseline_arm,
            v.candidate_arm,
            g.task_group,
            g.levels,
            g.pays_up_to_rps if g.below_rps is not None else _top_pay(g.levels),
            g.below_rps,
            g.window,
        )
        for v in verdicts
        for g in sorted(v.groups, key=lambda g: g.task_group)
        if g.levels
    ]


def _top_pay(levels: Sequence[tuple[str, float, str]]) -> float | None:
    return max((rate for _, rate, st in levels if st == PAYS), default=None)


__all__ = [
    "Condition",
    "Crossover",
    "crossover",
    "decide",
    "hypothesis_reasons",
    "validation_arm",
    "with_triggers",
]
