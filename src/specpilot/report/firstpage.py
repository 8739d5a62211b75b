"""The first page in plain words (issue 51, item 2): what a service owner acts on, read from the
report's own figures (``report.json``), above the forest plot in the HTML, at the top of the
Markdown and on the terminal.

One paragraph per candidate and kind of outcome, each leading with what was measured:

- **adopt**: switch it on for *these* task groups up to *this* load; the task time's change with
  its interval at each level it was decided; what it costs a month (``cost.ledgers``, or what is
  not priced); when to roll back (its rollback rules);
- **do not adopt**: the measured slowdown with its interval first, the reason (the verdict's
  bottleneck) after it;
- **no difference**: equal within the margin, so switching it on buys nothing measured;
- **not decided yet**: run it again for about N minutes on this machine, with the command (this
  pilot's own minutes per episode, scaled to the episodes that would decide the closest cell).

Then one line of checks that let the page say so, each linked to its section: the planted
slowdown found at every level, the A/A contrast clean, the quality gates passed.

    >>> minutes_for(episodes=21, per_level=14, pilot_minutes=6.6)
    10
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specpilot.numbers import signed_pct

Doc = Mapping[str, Any]
# the words the page uses before their sections define them (a tooltip, a footnote)
TERMS = {
    "planted": "a copy of the baseline slowed by a known amount (+15%): the pilot must find it, "
    "or no direction is trusted at that load level",
    "A/A": "the baseline compared with itself (the planted copy less its known slowdown): any "
    "difference it shows is noise, so the pilot never calls one that size",
    "episode": "a slice of a load level replayed on every arm in turn: the unit the intervals "
    "are computed over",
    "process": "one engine process (or replica) of an arm: its own speed is part of the noise",
}


@dataclass(frozen=True)
class Paragraph:
    candidate: str
    kind: str  # adopt | do_not_adopt | no_difference | undecided
    groups: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: the pilot had no such check
    text: str
    section: str  # the report section it links to


def first_page(doc: Doc) -> dict[str, Any]:
    """``report.json`` ``first_page``: the paragraphs, the checks and the terms they use."""
    paragraphs = [p for v in doc.get("verdicts") or [] for p in _paragraphs(doc, v)]
    return {
        "paragraphs": [{**asdict(p), "groups": list(p.groups)} for p in paragraphs],
        "checks": [asdict(c) for c in checks(doc)],
        "terms": dict(TERMS),
    }


def _paragraphs(doc: Doc, v: Doc) -> list[Paragraph]:
    groups = [g for g in v.get("groups") or [] if g["task_group"] != "*"]
    cand = v["candidate_arm"]
    by: dict[str, list[Doc]] = {}
    for g in groups:
        by.setdefault(_kind(g["verdict"]), []).append(g)
    out = []
    if "adopt" in by:
        out.append(Paragraph(cand, "adopt", _names(by["adopt"]), _adopt(doc, v, by["adopt"])))
    if "do_not_adopt" in by:
        text = _reject(doc, v, by["do_not_adopt"])
        out.append(Paragraph(cand, "do_not_adopt", _names(by["do_not_adopt"]), text))
    if "no_difference" in by:
        names = _names(by["no_difference"])
        text = (
            f"No difference for {_list(names)}: {cand} is equal to {v['baseline_arm']} inside "
            "the equivalence margin at every level measured, so switching it on buys nothing "
            "measured there."
        )
        out.append(Paragraph(cand, "no_difference", names, text))
    if "undecided" in by:
        text = _undecided(doc, v, by["undecided"])
        out.append(Paragraph(cand, "undecided", _names(by["undecided"]), text))
    return out


def _kind(verdict: str) -> str:
    if verdict.startswith("ADOPT"):
        return "adopt"
    if verdict == "DO_NOT_ADOPT":
        return "do_not_adopt"
    if verdict in ("NO_DIFFERENCE", "EQUIVALENT"):
        return "no_difference"
    return "undecided"


def _names(groups: Sequence[Doc]) -> tuple[str, ...]:
    return tuple(g["task_group"] for g in groups)


def _list(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _cells(doc: Doc, v: Doc, group: str, outcome: str | None = None) -> list[Doc]:
    return [
        c
        for c in doc.get("comparisons") or []
        if c["candidate_arm"] == v["candidate_arm"]
        and c["baseline_arm"] == v["baseline_arm"]
        and c["task_group"] == group
        and (outcome is None or c["outcome"] == outcome)
    ]


def _effect(c: Doc) -> str:
    t = c["task_rel_change"]
    rate = f" ({c['offered_rate']:.3g} req/s)" if c.get("offered_rate") else ""
    span = (
        f" [{signed_pct(t['low'])}, {signed_pct(t['high'])}]"
        if t.get("low") is not None and t.get("high") is not None
        else ""
    )
    return f"{signed_pct(t['estimate'])}{span} at {c['phase']}{rate}"  # [low, high]


def _adopt(doc: Doc, v: Doc, groups: Sequence[Doc]) -> str:
    parts = []
    for g in groups:
        levels = g.get("windows") or []
        cells = [
            c
            for c in _cells(doc, v, g["task_group"], "faster")
            if not levels or c["phase"] in levels
        ]
        span = g.get("load_range_rps")
        upto = f" up to {span[1]:.3g} req/s" if span else ""  # [lowest, highest] measured
        effect = "; ".join(_effect(c) for c in cells) or "faster where decided"
        only = f" at {_list(levels)} load only" if g["verdict"] == "ADOPT_IN_WINDOWS" else ""
        parts.append(f"{g['task_group']} tasks{only}{upto}: task time {effect}")
    cand = v["candidate_arm"]
    caveat = (
        " This is a pilot hypothesis (see the verdict's reasons), not yet a measurement of the "
        "service's own traffic."
        if v.get("pilot_hypothesis")
        else ""
    )
    return (
        f"Switch {cand} on for {'; '.join(parts)}. Cost: {_cost(doc, cand)}. "
        f"Roll back when: {_rollback(v)}.{caveat}"
    )


def _reject(doc: Doc, v: Doc, groups: Sequence[Doc]) -> str:
    parts = []
    for g in groups:
        cells = _cells(doc, v, g["task_group"], "slower")
        effect = "; ".join(_effect(c) for c in cells)
        measured = f"task time measured slower, {effect}" if effect else "not faster where measured"
        why = f"; {g['bottleneck']}" if g.get("bottleneck") else ""
        parts.append(f"{g['task_group']}: {measured}{why}")
    return f"Do not switch {v['candidate_arm']} on for " + "; ".join(parts) + "."


def _undecided(doc: Doc, v: Doc, groups: Sequence[Doc]) -> str:
    names = _names(groups)
    needed = [
        c.get("episodes_needed")
        for g in names
        for c in _cells(doc, v, g)
        if c.get("outcome") == "insufficient"
    ]
    need = min((int(n) for n in needed if n), default=None)
    head = f"Not decided yet for {_list(names)}"
    ep = (doc.get("pilot", {}).get("config") or {}).get("episodes") or {}
    per_level = int(ep.get("per_level") or 0)
    minutes = _pilot_minutes(doc)
    if need is None or not per_level or minutes is None:
        return f"{head}: more episodes alone would not decide it here (see the conditions)."
    run = minutes_for(need, per_level, minutes)
    cmd = "specpilot pilot" + ("" if doc["pilot"]["name"] == "specpilot-default" else " PILOT.yaml")
    return (
        f"{head}: run it again for about {run} minutes on this machine "
        f"(`{cmd} --episodes {need}`, which would decide the closest of them; this pilot took "
        f"{minutes:.0f} min for {per_level} episodes per level)."
    )


def minutes_for(episodes: int, per_level: int, pilot_minutes: float) -> int:
    """This pilot's minutes scaled from its episodes per level to ``episodes`` (rounded up)."""
    return math.ceil(pilot_minutes * episodes / per_level)


def _pilot_minutes(doc: Doc) -> float | None:
    p = doc.get("pilot") or {}
    t0, t1 = p.get("created_unix"), p.get("finished_unix")
    return (t1 - t0) / 60.0 if t0 is not None and t1 is not None and t1 > t0 else None


def _cost(doc: Doc, cand: str) -> str:
    led = next(
        (x for x in (doc.get("cost") or {}).get("ledgers") or [] if x["candidate_arm"] == cand),
        None,
    )
    if led is None:
        return "not priced"
    if led["kind"] == "not_priced":
        return f"not priced ({len(led['not_priced'])} items need the cost inputs)"
    monthly = led.get("monthly")
    per_month = f"{monthly:,.0f} {led['currency']} a month" if monthly is not None else ""
    return f"{per_month}; {led['text']}" if per_month else led["text"]


def _rollback(v: Doc) -> str:
    said = [
        t["annotations"]["summary"]
        for t in v.get("rollback_triggers") or []
        if (t.get("annotations") or {}).get("summary")
    ]
    if not said:
        return "no rule written"
    more = f" (+{len(said) - 1} more rules: see the rollback rules)" if len(said) > 1 else ""
    return said[0] + more


def checks(doc: Doc) -> list[Check]:
    """The checks that let the page say what it says, each with its section."""
    planted = doc.get("planted") or []
    aa = doc.get("aa_control")
    gates = (doc.get("quality") or {}).get("gates") or []
    out = [
        Check(
            "planted",
            all(p.get("found") for p in planted) if planted else None,
            f"planted +15% found at {sum(1 for p in planted if p.get('found'))} of {len(planted)} levels"
            if planted
            else "no planted slowdown",
            "load",
        ),
        Check(
            "A/A",
            (not aa.get("directional")) if aa else None,
            f"A/A clean ({len(aa.get('directional') or [])} of {aa.get('cells')} cells directional)"
            if aa
            else "no A/A contrast",
            "load",
        ),
        Check(
            "quality",
            (not any(g.get("failed") for g in gates)) if gates else None,
            "quality gates passed"
            if gates and not any(g.get("failed") for g in gates)
            else f"quality gates failed: {', '.join(g['task_group'] for g in gates if g.get('failed'))}"
            if gates
            else "no quality gate",
            "quality",
        ),
    ]
    return out


def tick(ok: bool | None) -> str:
    return "\u2713" if ok else "\u2717" if ok is False else "\u2013"
