"""The report document's JSON Schema (``report.schema.json``, draft 2020-12) and a validator.

>>> load_schema()["title"]
'specpilot report'
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

SCHEMA_FILE = "report.schema.json"


@cache
def load_schema() -> dict[str, Any]:
    text = resources.files("specpilot.report").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return dict(json.loads(text))


def validate(doc: dict[str, Any]) -> list[str]:
    """Schema violations as 'path: message' lines (empty: valid). Needs ``jsonschema``."""
    try:
        import jsonschema
    except ImportError as exc:
        raise RuntimeError(
            "validating the report needs jsonschema: pip install jsonschema"
        ) from exc
    v = jsonschema.Draft202012Validator(load_schema())
    return [f"/{'/'.join(map(str, e.path))}: {e.message}" for e in v.iter_errors(doc)]
