"""The rollout to deploy (``--out DIR/rollout/``), from a report's document alone (so
``specpilot report PILOT.duckdb`` writes it too): per adopted candidate, the engine
configuration that switches speculation on for its adopted task groups (``engines``), the
routing table from task group (and load window) to configuration (``routes``), the rollback
rules beside them, and a README (``readme``). A verdict that adopts nothing gets a README that
says so and why, and nothing else.

    >>> sorted(rollout_files({"verdicts": [], "pilot": {"name": "p"}}))
    ['README.md']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specpilot.report.rollout.engines import EngineFiles, engine_files
from specpilot.report.rollout.readme import nothing_adopted, readme
from specpilot.report.rollout.routes import deployments, litellm_yaml, routes, routes_yaml
from specpilot.report.rollout.scopes import Adoption, adoptions, not_adopted

FOLDER = "rollout"


def rollout_files(doc: Mapping[str, Any]) -> dict[str, str]:
    """File name (inside the rollout folder) -> text."""
    ads = adoptions(doc)
    if not ads:
        return {"README.md": nothing_adopted(doc, not_adopted(doc))}
    configs: dict[str, EngineFiles] = {a.candidate: engine_files(a, a.model_name) for a in ads}
    files: dict[str, str] = {}
    for cfg in configs.values():
        files.update(cfg.files)
    for a in ads:
        rules = (doc.get("rollback_rules") or {}).get(a.candidate)
        if rules:
            files[f"rollback-{a.candidate}.rules.yml"] = rules
    table, deps = routes(ads, configs, doc), deployments(ads, configs, doc)
    files["routes.yaml"] = routes_yaml(doc, table, deps)
    files["litellm.config.yaml"] = litellm_yaml(doc, table, deps, configs)
    files["README.md"] = readme(doc, ads, configs, files)
    return files


__all__ = ["FOLDER", "Adoption", "EngineFiles", "rollout_files"]
