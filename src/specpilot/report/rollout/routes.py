"""The routing table: each task group to the configuration that serves it, and for a group
adopted only in a load window, the configuration inside the window and outside it.

Two renderings of one table:

- ``routes.yaml``: specpilot's own (the whole decision: group, verdict, deployment, scope,
  window). No gateway format holds a load window: LiteLLM routes by model name with
  fallbacks on failure, Envoy by path and header with fixed weights; neither switches a route
  when the offered rate crosses a threshold, so the window is written as data here and applied
  by whoever watches the load (the rollback rules' alerts, an operator, a controller).
- ``litellm.config.yaml``: a LiteLLM proxy ``model_list`` (``litellm --config``), one
  ``model_name`` per task group, each routed to the deployment that serves that group now (a
  group in a window: the one outside it, the safe side). LiteLLM is the gateway most
  OpenAI-compatible self-hosted services put in front of vLLM, SGLang and llama.cpp, and it
  routes by the one thing every client already sends: the model name.

Endpoints are not known here: each deployment's ``api_base`` is read from an environment
variable (``os.environ/NAME``, LiteLLM's syntax) named after its arm.

    >>> api_base_env("spec-k3")
    'SPECPILOT_API_BASE_SPEC_K3'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from specpilot.report.rollout.engines import EngineFiles
from specpilot.report.rollout.scopes import Adoption, Scope, arm_config, arm_options


def api_base_env(arm: str) -> str:
    return "SPECPILOT_API_BASE_" + re.sub(r"[^A-Za-z0-9]", "_", arm).upper()


def _window(s: Scope) -> dict[str, Any]:
    out: dict[str, Any] = {"where_it_pays": s.window}
    if s.pays_up_to_rps is not None:  # the highest rate measured paying: on up to here
        out["on_up_to_rps"] = s.pays_up_to_rps
    if s.below_rps is not None:  # the lowest rate above it measured not paying
        out["does_not_pay_at_rps"] = s.below_rps
    if s.phases:
        out["phases"] = list(s.phases)
    return out


def _builtin_switch(group: str, k: int) -> list[dict[str, Any]]:
    """The two PUT /admin/strategy bodies that switch one group (both of its scopes)."""
    return [{"scope": f"tag:{group}", "k": k}, {"scope": f"model:{group}", "k": k}]


def _route(a: Adoption, s: Scope, cfg: EngineFiles) -> dict[str, Any]:
    """One adopted group's route (``ADOPT``: on at every load; in windows: off outside)."""
    k = a.k
    route: dict[str, Any] = {"group": s.group, "verdict": s.verdict, "candidate": a.candidate}
    runtime = cfg.switch == "runtime"
    if s.always:
        route |= {"deployment": a.candidate, "speculation": f"on (k={k})"}
        if s.load_range_rps is not None:
            route["measured_load_rps"] = list(s.load_range_rps)
        route["where_it_pays"] = s.window
    else:
        outside = a.candidate if runtime else a.baseline
        route |= {"deployment": outside, "speculation": "off outside the window"}
        route["in_window"] = {"deployment": a.candidate, "speculation": f"on (k={k})"}
        route["in_window"] |= _window(s)
    if runtime:
        route["scopes"] = [f"tag:{s.group}", f"model:{s.group}"]
        if not s.always:
            route["in_window"]["switch_on"] = _builtin_switch(s.group, k)
            route["in_window"]["switch_off"] = _builtin_switch(s.group, 0)
    return route


def routes(
    ads: Sequence[Adoption], configs: Mapping[str, EngineFiles], doc: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Every judged group's route: an adopted one by the first candidate adopting it (document
    order), every other to the current service unchanged (so a gateway built from this table
    still serves it)."""
    out: dict[str, dict[str, Any]] = {}
    for a in ads:
        for s in a.scopes:
            if s.group not in out:
                out[s.group] = _route(a, s, configs[a.candidate])
    for a in ads:
        runtime = configs[a.candidate].switch == "runtime"
        for group, verdict, why in a.rejected:
            if group not in out:
                out[group] = {
                    "group": group,
                    "verdict": verdict,
                    "deployment": a.candidate if runtime else a.baseline,
                    "speculation": "off (not adopted: unchanged)",
                    "why": why,
                } | ({"scopes": [f"tag:{group}", f"model:{group}"]} if runtime else {})
    return [out[g] for g in sorted(out)]


def deployments(
    ads: Sequence[Adoption], configs: Mapping[str, EngineFiles], doc: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each deployment a route names: the candidates (their files) and the current services."""
    out: dict[str, dict[str, Any]] = {}
    for a in ads:
        cfg = configs[a.candidate]
        out[a.candidate] = {
            "engine": a.engine,
            "speculation": "per scope at run time" if cfg.switch == "runtime" else "on",
            "files": sorted(cfg.files),
            "api_base_env": api_base_env(a.candidate),
        }
        if cfg.switch == "restart":
            out.setdefault(
                a.baseline,
                {
                    "engine": str(arm_config(doc, a.baseline).get("engine") or "unknown"),
                    "speculation": "off: the current service, unchanged (no file written)",
                    "api_base_env": api_base_env(a.baseline),
                },
            )
    return out


def served_model(doc: Mapping[str, Any], arm: str, cfg: EngineFiles | None) -> str | None:
    """The model id a gateway sends to ``arm``: the group's alias on a builtin server (set per
    route), else the arm's ``model_name``, its served name or its model as given."""
    if cfg is not None and cfg.served_model:
        return cfg.served_model
    spec = arm_config(doc, arm)
    o = arm_options(spec, {})
    for v in (spec.get("model_name"), getattr(o, "served_model_name", None)):
        if v:
            return str(v)
    return str(getattr(o, "model", None) or "") or None


def routes_yaml(
    doc: Mapping[str, Any], table: list[dict[str, Any]], deps: dict[str, dict[str, Any]]
) -> str:
    head = (
        "# The routing table of the rollout: each task group to the deployment that serves it\n"
        "# (README.md says how to apply it). A group adopted only in a load window names the\n"
        "# deployment outside the window and, under in_window, the one inside it.\n"
    )
    body = {
        "pilot": (doc.get("pilot") or {}).get("name"),
        "deployments": deps,
        "routes": table,
    }
    return head + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100)


def litellm_yaml(
    doc: Mapping[str, Any],
    table: list[dict[str, Any]],
    deps: Mapping[str, Mapping[str, Any]],
    configs: Mapping[str, EngineFiles],
) -> str:
    """LiteLLM proxy config: one ``model_name`` per group, to the deployment serving it now."""
    entries = []
    for r in table:
        dep = r["deployment"]
        runtime = "scopes" in r
        model = r["group"] if runtime else served_model(doc, dep, configs.get(dep))
        meta = f"specpilot: {r['verdict']}; speculation {r['speculation']}"
        if "in_window" in r:
            w = r["in_window"]
            meta += f"; on in its window ({w['where_it_pays']}) on {w['deployment']}"
        entries.append(
            {
                "model_name": r["group"],
                "litellm_params": {
                    "model": f"openai/{model or 'MODEL'}",
                    "api_base": f"os.environ/{deps[dep]['api_base_env']}",
                    "api_key": "os.environ/SPECPILOT_API_KEY",
                },
                "model_info": {"metadata": meta},
            }
        )
    head = (
        "# LiteLLM proxy config (litellm --config litellm.config.yaml): clients of each task\n"
        "# group ask for the group's name as the model. Set each SPECPILOT_API_BASE_<ARM> to\n"
        "# that deployment's http://HOST:PORT/v1 and SPECPILOT_API_KEY to its key (any string\n"
        "# when it has none). routes.yaml holds the load windows this file cannot.\n"
    )
    return head + yaml.safe_dump({"model_list": entries}, sort_keys=False, width=100)


__all__ = ["api_base_env", "deployments", "litellm_yaml", "routes", "routes_yaml"]
