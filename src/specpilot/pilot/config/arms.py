"""The arms of a pilot file: one model per engine (``engine:`` picks it), each with its role,
its engine options (``pilot.config.options``), and for an arm given by ``url:`` its
credentials (``pilot.config.credentials``)."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field, model_validator

from specpilot.pilot.config.credentials import check_headers
from specpilot.pilot.config.options import (
    BudgetModel,
    BuiltinOptions,
    LlamaCppOptions,
    SglangOptions,
    VllmOptions,
)
from specpilot.validation import FieldProblem, StrictModel

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
Device = Annotated[int, Field(ge=0)]
# an arm's GPUs (pilot.plan.placement): "auto", a pool split per process, or a list per process
Devices: TypeAlias = Literal["auto"] | tuple[tuple[Device, ...], ...] | tuple[Device, ...]


class ArmBase(StrictModel):
    name: str = Field(pattern=NAME_PATTERN)
    role: Literal["baseline", "speculative", "alternative", "control", "extra"]
    url: str | None = None  # an endpoint someone else runs: no start, no drill, partial manifest
    # replicas of one configuration someone else runs, each one of the arm's processes in the
    # episode design (url: is then the first); pilot.config.file checks their count
    urls: list[str] | None = Field(None, min_length=1)
    # a baseline by URL may take the capacity probe's load (target_utilization needs it)
    probe: bool = False
    compare_to: str | None = None
    budget: BudgetModel = Field(default_factory=lambda: BudgetModel())
    drill: bool | None = None  # None: drill the speculative arm
    model_name: str | None = None  # the model id sent in requests (default: the endpoint's)
    # an arm by URL: headers sent with every request to it, "${VAR}" read from the environment
    # at run time; api_key_env: NAME is Authorization: Bearer ${NAME} (pilot.config.credentials)
    headers: dict[str, str] = Field(default_factory=dict)
    api_key_env: str | None = None
    # the GPUs its processes run on (an arm specpilot starts): "auto" (the pilot picks free
    # ones), [0, 1, 2, 3] (taken in order, tensor_parallel_size a process) or [[0], [1]] (one
    # list per process); None: not placed, every process sees every device
    devices: Devices | None = None

    @model_validator(mode="before")
    @classmethod
    def _first_replica(cls, data: object) -> object:
        """``urls:`` given: ``url`` is its first replica (every rule for an arm by URL holds)."""
        if not isinstance(data, dict) or data.get("urls") is None:
            return data
        urls = data["urls"]
        first = urls[0] if isinstance(urls, list) and urls else None
        # a stored config holds both (url: derived as the first replica): the same, accepted
        if data.get("url") is not None and data["url"] != first:
            raise FieldProblem(
                "give url: (one endpoint) or urls: (its replicas), not both",
                fix="list every replica under urls: and remove url:",
                path=("url",),
            )
        return {**data, "url": first} if isinstance(first, str) else data

    @model_validator(mode="after")
    def _replicas(self) -> ArmBase:
        urls = self.urls or []
        twice = sorted({u for u in urls if urls.count(u) > 1})
        if twice:
            raise FieldProblem(
                f"arm {self.name!r}: replica {twice[0]} is listed twice: a replica is one process",
                fix="list each replica once under urls:",
                path=("urls",),
            )
        return self

    @property
    def replicas(self) -> list[str]:
        """The endpoints of an arm by URL, one per process (empty: specpilot starts it)."""
        return list(self.urls) if self.urls else [self.url] if self.url is not None else []

    @model_validator(mode="before")
    @classmethod
    def _devices_shape(cls, data: object) -> object:
        """One message for a ``devices:`` of the wrong shape (not pydantic's one per union
        member)."""
        if not isinstance(data, dict) or data.get("devices") in (None, "auto"):
            return data
        d = data["devices"]
        lists = [p for p in d if isinstance(p, list)] if isinstance(d, list) else []
        flat = isinstance(d, list) and not lists and all(_device(x) for x in d)
        nested = (
            bool(lists) and len(lists) == len(d) and all(p and all(map(_device, p)) for p in lists)
        )
        if not d or not (flat or nested):
            raise FieldProblem(
                f"arm {data.get('name')!r}: devices {_said(d)}: give auto, device numbers "
                "([0, 1, 2, 3]) or one non-empty list of them per process ([[0], [1]])",
                fix="e.g. devices: [[0], [1]] for two processes on GPUs 0 and 1",
                path=("devices",),
            )
        return data

    @model_validator(mode="after")
    def _devices(self) -> ArmBase:
        d = self.devices
        if d is None:
            return self
        if self.url is not None:
            raise FieldProblem(
                f"arm {self.name!r}: devices are for an engine specpilot starts, not one by url:",
                fix="remove devices: the endpoint's own operator placed it",
                path=("devices",),
            )
        if d == "auto":
            return self
        lists: list[tuple[int, ...]] = [p for p in d if isinstance(p, tuple)]
        flat = tuple(x for x in d if isinstance(x, int))
        for p in lists or [flat]:
            twice = sorted({x for x in p if list(p).count(x) > 1})
            if twice:
                raise FieldProblem(
                    f"arm {self.name!r}: device {twice[0]} is listed twice in {_said(p)}",
                    fix="list each device once (a process shares one with another arm "
                    "by naming it in both arms' devices:)",
                    path=("devices",),
                )
        return self

    @model_validator(mode="after")
    def _credentials(self) -> ArmBase:
        if (self.headers or self.api_key_env) and self.url is None:
            raise FieldProblem(
                f"arm {self.name!r}: headers and api_key_env are for an arm given by url:",
                fix="remove them: specpilot starts this engine itself, without credentials",
                path=("headers" if self.headers else "api_key_env",),
            )
        check_headers(self.headers, self.api_key_env)
        return self


class _DefaultOptions(ArmBase):
    """An arm whose engine has defaults: started without ``options:`` it runs them."""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: object) -> object:
        return _started_defaults(data)


class BuiltinArm(_DefaultOptions):
    engine: Literal["builtin"]
    options: BuiltinOptions | None = None  # None: the defaults, or by URL: what it runs unknown


class LlamaCppArm(_DefaultOptions):
    engine: Literal["llamacpp"]
    options: LlamaCppOptions | None = None  # None: the defaults, or by URL: what it runs unknown


class VllmArm(ArmBase):
    engine: Literal["vllm"]
    options: VllmOptions | None = None  # None only with url


class SglangArm(ArmBase):
    engine: Literal["sglang"]
    options: SglangOptions | None = None


class OpenAIArm(ArmBase):
    engine: Literal["openai"]
    url: str  # required: specpilot cannot start a managed API
    options: None = None


Arm = Annotated[
    BuiltinArm | LlamaCppArm | VllmArm | SglangArm | OpenAIArm, Field(discriminator="engine")
]
# engine -> its arm model (an arm specpilot starts)
ARM_MODELS: dict[str, type[BuiltinArm | LlamaCppArm | VllmArm | SglangArm]] = {
    "builtin": BuiltinArm,
    "llamacpp": LlamaCppArm,
    "vllm": VllmArm,
    "sglang": SglangArm,
}


def _device(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _said(devices: object) -> str:
    """Devices as a pilot file writes them: ``(0, (1, 2))`` -> ``[0, [1, 2]]``."""
    if isinstance(devices, (tuple, list)):
        return "[" + ", ".join(_said(x) for x in devices) + "]"
    return str(devices)


def _started_defaults(data: object) -> object:
    """An arm specpilot starts without ``options:`` runs its engine's defaults; an arm by URL
    keeps none (what the endpoint runs is not known from the file)."""
    if not isinstance(data, dict) or data.get("options") is not None:
        return data
    if data.get("url") is None and data.get("urls") is None:
        return {**data, "options": {}}
    return data
