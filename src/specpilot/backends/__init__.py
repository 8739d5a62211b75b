"""Engine backends behind one Protocol: start, stop, endpoint, describe, scrape.

One small module per engine: ``builtin`` (``specpilot serve`` as a subprocess), ``llamacpp``
(xllamacpp, real, runs here), ``vllm`` and ``sglang`` (launch commands and parsers; need a
GPU), ``openai`` (any endpoint; delivery metrics only). Counters are normalised to DESIGN.md's
definitions (see ``backends.base``); ``response_extras`` turns an engine's per-response stats
into ``RequestRecord`` fields and is what the load generator gets (it never imports an engine).

    >>> from specpilot.backends import response_extras_for
    >>> response_extras_for("llamacpp")({"timings": {"draft_n": 8, "draft_n_accepted": 6}})["spec"]["accepted"]
    6
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from specpilot.backends.base import (
    SPEC_ACCEPTED,
    SPEC_COMMITTED,
    SPEC_POS,
    SPEC_PROPOSED,
    SPEC_ROUNDS,
    Backend,
    BackendError,
    Manifest,
    ModelFile,
    hardware_info,
)

ENGINES = ("builtin", "llamacpp", "vllm", "sglang", "openai")


def response_extras_for(engine: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The per-response parser for an engine name (what ``LoadConfig.response_extras`` takes)."""
    if engine in ("vllm", "builtin"):
        from specpilot.backends.vllm import response_extras
    elif engine == "llamacpp":
        from specpilot.backends.llamacpp import response_extras
    elif engine == "sglang":
        from specpilot.backends.sglang import response_extras
    elif engine == "openai":
        return lambda obj: {}
    else:
        raise ValueError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    return response_extras


def make_backend(engine: str, options: Mapping[str, Any] | None = None) -> Backend:
    """A backend for ``engine`` from keyword options (its dataclass fields), not yet started.

    This is how ``specpilot load --start --engine-opt KEY=VALUE`` starts the engine itself,
    so that the run records the full ``describe()`` manifest. ``llamacpp`` takes
    ``LlamaCppConfig`` fields plus ``mode`` (subprocess | inprocess), its model defaulting to
    the default target; ``builtin`` takes ``BuiltinBackend`` fields (``extra_args``: more
    ``specpilot serve`` flags).

        >>> make_backend("builtin", {"no_draft": True, "extra_args": ["--threads", 1]}).command()[-2:]
        ['--threads', '1']
    """
    opts = dict(options or {})
    if "extra_args" in opts:
        opts["extra_args"] = [str(a) for a in opts["extra_args"]]
    if engine == "builtin":
        from specpilot.backends.builtin import BuiltinBackend as cls
    elif engine == "vllm":
        from specpilot.backends.vllm import VllmBackend as cls  # type: ignore[assignment]
    elif engine == "sglang":
        from specpilot.backends.sglang import SglangBackend as cls  # type: ignore[assignment]
    elif engine == "llamacpp":
        from specpilot.backends.llamacpp import LlamaCppBackend, LlamaCppConfig

        mode = str(opts.pop("mode", "subprocess"))
        _check_fields("llamacpp", LlamaCppConfig, opts, extra=("mode",))
        if "model" not in opts:
            from specpilot.engine.loader import default_target_path

            opts["model"] = str(default_target_path())
        return LlamaCppBackend(LlamaCppConfig(**opts), mode=mode)
    else:
        raise ValueError(
            f"engine {engine!r} cannot be started by specpilot: builtin, llamacpp, vllm, sglang"
        )
    _check_fields(engine, cls, opts)
    backend: Backend = cls(**opts)
    return backend


def _check_fields(
    engine: str, cls: Any, opts: Mapping[str, Any], extra: tuple[str, ...] = ()
) -> None:
    import dataclasses

    names = [f.name for f in dataclasses.fields(cls) if f.init and f.name != "name"]
    unknown = sorted(set(opts) - set(names))
    if unknown:
        raise ValueError(
            f"{engine} engine options {', '.join(unknown)} unknown; "
            f"known: {', '.join(sorted([*names, *extra]))}"
        )


def normaliser_for(engine: str) -> Callable[[str], dict[str, float]] | None:
    """The ``/metrics`` text normaliser of an engine (None: the engine has no counters we read)."""
    import importlib

    module = {"vllm": "vllm", "builtin": "builtin", "llamacpp": "llamacpp", "sglang": "sglang"}.get(
        engine
    )
    if module is None:
        return None
    fn: Callable[[str], dict[str, float]] = importlib.import_module(
        f"specpilot.backends.{module}"
    ).normalise_metrics
    return fn


def scrape_endpoint(
    engine: str, url: str, run_id: str = "", arm: str = "", phase: str = "", label: str = ""
) -> Any:
    """Scrape ``url``/metrics of an engine someone else started (``specpilot load URL``)."""
    from specpilot.backends.base import get_text, snapshot

    norm = normaliser_for(engine)
    if norm is None:
        return snapshot(engine, {}, "", run_id, arm, phase, label)
    text = get_text(url.rstrip("/") + "/metrics")
    return snapshot(engine, norm(text), text, run_id, arm, phase, label)


__all__ = [
    "ENGINES",
    "SPEC_ACCEPTED",
    "SPEC_COMMITTED",
    "SPEC_POS",
    "SPEC_PROPOSED",
    "SPEC_ROUNDS",
    "Backend",
    "BackendError",
    "Manifest",
    "ModelFile",
    "hardware_info",
    "make_backend",
    "normaliser_for",
    "response_extras_for",
    "scrape_endpoint",
]
