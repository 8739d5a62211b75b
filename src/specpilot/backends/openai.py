"""Any OpenAI-compatible endpoint we do not run (a managed API, someone else's server).

Delivery metrics only: nothing is started or scraped, and the manifest says the implementation
behind the endpoint is unknown, so no report may assume one (R8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specpilot.backends.base import Manifest, hardware_info, snapshot
from specpilot.records import MetricSnapshot

UNKNOWN = "implementation behind this endpoint is unknown: delivery metrics only (R8)"


@dataclass
class OpenAIBackend:
    url: str
    model: str = "default"
    name: str = "openai"

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/").removesuffix("/v1")

    def start(self, timeout_s: float = 0.0) -> None:
        """Nothing to start: the endpoint is someone else's."""

    def stop(self) -> None:
        """Nothing to stop."""

    def describe(self) -> Manifest:
        return Manifest(
            engine="openai-compatible (unknown)",
            engine_version="unknown",
            endpoint=self.endpoint,
            models=(),
            tokenizer_sha256=None,
            launch=(),
            speculative={"known": False, "model": self.model},
            hardware={"client": hardware_info(), "server": "unknown"},
            notes=(UNKNOWN,),
        )

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot:
        return snapshot("openai", {}, UNKNOWN, run_id, arm, phase, label)

    def response_extras(self, obj: dict[str, Any]) -> dict[str, Any]:
        return {}
