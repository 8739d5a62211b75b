"""Rollback triggers (R8) from the SLOs and the pilot's baseline, as Prometheus alerting rules.

Four kinds, each over metric names a deployment already has (vLLM's, which specpilot's server
also exports) or, for business checks, names the application must export:

- ``key_business_regression``: key-check failures / key checks over the window above
  ``key_failure_ratio`` (``specpilot_quality_key_failures_total`` and
  ``specpilot_quality_checks_total``, labelled ``task_group``, from the application's checks);
- ``tail_latency``: the ``slo_attainment`` quantile of ``vllm:e2e_request_latency_seconds``
  above the group's deadline, and of ``vllm:time_to_first_token_seconds`` above its TTFT SLO;
- ``memory_pressure``: ``vllm:kv_cache_usage_perc`` above ``kv_usage_limit`` for ``hold_for``;
- ``group_net_slower``: the median E2E above the baseline's median measured in the pilot x
  (1 + ``group_slowdown_tolerance``).

Engine histograms carry no task-group label: a group gets its own latency rules only when
``group_selectors`` names a matcher that isolates it (e.g. its served model alias); the rest
share one rule at the most lenient SLO, which the annotation says.

    >>> from specpilot.analysis.config import RollbackConfig
    >>> ts = triggers({"code": GroupSLO(10.0, 1.0, 4.0)}, RollbackConfig(), "spec", 0.95)
    >>> sorted({t["kind"] for t in ts})
    ['group_net_slower', 'key_business_regression', 'memory_pressure', 'tail_latency']
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from specpilot.analysis.config import RollbackConfig

E2E = "vllm:e2e_request_latency_seconds_bucket"
TTFT = "vllm:time_to_first_token_seconds_bucket"
KV = "vllm:kv_cache_usage_perc"
KEY_FAIL = "specpilot_quality_key_failures_total"
CHECKS = "specpilot_quality_checks_total"
ACTION = "switch speculation off for this scope (runtime switch or the plain-decoding config)"


@dataclass(frozen=True)
class GroupSLO:
    deadline_s: float | None
    ttft_slo_s: float | None
    baseline_e2e_p50_s: float | None


def _name(kind: str, group: str = "") -> str:
    """A valid alert name: ``Specpilot<Kind><Group>``, the group's words capitalised."""
    words = re.split(r"[^A-Za-z0-9]+", group)
    return "Specpilot" + kind + "".join(w[:1].upper() + w[1:] for w in words if w)


def _q(q: float, metric: str, sel: str, window: str) -> str:
    return f"histogram_quantile({q:g}, sum by (le) (rate({metric}{{{sel}}}[{window}])))"


def _rule(
    kind: str, name: str, expr: str, cfg: RollbackConfig, group: str, text: str
) -> dict[str, Any]:
    return {
        "kind": kind,
        "alert": name,
        "expr": expr,
        "for": cfg.hold_for,
        "labels": {"severity": "page", "specpilot_trigger": kind, "task_group": group},
        "annotations": {"summary": text, "action": ACTION},
    }


def triggers(
    slos: Mapping[str, GroupSLO], cfg: RollbackConfig, candidate: str, attainment: float
) -> list[dict[str, Any]]:
    """Trigger dicts (alert, expr, for, labels, annotations, kind) for the given groups."""
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
        out += _latency_rules(g, cfg.group_selectors[g], s, cfg, attainment, candidate)
    if rest:
        lenient = GroupSLO(
            _max(s.deadline_s for s in rest.values()),
            _max(s.ttft_slo_s for s in rest.values()),
            _max(s.baseline_e2e_p50_s for s in rest.values()),
        )
        label = "+".join(sorted(rest))
        out += _latency_rules(label, "", lenient, cfg, attainment, candidate, shared=True)
    out.append(
        _rule(
            "memory_pressure",
            _name("MemoryPressure"),
            f"max({KV}) > {cfg.kv_usage_limit:g}",
            cfg,
            "*",
            f"KV cache above {cfg.kv_usage_limit:.0%} for {cfg.hold_for} with speculation on ({candidate})",
        )
    )
    return out


def _max(vals: Any) -> float | None:
    v = [x for x in vals if x is not None]
    return max(v) if v else None


def _latency_rules(
    g: str, sel: str, s: GroupSLO, cfg: RollbackConfig, q: float, cand: str, shared: bool = False
) -> list[dict[str, Any]]:
    w, out = cfg.rate_window, []
    note = " (shared rule: engine metrics carry no group label; most lenient SLO)" if shared else ""
    if s.deadline_s is not None:
        out.append(
            _rule(
                "tail_latency",
                _name("E2EOverSLO", g),
                f"{_q(q, E2E, sel, w)} > {s.deadline_s:g}",
                cfg,
                g,
                f"{g}: p{q * 100:g} E2E above the {s.deadline_s:g} s deadline ({cand}){note}",
            )
        )
    if s.ttft_slo_s is not None:
        out.append(
            _rule(
                "tail_latency",
                _name("TTFTOverSLO", g),
                f"{_q(q, TTFT, sel, w)} > {s.ttft_slo_s:g}",
                cfg,
                g,
                f"{g}: p{q * 100:g} TTFT above the {s.ttft_slo_s:g} s SLO ({cand}){note}",
            )
        )
    if s.baseline_e2e_p50_s is not None:
        limit = s.baseline_e2e_p50_s * (1 + cfg.group_slowdown_tolerance)
        out.append(
            _rule(
                "group_net_slower",
                _name("GroupNetSlower", g),
                f"{_q(0.5, E2E, sel, w)} > {limit:.6g}",
                cfg,
                g,
                f"{g}: median E2E above the plain baseline's {s.baseline_e2e_p50_s:.3g} s measured in the pilot "
                f"+{cfg.group_slowdown_tolerance:.0%} ({cand}){note}",
            )
        )
    return out


def rules_yaml(trig: list[dict[str, Any]], candidate: str) -> str:
    """The triggers as a Prometheus rule file (``promtool check rules`` accepts it)."""
    rules = [{k: v for k, v in t.items() if k != "kind"} for t in trig]
    doc = {"groups": [{"name": f"specpilot-rollback-{candidate}", "rules": rules}]}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
