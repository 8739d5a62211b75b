"""Rollback triggers (R8) from the SLOs and the pilot's baseline, as Prometheus alerting rules.

Written in the candidate engine's own metric names (``rollback.engines``: vLLM, SGLang,
llama.cpp, specpilot's server; a managed API has none) and, for business checks, names the
application must export. Four kinds:

- ``key_business_regression``: key-check failures / key checks over the window above
  ``key_failure_ratio`` (``specpilot_quality_key_failures_total`` and
  ``specpilot_quality_checks_total``, labelled ``task_group``, from the application's checks);
- ``tail_latency``: the ``slo_attainment`` quantile of the engine's E2E histogram above the
  group's deadline and of its TTFT histogram above its TTFT SLO (the per-request conditions);
  and each percentile condition of the SLO (``slo.conditions``): the engine's p<P> of that
  quantity above its threshold, in seconds. An engine without that histogram gets the
  window's mean where it has one (llama.cpp: seconds per generated token), else no rule;
- ``memory_pressure``: the engine's KV usage above ``kv_usage_limit`` for ``hold_for``
  (llama.cpp, whose KV cache is fixed per slot and not exported: requests deferred for want
  of a slot for ``hold_for``);
- ``group_net_slower``: the median E2E above the baseline's median measured in the pilot x
  (1 + ``group_slowdown_tolerance``).

What an engine cannot watch is listed at the top of the rule file (``not_covered``). Engine
histograms carry no task-group label: a group gets its own latency rules only when
``group_selectors`` names a matcher that isolates it (e.g. its served model alias); the rest
share one rule at the most lenient SLO, which the annotation says.

    >>> from specpilot.analysis.config import RollbackConfig
    >>> ts = triggers({"code": GroupSLO(10.0, 1.0, 4.0)}, RollbackConfig(), "spec", 0.95)
    >>> sorted({t["kind"] for t in ts})
    ['group_net_slower', 'key_business_regression', 'memory_pressure', 'tail_latency']
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from specpilot.analysis.config import RollbackConfig
from specpilot.analysis.rollback.engines import EngineMetrics, metrics_of
from specpilot.definitions import SLOCondition

KEY_FAIL = "specpilot_quality_key_failures_total"
CHECKS = "specpilot_quality_checks_total"
ACTION = "switch speculation off for this scope (runtime switch or the plain-decoding config)"


@dataclass(frozen=True)
class GroupSLO:
    deadline_s: float | None
    ttft_slo_s: float | None
    baseline_e2e_p50_s: float | None
    conditions: tuple[SLOCondition, ...] = ()  # the SLO's percentile conditions


def _name(kind: str, group: str = "") -> str:
    """A valid alert name: ``Specpilot<Kind><Group>``, the group's words capitalised."""
    words = re.split(r"[^A-Za-z0-9]+", group)
    return "Specpilot" + kind + "".join(w[:1].upper() + w[1:] for w in words if w)


def _q(q: float, metric: str, sel: str, window: str) -> str:
    return f"histogram_quantile({q:g}, sum by (le) (rate({metric}_bucket{{{sel}}}[{window}])))"


def _rule(
    kind: str,
    name: str,
    expr: str,
    cfg: RollbackConfig,
    group: str,
    text: str,
    m: EngineMetrics | None = None,
    how: str = "",
) -> dict[str, Any]:
    notes = {"summary": text, "action": ACTION}
    if m is not None:  # a rule over the engine's metrics says whose names and how they differ
        notes["metrics"] = f"{m.engine}: {m.source}" + (f"; {how}" if how else "")
    return {
        "kind": kind,
        "alert": name,
        "expr": expr,
        "for": cfg.hold_for,
        "labels": {"severity": "page", "specpilot_trigger": kind, "task_group": group},
        "annotations": notes,
    }


def triggers(
    slos: Mapping[str, GroupSLO],
    cfg: RollbackConfig,
    candidate: str,
    attainment: float,
    engine: str = "vllm",
) -> list[dict[str, Any]]:
    """Trigger dicts (alert, expr, for, labels, annotations, kind) for the given groups, over
    ``engine``'s metric names (the candidate arm's engine)."""
    m = metrics_of(engine)
    w = cfg.rate_window
    out = []
    for g in sorted(slos):
        out.append(
            _rule(
                "key_business_regression",
                _name("KeyBusinessRegression", g),
                f'sum(rate({KEY_FAIL}{{task_group="{g}"}}[{w}])) / sum(rate({CHECKS}{{task_group="{g}"}}[{w}])) > {cfg.key_failure_ratio:g}',
                cfg,
                g,
                f"{g}: key business checks failing above {cfg.key_failure_ratio:.1%} with speculation on ({candidate})",
            )
        )
    selected = {g: s for g, s in slos.items() if g in cfg.group_selectors}
    rest = {g: s for g, s in slos.items() if g not in cfg.group_selectors}
    for g, s in sorted(selected.items()):
        out += _latency_rules(g, cfg.group_selectors[g], s, cfg, attainment, candidate, m)
    if rest:
        label = "+".join(sorted(rest))
        out += _latency_rules(label, "", _lenient(rest), cfg, attainment, candidate, m, True)
    mem = _memory_rule(m, cfg, candidate)
    return out + ([mem] if mem else [])


def _lenient(slos: Mapping[str, GroupSLO]) -> GroupSLO:
    """One SLO for groups the engine's metrics cannot tell apart: each threshold at its most
    lenient (a group that does not state one does not lift it)."""
    worst: dict[tuple[str, int], SLOCondition] = {}
    for s in slos.values():
        for c in s.conditions:
            k = (c.quantity, c.percentile)
            if k not in worst or c.max_s > worst[k].max_s:
                worst[k] = c
    return GroupSLO(
        _max(s.deadline_s for s in slos.values()),
        _max(s.ttft_slo_s for s in slos.values()),
        _max(s.baseline_e2e_p50_s for s in slos.values()),
        tuple(worst[k] for k in sorted(worst)),
    )


def _max(vals: Any) -> float | None:
    v = [x for x in vals if x is not None]
    return max(v) if v else None


def _memory_rule(m: EngineMetrics, cfg: RollbackConfig, cand: str) -> dict[str, Any] | None:
    if m.kv_usage:
        return _rule(
            "memory_pressure",
            _name("MemoryPressure"),
            f"max({m.kv_usage}) > {cfg.kv_usage_limit:g}",
            cfg,
            "*",
            f"KV cache above {cfg.kv_usage_limit:.0%} for {cfg.hold_for} with speculation on ({cand})",
            m,
        )
    if m.waiting:
        return _rule(
            "memory_pressure",
            _name("SlotPressure"),
            f"max({m.waiting}) > 0",
            cfg,
            "*",
            f"requests waiting for a free slot for {cfg.hold_for} with speculation on ({cand})",
            m,
            f"{m.engine} exports no KV usage (its KV cache is fixed per slot): a request "
            "deferred for want of a slot is the pressure it shows",
        )
    return None


def _condition_rule(
    g: str, sel: str, c: SLOCondition, cfg: RollbackConfig, cand: str, m: EngineMetrics, note: str
) -> dict[str, Any] | None:
    """``c`` over the engine's histogram of its quantity, else over its window mean."""
    hist, w = m.histogram(c.quantity), cfg.rate_window
    value = _q(c.percentile / 100, hist, sel, w) if hist else m.mean(c.quantity, sel, w)
    if value is None:
        return None
    what = f"p{c.percentile} {c.quantity.upper()}" if hist else f"mean {c.quantity.upper()}"
    return _rule(
        "tail_latency",
        _name(f"P{c.percentile}{c.quantity.upper()}OverSLO", g),
        f"{value} > {c.max_s:.6g}",
        cfg,
        g,
        f"{g}: {what} above the SLO's p{c.percentile} {c.metric} <= {c.max:g} ({cand}){note}",
        m,
        m.notes.get(c.quantity, ""),
    )


def _latency_rules(
    g: str,
    sel: str,
    s: GroupSLO,
    cfg: RollbackConfig,
    q: float,
    cand: str,
    m: EngineMetrics,
    shared: bool = False,
) -> list[dict[str, Any]]:
    w, out = cfg.rate_window, []
    note = " (shared rule: engine metrics carry no group label; most lenient SLO)" if shared else ""
    e2e, ttft = m.histogram("e2e"), m.histogram("ttft")
    if s.deadline_s is not None and e2e:
        out.append(
            _rule(
                "tail_latency",
                _name("E2EOverSLO", g),
                f"{_q(q, e2e, sel, w)} > {s.deadline_s:g}",
                cfg,
                g,
                f"{g}: p{q * 100:g} E2E above the {s.deadline_s:g} s deadline ({cand}){note}",
                m,
            )
        )
    if s.ttft_slo_s is not None and ttft:
        out.append(
            _rule(
                "tail_latency",
                _name("TTFTOverSLO", g),
                f"{_q(q, ttft, sel, w)} > {s.ttft_slo_s:g}",
                cfg,
                g,
                f"{g}: p{q * 100:g} TTFT above the {s.ttft_slo_s:g} s SLO ({cand}){note}",
                m,
            )
        )
    for c in s.conditions:
        r = _condition_rule(g, sel, c, cfg, cand, m, note)
        out += [r] if r else []
    if s.baseline_e2e_p50_s is not None and e2e:
        limit = s.baseline_e2e_p50_s * (1 + cfg.group_slowdown_tolerance)
        out.append(
            _rule(
                "group_net_slower",
                _name("GroupNetSlower", g),
                f"{_q(0.5, e2e, sel, w)} > {limit:.6g}",
                cfg,
                g,
                f"{g}: median E2E above the plain baseline's {s.baseline_e2e_p50_s:.3g} s measured in the pilot "
                f"+{cfg.group_slowdown_tolerance:.0%} ({cand}){note}",
                m,
            )
        )
    return out


def not_covered(
    slos: Mapping[str, GroupSLO], engine: str, selectors: Mapping[str, str] | None = None
) -> list[str]:
    """What the SLOs ask that ``engine``'s metrics cannot watch, one line each (empty: all);
    ``selectors``: the groups' matchers (``RollbackConfig.group_selectors``)."""
    m = metrics_of(engine)
    wanted: dict[str, str] = {}
    for s in slos.values():
        if s.deadline_s is not None or s.baseline_e2e_p50_s is not None:
            wanted.setdefault("e2e", "E2E (deadline, net slower)")
        if s.ttft_slo_s is not None:
            wanted.setdefault("ttft", "TTFT")
        for c in s.conditions:
            wanted.setdefault(c.quantity, c.quantity.upper())
    out = [
        f"{what}: {m.notes.get(q) or f'no metric for it in {m.source}'}"
        for q, what in sorted(wanted.items())
        if not m.histogram(q) and not m.mean(q)
    ]
    if not (m.kv_usage or m.waiting):
        out.append(f"memory pressure: no metric for it in {m.source}")
    if selectors and not m.labelled:
        out.append(
            f"group selectors: {m.engine}'s series carry no labels of their own, so "
            f"{', '.join(sorted(selectors.values()))} matches only labels the scrape attaches "
            "(job, instance, ...)"
        )
    return out


def rules_yaml(
    trig: list[dict[str, Any]],
    candidate: str,
    engine: str = "vllm",
    uncovered: Sequence[str] = (),
) -> str:
    """The triggers as a Prometheus rule file (``promtool check rules`` accepts it), headed
    by comments: whose metric names it reads and what it cannot watch."""
    m = metrics_of(engine)
    rules = [{k: v for k, v in t.items() if k != "kind"} for t in trig]
    doc = {"groups": [{"name": f"specpilot-rollback-{candidate}", "rules": rules}]}
    head = [
        f"# specpilot rollback rules for {candidate}: {m.engine}'s metric names ({m.source})",
        "# engine latencies run from arrival at the server: client stages and the network are not in them",
        *(f"# not watched: {u}" for u in uncovered),
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
