"""Our own server (``specpilot serve``) as a subprocess, and its metrics and responses.

``/metrics`` carries vLLM's counter names (read with vLLM's normaliser) plus ``specpilot_*``
series: round time by part, committed tokens by mode, prefill and queue seconds, and memory by
part (``specpilot_memory_bytes{part=target_weights|draft_weights|target_kv_allocated|
draft_kv_allocated|process_rss|process_peak_rss}``), which become the snapshot's typed memory:
``kv_allocated_bytes`` = target + draft KV allocated, ``draft_kv_bytes`` = the draft's,
``kv_used_bytes`` = allocated x ``vllm:kv_cache_usage_perc`` (tokens in use / capacity).
``specpilot_kv_slots{state=total|in_use}`` gives its slots: a setting (``max_slots``, each of
the full context), not sized from memory, so a draft costs memory, never slots. No preemption:
a request waits for a free slot and keeps it to the end.

A response's ``metrics`` (``serve/app.py:spec_metrics``) holds vLLM's
``speculative_decoding`` and ``specpilot`` (timings, strategy, and with
``--per-request-spec-decode-metrics detailed``, the backend's default, every round as
``round_records`` and the prefill as ``prefill_record``); headers ``X-Request-Id`` and
``X-Specpilot-Strategy: k=3; scope=default; version=0`` say who served it and how.

    >>> x = response_extras({"metrics": {"specpilot": {"queue_s": 0.5, "round_records": [
    ...     {"round_index": 0, "proposed": 3, "accepted": 2, "committed": 3, "draft_s": 0.01,
    ...      "verify_s": 0.02, "overhead_s": 0.001, "batch_size": 1, "truncated": None,
    ...      "t_start": 10.0}]}}}, {"X-Specpilot-Strategy": "k=3; scope=code; version=2"})
    >>> x.queue_s, x.rounds[0].committed, (x.served_k, x.served_scope, x.strategy_version)
    (0.5, 3, (3, 'code', 2))
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx

from specpilot.backends import prom, vllm
from specpilot.backends.extras import check_keys, header, strategy_header
from specpilot.backends.facts import hardware_info, model_file, tokenizer_sha256
from specpilot.backends.protocol import SLOTS, SLOTS_BUSY, Manifest
from specpilot.backends.scrape import MetricsSource, Scraped
from specpilot.backends.served import SubprocessLifecycle
from specpilot.records import PrefillRecord, ResponseExtras, RoundRecord

OWN_KEYS = (
    "strategy",
    "rounds",
    "drafted",
    "accepted",
    "committed",
    "draft_s",
    "verify_s",
    "overhead_s",
    "mean_batch_size",
    "queue_s",
    "prefill_s",
    "decode_s",
    "status",
    "round_records",  # detailed
    "prefill_record",  # detailed
)
STRATEGY_KEYS = ("k", "draft", "scope")
ROUND_KEYS = (
    "round_index",
    "proposed",
    "accepted",
    "committed",
    "draft_s",
    "verify_s",
    "overhead_s",
    "batch_size",
    "truncated",
    "t_start",
)
PREFILL_KEYS = ("prompt_tokens", "target_s", "draft_s", "batch_size", "t_start")


def parse_metrics(texts: Mapping[str, str]) -> Scraped:
    """vLLM-named counters, specpilot's own series, and memory by part (bytes)."""
    text = texts["/metrics"]
    out = vllm.normalise_metrics(text)
    s = prom.parse(text)
    for ours, theirs in (
        ("decode_rounds", "specpilot_decode_rounds_total"),
        ("prefill_seconds", "specpilot_prefill_seconds_total"),
        ("queue_seconds", "specpilot_queue_seconds_total"),
    ):
        v = prom.total(s, theirs)
        if v is not None:
            out[ours] = v
    slots = prom.by_label(s, "state", "specpilot_kv_slots")
    for ours, state in ((SLOTS, "total"), (SLOTS_BUSY, "in_use")):
        if state in slots:
            out[ours] = slots[state]
    for label, ours, theirs in (
        ("part", "round_seconds_", "specpilot_round_seconds_total"),
        ("mode", "committed_tokens_", "specpilot_committed_tokens_total"),
    ):
        for value, n in prom.by_label(s, label, theirs).items():
            out[ours + value] = n
    part = prom.by_label(s, "part", "specpilot_memory_bytes")
    for name, n in part.items():
        out[f"memory_{name}_bytes"] = n
    memory: dict[str, int] = {}
    for ours, theirs in (
        ("rss_bytes", "process_rss"),
        ("target_weight_bytes", "target_weights"),
        ("draft_weight_bytes", "draft_weights"),
        ("draft_kv_bytes", "draft_kv_allocated"),
    ):
        if theirs in part:
            memory[ours] = int(part[theirs])
    kv = [part[p] for p in ("target_kv_allocated", "draft_kv_allocated") if p in part]
    if kv:
        memory["kv_allocated_bytes"] = int(sum(kv))
        if "kv_cache_usage" in out:
            memory["kv_used_bytes"] = int(sum(kv) * out["kv_cache_usage"])
    return Scraped(out, memory)


METRICS = MetricsSource("builtin", ("/metrics",), parse_metrics)


def _round(d: Mapping[str, Any], strict: bool) -> RoundRecord:
    check_keys(d, ROUND_KEYS, "builtin metrics.specpilot.round_records[]", strict)
    return RoundRecord(
        request_id="",
        round_index=int(d["round_index"]),
        proposed=int(d["proposed"]),
        accepted=int(d["accepted"]),
        committed=int(d["committed"]),
        draft_s=float(d["draft_s"]),
        verify_s=float(d["verify_s"]),
        overhead_s=float(d["overhead_s"]),
        batch_size=int(d.get("batch_size") or 1),
        t_start=float(d.get("t_start") or 0.0),
        truncated=d.get("truncated"),
    )


def _prefill(d: Mapping[str, Any], strict: bool) -> PrefillRecord:
    check_keys(d, PREFILL_KEYS, "builtin metrics.specpilot.prefill_record", strict)
    return PrefillRecord(
        request_id="",
        prompt_tokens=int(d["prompt_tokens"]),
        target_s=float(d["target_s"]),
        draft_s=float(d["draft_s"]),
        batch_size=int(d.get("batch_size") or 1),
        t_start=float(d.get("t_start") or 0.0),
    )


def response_extras(
    obj: Mapping[str, Any], headers: Mapping[str, str] | None = None, *, strict: bool = False
) -> ResponseExtras:
    """The builtin server's ``metrics`` and headers -> ``ResponseExtras`` (rounds included).

    Rounds and the prefill carry no request id here: the load generator relabels them with its
    own (``request_id``, ``run_id``, ``arm``, ``phase``).
    """
    k, scope, version = strategy_header(header(headers, "x-specpilot-strategy"))
    out = ResponseExtras(
        server_request_id=header(headers, "x-request-id") or obj.get("id"),
        served_k=k,
        served_scope=scope,
        strategy_version=version,
    )
    metrics = obj.get("metrics")
    if not isinstance(metrics, Mapping):
        return out
    unknown = check_keys(metrics, ("speculative_decoding", "specpilot"), "builtin metrics", strict)
    own = metrics.get("specpilot")
    if isinstance(own, Mapping):
        unknown += check_keys(own, OWN_KEYS, "builtin metrics.specpilot", strict)
        strategy = own.get("strategy")
        if isinstance(strategy, Mapping):
            unknown += check_keys(strategy, STRATEGY_KEYS, "builtin strategy", strict)
            out.served_k = out.served_k if out.served_k is not None else strategy.get("k")
            out.served_scope = out.served_scope or strategy.get("scope")
        out.queue_s, out.prefill_s, out.decode_s = (
            own.get("queue_s"),
            own.get("prefill_s"),
            own.get("decode_s"),
        )
        out.rounds = [_round(r, strict) for r in own.get("round_records") or ()]
        if own.get("prefill_record"):
            out.prefill = _prefill(own["prefill_record"], strict)
    sd = metrics.get("speculative_decoding")
    if isinstance(sd, Mapping):
        out.spec = vllm.spec_from(sd, "builtin", strict)
        summary = {
            k: v for k, v in (own or {}).items() if k not in ("round_records", "prefill_record")
        }
        out.spec["raw"] = {"speculative_decoding": dict(sd), "specpilot": summary}
        if unknown:
            out.spec["unknown_keys"] = unknown + out.spec.get("unknown_keys", [])
    return out


def draft_path(spec: str | None) -> str | None:
    """The files behind a ``--draft`` value: a path, a shipped draft's directory (hashed
    like any model), or None for a layer-truncated copy of the target (no files of its own)."""
    if spec is None or spec.startswith("truncate:"):
        return None
    if spec.startswith("shipped:"):
        import specpilot

        return str(Path(specpilot.__file__).parent / "data" / "drafts" / spec.split(":", 1)[1])
    return spec


@dataclass
class BuiltinBackend(SubprocessLifecycle):
    """``specpilot serve`` with the given options (``--target``, ``--draft``, ``-k``...).

    ``per_request_metrics`` defaults to ``detailed``: every round and prefill comes back with
    its response and is persisted.
    """

    target: str | None = None
    draft: str | None = None  # a path or "truncate:I,J,..."; None: the server's default
    no_draft: bool = False
    k: int | None = None
    host: str = "127.0.0.1"
    port: int = 0
    per_request_metrics: str = "detailed"
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # more variables for the server
    name: str = "builtin"
    metrics: ClassVar[MetricsSource] = METRICS
    parse_extras = staticmethod(response_extras)

    def __post_init__(self) -> None:
        self.listen()

    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "specpilot.cli", "serve", "--host", self.host]
        argv += ["--port", str(self.port)]
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
            except Exception:  # no default target installed: the manifest says so
                target = None
        models = tuple(
            m
            for m in (model_file("target", target), model_file("draft", draft_path(self.draft)))
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
            calibration=self._calibration(),
        )

    def _calibration(self) -> dict[str, Any]:
        """The running server's calibration (``calibration_from_metrics``); {} when it is not
        running or exposes none."""
        if self._server is None or self._server.exited() is not None:
            return {}
        from specpilot.backends.process import get_text

        try:
            return calibration_from_metrics(get_text(self.endpoint + "/metrics"))
        except httpx.HTTPError:
            return {}


def calibration_from_metrics(text: str) -> dict[str, Any]:
    """What the builtin server's load-time calibration chose and measured, from ``/metrics``:
    the weight format per role (``specpilot_weight_format_info``), the chosen format's forward
    times and verify-cost ratios by (batch, tokens). Empty when the server exposes none.

        >>> t = ('specpilot_weight_format_info{model_name="m",role="target",format="bf16",'
        ...      'mode="measured",hardware="avx512_bf16"} 1.0\\n'
        ...      'specpilot_calibration_verify_cost_ratio{model_name="m",batch="1",tokens="4"} 1.04\\n')
        >>> c = calibration_from_metrics(t)
        >>> c["formats"]["target"], c["mode"], c["ratio"]
        ('bf16', 'measured', [{'batch': 1, 'tokens': 4, 'ratio': 1.04}])
    """
    out: dict[str, Any] = {"formats": {}, "forward_s": [], "ratio": []}
    for s in prom.parse(text):
        lab = s.labels
        if s.name == "specpilot_weight_format_info" and s.value == 1.0:
            out["formats"][lab.get("role", "target")] = lab.get("format")
            out["mode"], out["hardware"] = lab.get("mode"), lab.get("hardware")
        elif s.name == "specpilot_calibration_forward_seconds":
            out["forward_s"].append(
                {"batch": int(lab["batch"]), "tokens": int(lab["tokens"]), "seconds": s.value}
            )
        elif s.name == "specpilot_calibration_verify_cost_ratio":
            out["ratio"].append(
                {"batch": int(lab["batch"]), "tokens": int(lab["tokens"]), "ratio": s.value}
            )
        elif s.name == "specpilot_calibration_duration_seconds":
            out["seconds"] = s.value
    for key in ("forward_s", "ratio"):
        out[key].sort(key=lambda r: (r["batch"], r["tokens"]))
    return out if out["formats"] or out["ratio"] else {}
