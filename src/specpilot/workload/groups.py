"""Task groups: prompt sets with their length targets, sampling settings, SLOs and splits.

Four groups ship with specpilot, written for this project (``data/*.jsonl``):

=============  ==================================================  =========  ========  =====
group          what                                                sampling   max_tok   SLO
=============  ==================================================  =========  ========  =====
zh_business    Chinese notices, summaries, reply drafts (figures)  T=0.7      ~192      1.5 s / 20 s
code           Python function stub + docstring + asserts          greedy     256       1 s / 25 s
structured     extract/produce JSON matching a JSON Schema         greedy     160       1 s / 12 s
longform       long English or Chinese prose                       T=0.8      512       2 s / 60 s
=============  ==================================================  =========  ========  =====

Every prompt carries a fixed split: ``eval`` (held out: the pilot measures on these, and no
draft may be trained on them), ``dev`` and ``train`` (a draft may be distilled on these). The
split is written in the data file, so it never depends on a seed.

    >>> from specpilot.workload.groups import load_group, group_prompts, training_prompts
    >>> g = load_group("code")
    >>> len(g.prompts) >= 40, g.sampling.temperature, g.slo.deadline_s
    (True, 0.0, 25.0)
    >>> ev = {p.id for p in group_prompts("code", "eval")}
    >>> ev.isdisjoint(p.id for p in training_prompts("code"))
    True

Users add their own groups from prompt files (``workload.prompts``: :func:`import_prompts`).

Quality checks (run by ``specpilot.quality.checks``) are declared per group in ``checks``
(mappings in the workload's ``CheckModel`` form; ``quality_checks`` are their names) and may be
added per prompt (``checks`` in the data file). Group declarations read per-prompt values with
``meta:KEY`` from each prompt's ``meta``: ``figures`` (zh_business amounts, dates, times,
phone numbers) and ``key_terms`` (facts without digits, for prompts without figures),
``entry_point``/``tests``/``reference`` (code), ``schema``/``expected``
(structured; ``expected`` is null for "generate" prompts, which skip that check),
``target_length``/``length_unit`` (longform).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from specpilot.definitions import SLOCondition
from specpilot.errors import ConfigError
from specpilot.workload.prompts import (
    SPLITS,
    Prompt,
    hash_split,  # noqa: F401  (re-exported: its home is workload.prompts)
    import_prompts,  # noqa: F401  (re-exported: its home is workload.prompts)
    parse_specpilot_lines,
)

SPLIT_SELECTORS = ("train", "dev", "eval", "train+dev", "all")
BUILTIN_GROUPS = ("zh_business", "code", "structured", "longform")


@dataclass(frozen=True)
class LengthSpec:
    """A distribution of ``max_tokens`` per request (the output-length target).

    dist: ``fixed`` (always ``mean``), ``uniform`` (integers in [min, max]) or ``lognormal``
    (median ``mean``, shape ``sigma``), always clipped to [min, max]. ``ignore_eos``: every
    request runs to its ``max_tokens`` (as vLLM's and GuideLLM's fixed-length benchmarks do), so
    both arms of a pair do the same work even where sampling ends one of them early.
    """

    mean: int
    dist: str = "fixed"
    min: int = 1
    max: int | None = None
    sigma: float = 0.5
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.dist not in ("fixed", "uniform", "lognormal"):
            raise ConfigError(f"length dist {self.dist!r}: use fixed, uniform or lognormal")
        if self.mean < 1 or self.min < 1 or (self.max is not None and self.max < self.min):
            raise ConfigError(f"bad length spec {self}: need 1 <= min <= max and mean >= 1")

    @property
    def upper(self) -> int:
        return self.max if self.max is not None else max(self.mean * 4, self.min)

    def sample(self, rng: np.random.Generator) -> int:
        if self.dist == "fixed":
            v = float(self.mean)
        elif self.dist == "uniform":
            v = float(rng.integers(self.min, self.upper + 1))
        else:
            v = float(self.mean * math.exp(self.sigma * rng.standard_normal()))
        return int(min(max(round(v), self.min), self.upper))


@dataclass(frozen=True)
class Sampling:
    """Sampling settings sent with every request of a group (``temperature == 0``: greedy)."""

    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class SLO:
    """The group's service objectives: per request, time to first content and the end-to-end
    deadline (they decide on time); per cell, percentile conditions (they pass or fail an
    arm's group at a load level: ``definitions.SLOCondition``)."""

    ttft_s: float
    deadline_s: float | None  # None: ``slo.unloaded_x``, until a pilot's probe measures it
    conditions: tuple[SLOCondition, ...] = ()


@dataclass(frozen=True)
class TaskGroup:
    name: str
    description: str
    prompts: tuple[Prompt, ...]
    output: LengthSpec
    sampling: Sampling
    slo: SLO
    input_tokens: tuple[int, int] = (0, 0)  # approximate range of the prompts (SmolLM2 tokens)
    quality_checks: tuple[str, ...] = ()  # the names of ``checks``
    checks: tuple[dict[str, Any], ...] = field(default=(), hash=False, compare=False)

    def split(self, selector: str = "eval") -> list[Prompt]:
        return select_split(self.prompts, selector)

    def with_prompts(self, prompts: Iterable[Prompt]) -> TaskGroup:
        return replace(self, prompts=tuple(prompts))


def select_split(prompts: Iterable[Prompt], selector: str) -> list[Prompt]:
    """Prompts of one split: ``train``, ``dev``, ``eval``, ``train+dev`` or ``all``."""
    if selector not in SPLIT_SELECTORS:
        raise ConfigError(f"split {selector!r}: use one of {', '.join(SPLIT_SELECTORS)}")
    wanted = {"train+dev": {"train", "dev"}, "all": set(SPLITS)}.get(selector, {selector})
    return [p for p in prompts if p.split in wanted]


# The built-in groups' quality checks (R7: key errors first). Severity "key" fails the answer,
# "minor" is reported only.
_CJK = "[\u4e00-\u9fff]"
_CHECKS: dict[str, tuple[dict[str, Any], ...]] = {
    "zh_business": (
        # Every amount, date, time and phone number of the instruction, unchanged.
        {"kind": "numeric", "name": "figures_preserved", "values": "meta:figures"},
        # Facts without digits (两个工作日, 周四, 人才库) where a prompt has no figures.
        {"kind": "required", "name": "key_terms", "all_of": "meta:key_terms"},
        {
            "kind": "regex",
            "name": "answer_in_chinese",
            "pattern": f"{_CJK}(.*?{_CJK}){{9}}",
            "dotall": True,
        },
        {
            "kind": "forbidden",
            "name": "no_placeholders",
            "severity": "minor",
            "patterns": [
                r"[\[【(（]\s*(XX+|xx+|某某|姓名|日期|公司名称|部门名称)\s*[\]】)）]",
                r"X{3,}",
            ],
        },
    ),
    "code": (
        {
            "kind": "code_tests",
            "name": "tests_pass",
            "tests": "meta:tests",
            "entry_point": "meta:entry_point",
        },
        {
            "kind": "regex",
            "name": "code_block",
            "severity": "minor",
            "pattern": r"```(python|py)\s*\n",
        },
    ),
    "structured": (
        {"kind": "json_schema", "name": "schema_valid", "schema": "meta:schema"},
        {"kind": "json_fields", "name": "expected_fields", "expected": "meta:expected"},
        {
            "kind": "regex",
            "name": "json_only",
            "severity": "minor",
            "pattern": r"\A\s*(```(json)?\s*\n)?\s*[\[{][\s\S]*[\]}]\s*(```)?\s*\Z",
        },
    ),
    "longform": (
        # A quarter of the asked length: the group's max_tokens (384-640) cannot hold the whole
        # 600-1000 words, so the check is what a full-budget answer must at least reach.
        {
            "kind": "length",
            "name": "length_reached",
            "unit": "meta:length_unit",
            "min_fraction": 0.25,
            "of": "meta:target_length",
        },
        {"kind": "lines", "name": "paragraphs", "severity": "minor", "min": 2},
    ),
}

# Defaults per built-in group. Input ranges: min and max over the prompts, measured with the
# SmolLM2 tokenizer on the user message (chat template not included). The SLOs are starting
# points for a 2-core CPU pilot; a workload YAML overrides them.
_BUILTIN: dict[str, dict[str, Any]] = {
    "zh_business": dict(
        description="Chinese business instructions: notices, summaries, reply drafts",
        output=LengthSpec(192, "lognormal", min=96, max=320, sigma=0.25),
        sampling=Sampling(temperature=0.7, top_p=0.9),
        slo=SLO(ttft_s=1.5, deadline_s=20.0),
        input_tokens=(95, 195),
    ),
    "code": dict(
        description="Python functions: a stub with a docstring and tests to satisfy",
        output=LengthSpec(256),
        sampling=Sampling(temperature=0.0),
        slo=SLO(ttft_s=1.0, deadline_s=25.0),
        input_tokens=(121, 214),
    ),
    "structured": dict(
        description="Extract or produce JSON that matches a given JSON Schema",
        output=LengthSpec(160),
        sampling=Sampling(temperature=0.0),
        slo=SLO(ttft_s=1.0, deadline_s=12.0),
        input_tokens=(118, 317),
    ),
    "longform": dict(
        description="Long English or Chinese prose: stories, essays, reports",
        output=LengthSpec(512, "uniform", min=384, max=640),
        sampling=Sampling(temperature=0.8, top_p=0.95),
        slo=SLO(ttft_s=2.0, deadline_s=60.0),
        input_tokens=(21, 104),
    ),
}
for _name, _spec in _BUILTIN.items():
    _spec["checks"] = _CHECKS[_name]
    _spec["quality_checks"] = tuple(c["name"] for c in _CHECKS[_name])


def builtin_group_names() -> list[str]:
    return list(BUILTIN_GROUPS)


@cache
def load_group(name: str) -> TaskGroup:
    """A built-in group with all its prompts (every split)."""
    if name not in _BUILTIN:
        raise ConfigError(
            f"unknown group {name!r}: built-in groups are {', '.join(BUILTIN_GROUPS)}"
        )
    text = (
        resources.files("specpilot.workload")
        .joinpath("data")
        .joinpath(f"{name}.jsonl")
        .read_text("utf-8")
    )
    prompts = tuple(parse_specpilot_lines(text.splitlines(), name, "data/" + name + ".jsonl"))
    return TaskGroup(name=name, prompts=prompts, **_BUILTIN[name])


def group_prompts(name: str, split: str = "eval") -> list[Prompt]:
    """The prompts of a built-in group in one split (``eval`` is the held-out split)."""
    return load_group(name).split(split)


def training_prompts(name: str) -> list[Prompt]:
    """Prompts a draft model may be trained on (``train`` + ``dev``); never the ``eval`` ones."""
    return group_prompts(name, "train+dev")
