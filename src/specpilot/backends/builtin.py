"""Our own server (``specpilot serve``) as a subprocess.

It exposes vLLM's metric names and per-request ``metrics.speculative_decoding``, so the vLLM
parsers read it; its own ``specpilot_*`` series (round time, committed tokens, memory) are
added under their names.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

from specpilot.backends import prom, vllm
from specpilot.backends.base import (
    BackendError,
    Manifest,
    ServerProcess,
    SubprocessLifecycle,
    free_port,
    get_text,
    hardware_info,
    model_file,
    process_memory,
    snapshot,
    tokenizer_sha256,
)
from specpilot.records import MetricSnapshot


def normalise_metrics(text: str) -> dict[str, float]:
    out = vllm.normalise_metrics(text)
    s = prom.parse(text)
    for ours, theirs in (
        ("decode_rounds", "specpilot_decode_rounds"),
        ("round_seconds", "specpilot_round_seconds"),
        ("committed_tokens", "specpilot_committed_tokens"),
        ("prefill_seconds", "specpilot_prefill_seconds"),
        ("queue_seconds", "specpilot_queue_seconds"),
    ):
        v = prom.total(s, theirs + "_total", theirs)
        if v is not None:
            out[ours] = v
    for sample in s:
        if sample.name == "specpilot_memory_bytes":
            key = "_".join(
                v for k, v in sorted(sample.labels.items()) if k not in ("model_name", "engine")
            )
            out[f"server_memory_bytes_{key}" if key else "server_memory_bytes"] = sample.value
    return out


@dataclass
class BuiltinBackend(SubprocessLifecycle):
    """``specpilot serve`` with the given options (``--target``, ``--draft``, ``-k``...)."""

    target: str | None = None
    draft: str | None = None  # a path or "truncate:I,J,..."; None: the server's default
    no_draft: bool = False
    k: int | None = None
    host: str = "127.0.0.1"
    port: int = 0
    per_request_metrics: str = "summary"
    extra_args: list[str] = field(default_factory=list)
    name: str = "builtin"
    start_timeout_s: ClassVar[float] = 300.0

    def __post_init__(self) -> None:
        self.port = self.port or free_port(self.host)
        self._server: ServerProcess | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "specpilot.cli",
            "serve",
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        if self.target:
            argv += ["--target", self.target]
        if self.no_draft:
            argv += ["--no-draft"]
        elif self.draft:
            argv += ["--draft", self.draft]
        if self.k is not None:
            argv += ["-k", str(self.k)]
        argv += ["--per-request-spec-decode-metrics", self.per_request_metrics]
        return argv + list(self.extra_args)

    def describe(self) -> Manifest:
        from specpilot import __version__

        target = self.target
        if target is None:
            try:
                from specpilot.engine.loader import default_target_path

                target = str(default_target_path())
            except Exception:
                target = None
        draft_is_file = self.draft is not None and not self.draft.startswith("truncate:")
        models = tuple(
            m
            for m in (
                model_file("target", target),
                model_file("draft", self.draft if draft_is_file else None),
            )
            if m
        )
        spec: dict[str, Any] = {
            "draft": None if self.no_draft else (self.draft or "server default"),
            "k": self.k,
        }
        return Manifest(
            engine="specpilot-builtin",
            engine_version=__version__,
            endpoint=self.endpoint,
            models=models,
            tokenizer_sha256=tokenizer_sha256(target),
            launch=tuple(self.command()),
            speculative=spec,
            hardware=hardware_info(),
        )

    def scrape(
        self, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
    ) -> MetricSnapshot:
        try:
            text = get_text(self.endpoint + "/metrics")
        except Exception as exc:
            raise BackendError(
                f"builtin server /metrics unreachable at {self.endpoint}: {exc}"
            ) from exc
        metrics = normalise_metrics(text)
        metrics.update(process_memory(self._server.pid if self._server else None))
        return snapshot("builtin", metrics, text, run_id, arm, phase, label)

    def response_extras(self, obj: dict[str, Any]) -> dict[str, Any]:
        return vllm.response_extras(obj)
