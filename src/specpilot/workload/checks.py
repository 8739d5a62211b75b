"""The quality checks a task group declares in the workload YAML (R7): one pydantic model a
kind, told apart by ``kind``; ``specpilot.quality.checks`` resolves and runs them.

A string value "meta:KEY" (dotted for nested keys) is read from each prompt's ``meta``: one
declaration serves every prompt (its schema, its tests, its figures). A prompt whose value is
null skips that check.

    >>> from pydantic import TypeAdapter
    >>> TypeAdapter(CheckModel).validate_python({"kind": "regex", "pattern": "^def "}).severity
    'key'
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from specpilot.validation import StrictModel

MetaRef = Annotated[str, Field(pattern=r"^meta:[A-Za-z0-9_.]+$")]


class _Check(StrictModel):
    name: str | None = Field(None, min_length=1, max_length=80)
    severity: Literal["key", "minor"] = "key"


class JsonSchemaCheck(_Check):
    """The answer holds one JSON value (a fenced block is fine) that validates."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    kind: Literal["json_schema"]
    json_schema: dict[str, Any] | MetaRef = Field(alias="schema")


class JsonFieldsCheck(_Check):
    """Fields of the answer's JSON equal the expected ones (strings compared case- and
    whitespace-insensitively unless case_sensitive; numbers within tolerance)."""

    kind: Literal["json_fields"]
    expected: dict[str, Any] | list[Any] | MetaRef
    tolerance: float = Field(0.0, ge=0.0)
    case_sensitive: bool = False


class CodeTestsCheck(_Check):
    """The answer's Python code block compiles and passes the tests (run in the sandbox)."""

    kind: Literal["code_tests"]
    tests: list[str] | dict[str, str] | MetaRef
    entry_point: str | None = None


class RegexCheck(_Check):
    kind: Literal["regex"]
    pattern: str = Field(min_length=1)
    must_match: bool = True  # false: the pattern is forbidden
    ignore_case: bool = False
    multiline: bool = False
    dotall: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:

        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"does not compile: {exc}") from None
        return v


class RequiredCheck(_Check):
    kind: Literal["required"]
    all_of: list[str] | MetaRef = Field(default_factory=list)
    any_of: list[str] | MetaRef = Field(default_factory=list)
    case_sensitive: bool = False


class ForbiddenCheck(_Check):
    kind: Literal["forbidden"]
    terms: list[str] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)
    case_sensitive: bool = False


class NumericValue(StrictModel):
    value: float
    unit: str = ""
    tolerance: float = Field(0.0, ge=0.0)  # absolute
    rel_tolerance: float = Field(0.0, ge=0.0)
    label: str | None = None  # e.g. "contract amount"


class NumericCheck(_Check):
    """Figures must appear in the answer, unchanged: strings such as "5000元", "11月18日",
    "8:30" (exact after normalisation) or values with a unit and a tolerance."""

    kind: Literal["numeric"]
    values: list[str | NumericValue] | MetaRef


class LengthCheck(_Check):
    """The answer's length within [min, max] in ``unit`` (``auto``: words for Latin text, chars
    for CJK); ``min_fraction``/``max_fraction`` of ``of`` (e.g. the prompt's target length)."""

    kind: Literal["length"]
    unit: Literal["chars", "words", "auto"] | MetaRef = "auto"
    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=1)
    min_fraction: float | None = Field(None, ge=0.0)
    max_fraction: float | None = Field(None, gt=0.0)
    of: int | MetaRef | None = None

    @model_validator(mode="after")
    def _bounds(self) -> LengthCheck:
        if (self.min_fraction is not None or self.max_fraction is not None) and self.of is None:
            raise ValueError("min_fraction/max_fraction need 'of' (a number or meta:KEY)")
        if self.min is None and self.max is None and self.min_fraction is self.max_fraction is None:
            raise ValueError("a length check needs min, max, min_fraction or max_fraction")
        return self


class LinesCheck(_Check):
    """Non-empty lines of the answer within [min, max]."""

    kind: Literal["lines"]
    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=1)


CheckModel = Annotated[
    JsonSchemaCheck
    | JsonFieldsCheck
    | CodeTestsCheck
    | RegexCheck
    | RequiredCheck
    | ForbiddenCheck
    | NumericCheck
    | LengthCheck
    | LinesCheck,
    Field(discriminator="kind"),
]
CHECK_KINDS = (
    "json_schema",
    "json_fields",
    "code_tests",
    "regex",
    "required",
    "forbidden",
    "numeric",
    "length",
    "lines",
)
