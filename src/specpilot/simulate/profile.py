"""Hardware profiles as data: a step-cost curve measured elsewhere (a GPU, another CPU) that
replaces the pilot's own costs in a what-if simulation, while acceptance stays the pilot's
(it belongs to the draft, the target and the tasks, not to the hardware).

A profile file (YAML or JSON) says where its figures came from; a profile without ``source``
is refused: a simulation never runs on a roofline or a guess without saying so.

.. code-block:: yaml

    name: H100-80GB vLLM 0.11 Llama-3.1-8B bf16
    source: vllm bench latency --batch-size 1 2 4 8 16 32, 2026-11-20, our lab   # required
    slots: 64                      # requests decoding at once (max_num_seqs)
    overhead_s: 0.004              # per request outside the engine (HTTP, tokenizer)
    plain:                         # one decode step, k = 0, by batch size
      - {batch: 1, step_s: 0.0071}
      - {batch: 32, step_s: 0.0112}
    speculative:                   # one speculative round (draft + verify) at k drafts
      k: 3
      steps:
        - {batch: 1, step_s: 0.0105}
        - {batch: 32, step_s: 0.0240}
    prefill:                       # prompt tokens -> seconds (a line through the points)
      - {tokens: 128, seconds: 0.011}
      - {tokens: 2048, seconds: 0.095}

Batch sizes between the points are interpolated linearly, beyond them the line through the
last two points extends (said in ``describe``).

    >>> p = HardwareProfile.model_validate({"name": "x", "source": "y", "slots": 8,
    ...     "plain": [{"batch": 1, "step_s": 0.01}, {"batch": 8, "step_s": 0.024}],
    ...     "prefill": [{"tokens": 100, "seconds": 0.01}]})
    >>> p.slots, p.speculative is None
    (8, True)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import yaml
from pydantic import Field, ValidationError, model_validator

from specpilot.errors import InputFileError
from specpilot.simulate.costs import ArmCosts, StepCurve, fit_linear
from specpilot.validation import StrictModel, format_errors
from specpilot.yamlpos import LineMap, yaml_error_text


class StepPoint(StrictModel):
    batch: int = Field(ge=1)
    step_s: float = Field(gt=0)


class PrefillPoint(StrictModel):
    tokens: int = Field(ge=1)
    seconds: float = Field(gt=0)


class SpeculativeSteps(StrictModel):
    k: int = Field(ge=1)
    steps: list[StepPoint] = Field(min_length=1)


class HardwareProfile(StrictModel):
    name: str = Field(min_length=1)
    source: str = Field(min_length=1, description="where the figures were measured: required")
    hardware: str = ""
    slots: int = Field(ge=1)
    overhead_s: float = Field(default=0.0, ge=0)
    plain: list[StepPoint] = Field(min_length=1)
    speculative: SpeculativeSteps | None = None
    prefill: list[PrefillPoint] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> HardwareProfile:
        for name, pts in (
            ("plain", self.plain),
            ("speculative.steps", self.speculative.steps if self.speculative else []),
        ):
            b = [p.batch for p in pts]
            if len(set(b)) != len(b):
                raise ValueError(f"{name}: batch sizes repeat ({b}); give one step_s per batch")
        return self


def load_profile(path: str | Path) -> HardwareProfile:
    p = Path(path)
    where = str(p)
    if not p.is_file():
        raise InputFileError(f"{where}: no such profile file", fix="give a YAML or JSON profile")
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except yaml.YAMLError as exc:
        msg, fix = yaml_error_text(where, exc)
        raise InputFileError(msg, fix=fix) from None
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{where}:{exc.lineno}: {exc.msg}", fix="fix the JSON") from None
    if not isinstance(data, dict):
        raise InputFileError(f"{where}: expected a mapping (name:, source:, slots:, plain:, ...)")
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        lines = LineMap.from_text(text) if p.suffix != ".json" else None
        raise InputFileError(format_errors(exc, where, root=HardwareProfile, lines=lines)) from None


def apply(costs: ArmCosts, profile: HardwareProfile, path: str = "") -> ArmCosts:
    """``costs`` with the profile's step, prefill, slots and overhead; the pilot's acceptance.
    A speculative arm needs the profile's ``speculative`` steps at the arm's k."""
    if costs.k is None:
        pts = profile.plain
    else:
        spec = profile.speculative
        if spec is None:
            raise InputFileError(
                f"{path or profile.name}: arm {costs.arm} speculates (k={costs.k}) and the "
                "profile has no speculative steps",
                fix="add speculative: {k: ..., steps: [...]}",
            )
        if spec.k != costs.k:
            raise InputFileError(
                f"{path or profile.name}: speculative.k is {spec.k}, arm {costs.arm} drafts "
                f"k={costs.k} (its acceptance was measured at that k)",
                fix=f"measure the profile at k={costs.k}",
            )
        pts = spec.steps
    xs, ys = np.array([p.batch for p in pts], float), np.array([p.step_s for p in pts])
    step = StepCurve(
        {p.batch: p.step_s for p in pts}, fit_linear(xs, ys), len(pts), "profile", interpolate=True
    )
    pre = fit_linear(
        np.array([p.tokens for p in profile.prefill], float),
        np.array([p.seconds for p in profile.prefill]),
    )
    where = f"profile {profile.name} ({profile.source}{'; ' + profile.hardware if profile.hardware else ''})"
    return dataclasses.replace(
        costs,
        step=step,
        prefill=pre,
        slots=profile.slots,
        overhead_s=profile.overhead_s,
        profile=f"{where}; acceptance from {costs.profile}",
    )
