"""Any OpenAI-compatible endpoint we do not run (a managed API, someone else's server).

Delivery metrics only: nothing is started or scraped, and the manifest says the implementation
behind the endpoint is unknown, so no report may assume one (R8).

    >>> be = OpenAIBackend("https://api.example.com/v1")
    >>> be.endpoint, be.describe().speculative["known"]
    ('https://api.example.com', False)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specpilot.backends.extras import header
from specpilot.backends.facts import hardware_info
from specpilot.backends.protocol import BackendError, Manifest
from specpilot.records import MetricSnapshot, ResponseExtras

UNKNOWN = "implementation behind this endpoint is unknown: delivery metrics only (R8)"


def response_extras(
    obj: Mapping[str, Any], headers: Mapping[str, str] | None = None, *, strict: bool = False
) -> ResponseExtras:
    """Only the response's id: the OpenAI format says nothing about how it was generated."""
    return ResponseExtras(server_request_id=header(headers, "x-request-id") or obj.get("id"))


@dataclass
class OpenAIBackend:
    url: str
    model: str = "default"
    name: str = "openai"

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/").removesuffix("/v1")

    def start(self, timeout_s: float | None = None) -> None:
        """Nothing to start: the endpoint is someone else's."""

    def stop(self) -> None:
        """Nothing to stop."""

    def kill(self) -> None:
        raise BackendError(f"{self.endpoint} is not run by specpilot: it cannot be killed")

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
        return MetricSnapshot(run_id, arm, phase, label, time.perf_counter(), "openai", {}, UNKNOWN)

    def response_extras(
        self, obj: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> ResponseExtras:
        return response_extras(obj, headers)
