"""One adapter per engine specpilot starts: everything the pilot needs to know about an engine,
so that ``pilot/`` asks the adapter and holds no engine names.

An adapter gives its engine's options model (a pilot file's ``arms[].options`` and ``specpilot
load --start --engine-opt``), the backend those options start, the speculative strategy they
switch on, the settings frozen across compared arms and the capacity settings, the option
changes that switch speculation off, the model files its options name, the files the pilot must
prepare before the engine can load them (``Asset``), how the rollback drill switches it, the
weight format the running engine reports having chosen, how to start the same configuration
outside the pilot (``launch``: a rollout), and what one of its processes needs of a GPU
(``gpu``: devices and memory, for the pilot's placement). Adding an engine is one module
(``backends/<engine>_arm.py``) registered in ``backends.adapters.ADAPTERS``, plus its tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from specpilot.backends.gpus import GpuNeed
from specpilot.backends.protocol import Backend
from specpilot.records import StrategySpec
from specpilot.validation import StrictModel


@dataclass(frozen=True)
class Asset:
    """A file the pilot prepares before the engine starts (``pilot.plan.assets``): ``kind`` says
    what (``gguf_draft``: a draft as one GGUF file; ``hf_target`` / ``hf_draft``: the target or a
    draft as a Hugging Face directory), from ``source`` (an option's value) on ``target``."""

    kind: str
    source: str | None
    target: str | None = None


@dataclass(frozen=True)
class ModelField:
    """An option naming a model: its field, its value, and whether it is always a path (else
    it may be a hub id the engine resolves from its local cache)."""

    field: str
    value: str | None
    always_path: bool
    hub_ids: bool = False  # a missing path's fix mentions hub ids


@dataclass(frozen=True)
class Launch:
    """How to start a configuration outside the pilot (a rollout): ``argv`` as the engine's
    project names its program, the variables it needs (``env``), files read beside the
    command (``files``: a name's suffix -> text) and what could not be carried over
    (``notes``)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def renamed(argv: Sequence[str], last: str, program: Sequence[str]) -> list[str]:
    """``argv`` with everything up to ``last`` (the pilot's interpreter and module path)
    replaced by ``program``.

    >>> renamed(["/venv/bin/python", "-m", "specpilot.cli", "serve", "-k", "3"], "serve",
    ...         ["specpilot", "serve"])
    ['specpilot', 'serve', '-k', '3']
    """
    return [*program, *argv[list(argv).index(last) + 1 :]]


class EngineAdapter:
    """The base every engine's adapter fills in (module docstring)."""

    engine: ClassVar[str]
    options: ClassVar[type[StrictModel]]
    # how the rollback drill switches speculation off: at run time on the same process
    # (``runtime_switch``), or by restarting the engine without it (``restart``)
    switch: ClassVar[str] = "restart"
    # seconds from start to healthy, until this machine has measured its own (pilot.eta.remaining)
    start_prior_s: ClassVar[float] = 30.0
    # whether, under speculation, every token's reported log-prob is the target's own as it
    # is without speculation (True: the builtin engine, tests/test_quality_sampled.py); where
    # not known, the quality gate compares log-probs between arms only after the candidate's
    # passed the compatibility suite's logprobs check (quality.summary.gate)
    target_logprobs: ClassVar[bool] = False
    # frozen setting -> the option that sets it, where the names differ (the R6 error's fix)
    option_of: ClassVar[dict[str, str]] = {"target": "model", "tokenizer_sha256": "model"}
    # what a rollout says of this engine's launch flags (names by release, the pilot's own)
    rollout_note: ClassVar[str] = ""

    @property
    def in_place(self) -> bool:
        """Speculation can be switched off and on inside one running process."""
        return self.switch == "runtime_switch"

    @property
    def drill_restarts(self) -> int:
        """Engine restarts the rollback drill costs (off and on again, unless in place)."""
        return 0 if self.in_place else 2

    def backend(
        self,
        o: Any,
        *,
        dtype: str | None,
        files: Mapping[str, str],
        port: int | None,
        env: Mapping[str, str] | None = None,
    ) -> Backend:
        """The (not started) backend for options ``o``; ``dtype``: the weight format every arm
        of the pilot pins (engines that choose one); ``files``: the prepared ``assets``;
        ``env``: variables its process gets (the placement's ``CUDA_VISIBLE_DEVICES``)."""
        raise NotImplementedError

    def gpu(self, o: Any) -> GpuNeed | None:
        """What one process started with options ``o`` needs of its GPUs; None: it runs on
        the CPU (its devices then only set ``CUDA_VISIBLE_DEVICES``)."""
        return None

    def strategy(self, o: Any) -> StrategySpec:
        raise NotImplementedError

    def frozen(
        self, o: Any, cores: int | None
    ) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
        """(the target it loads, the frozen settings, the capacity settings)."""
        raise NotImplementedError

    def plain(self) -> dict[str, Any]:
        """The option changes that switch speculation off (the drill's plain restart)."""
        return {"draft": None, "speculative_config": None}

    def models(self, o: Any) -> list[ModelField]:
        return [ModelField("model", o.model, False), ModelField("draft", o.draft, False)]

    def assets(self, o: Any) -> dict[str, Asset]:
        """Option name -> the file the pilot prepares for it (none by default)."""
        return {}

    def launch(self, o: Any, *, dtype: str | None, files: Mapping[str, str], port: int) -> Launch:
        """The command that starts options ``o`` as the pilot started them (the same builder),
        outside the pilot: a rollout's launch script."""
        raise NotImplementedError

    def scope_args(self, aliases: Sequence[str], strategy_file: str) -> list[str]:
        """An engine switched in place: the launch flags that answer each of ``aliases`` as a
        model id and apply a strategy table at start (none: it has no runtime scopes)."""
        return []

    def chosen_format(self, manifest: Mapping[str, Any]) -> str | None:
        """The weight format the running engine reports having chosen (None: it chooses none)."""
        return None

    def measured_at_start(self, manifest: Mapping[str, Any]) -> bool:
        """This start measured something the next starts read from a cache (so the pilot
        restarts it once: every compared engine then starts the same way)."""
        return False


def default_target() -> str:
    from specpilot.engine.loader import default_target_path

    return str(default_target_path())


__all__ = ["Asset", "EngineAdapter", "Launch", "ModelField", "default_target", "renamed"]
