"""Two runs of one schedule compared: each cell's outcome and interval before and after, what
changed in the config, and what changed in the frozen settings the arms' engines reported
(target and draft hashes, engine version, the frozen manifest's hash).

Pure functions over report documents (``report.json``): ``summary_of(doc)`` keeps what a
comparison needs of one report (small enough to store in a rerun's pilot file, so ``specpilot
report`` can rebuild the section without the previous run's files), ``compare(old, new)`` sets
two summaries side by side, and ``first_difference`` names the first request where two
schedules part (two schedules are one when every request and every phase is the same).

    >>> fp = schedule_fingerprint({"seed": 1, "phases": [], "requests": [
    ...     {"phase": "peak", "index": 0, "group": "code", "prompt_id": "c-1", "send_t": 0.0}]})
    >>> fp["requests"][0][:4], first_difference(fp, fp)
    (['peak-000000', 'code', 'c-1', 0.0], None)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "compare",
    "config_changes",
    "first_difference",
    "frozen_settings",
    "previous_run",
    "schedule_fingerprint",
    "summary_of",
]

Doc = Mapping[str, Any]
# the parts of a stored schedule (``Schedule.to_dict``) that make it the same traffic; the
# pilot's additions (design, capacity, previous_run, workload_dir) are not the schedule
_SCHEDULE_KEYS = ("version", "name", "seed", "config_sha256", "phases", "groups", "stages")
_DIGITS = 6  # a cell's interval kept to 6 decimals (as the golden cells test compares them)


def _sha(x: Any) -> str:
    blob = json.dumps(x, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def schedule_fingerprint(schedule: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What names a schedule in a report: its hash and, per request, its id, group, prompt,
    send time and a digest of everything sent (None: the pilot stored no schedule)."""
    if not schedule or not isinstance(schedule.get("requests"), list):
        return None
    requests = [
        [
            f"{r.get('phase')}-{int(r.get('index', -1)):06d}",
            r.get("group"),
            r.get("prompt_id"),
            round(float(r.get("send_t") or 0.0), 4),
            _sha(r)[:16],
        ]
        for r in schedule["requests"]
    ]
    core = {k: schedule.get(k) for k in _SCHEDULE_KEYS}
    return {
        "sha256": _sha({**core, "requests": [r[-1] for r in requests]}),
        "seed": schedule.get("seed"),
        "phases": [
            {
                "name": p.get("name"),
                "requests": p.get("requests"),
                "duration_s": p.get("duration_s"),
            }
            for p in schedule.get("phases") or []
            if isinstance(p, Mapping)
        ],
        "requests": requests,
    }


def _request_text(row: Sequence[Any]) -> str:
    return f"group {row[1]}, prompt {row[2]}, sent at {row[3]:g} s"


def first_difference(old: Doc, new: Doc) -> str | None:
    """None when the two fingerprints are one schedule, else the first request (or phase) where
    they part, in words."""
    if old.get("sha256") == new.get("sha256"):
        return None
    a, b = old.get("requests") or [], new.get("requests") or []
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x[0] != y[0]:
            return (
                f"request {i + 1} of {len(a)}: {x[0]} ({_request_text(x)}) in the first, "
                f"{y[0]} ({_request_text(y)}) in the second"
            )
        if x != y:
            if x[1:4] == y[1:4]:
                return (
                    f"request {x[0]} ({_request_text(x)}): the same slot, but what is sent "
                    "differs (messages, lengths, sampling or deadline)"
                )
            return (
                f"request {x[0]}: {_request_text(x)} in the first, {_request_text(y)} in the second"
            )
    if len(a) != len(b):
        longer, which = (a, "first") if len(a) > len(b) else (b, "second")
        extra = longer[min(len(a), len(b))]
        return (
            f"request {extra[0]} ({_request_text(extra)}) is in the {which} only "
            f"({len(a)} requests against {len(b)})"
        )
    for p, q in zip(old.get("phases") or [], new.get("phases") or [], strict=False):
        if p != q:
            return f"phase {p.get('name')}: {p} in the first, {q} in the second"
    return "the same requests, but the schedules' seeds, groups or stages differ"


def _strategy_text(s: Mapping[str, Any] | None) -> str:
    if not s or s.get("kind") in (None, "none"):
        return "plain"
    what = s.get("draft_id") or s.get("ngram_type") or ""
    return f"{s['kind']} k={s.get('k')} {what}".strip()


def frozen_settings(arm: Doc) -> dict[str, Any]:
    """One arm's frozen settings as reported, flat: engine and version, the frozen manifest's
    hash, each model file's sha256, the frozen settings the pilot checked (R6), the strategy."""
    m = arm.get("manifest") or {}
    out: dict[str, Any] = {"strategy": _strategy_text(arm.get("strategy"))}
    draft_sha = (arm.get("strategy") or {}).get("draft_sha256")
    if draft_sha:
        out["draft sha256"] = draft_sha
    if not m:
        return out
    out["engine"] = m.get("engine")
    out["engine version"] = m.get("engine_version")
    out["frozen sha256"] = m.get("frozen_sha256")
    for f in m.get("models") or []:
        if isinstance(f, Mapping) and f.get("role"):
            out[f"{f['role']} sha256"] = f.get("sha256")
    out["tokenizer sha256"] = m.get("tokenizer_sha256")
    for k, v in sorted((m.get("frozen") or {}).items()):
        out[f"frozen.{k}"] = v
    return out


def _cell(c: Doc) -> dict[str, Any]:
    iv = c.get("task_rel_change") or {}

    def r(x: Any) -> float | None:
        return None if x is None else round(float(x), _DIGITS)

    return {
        "candidate": c["candidate_arm"],
        "baseline": c["baseline_arm"],
        "phase": c["phase"],
        "group": c["task_group"],
        "outcome": c["outcome"],
        "estimate": r(iv.get("estimate")),
        "low": r(iv.get("low")),
        "high": r(iv.get("high")),
        "pairs": c.get("pairs"),
        "episodes": c.get("clusters"),
    }


def summary_of(doc: Doc) -> dict[str, Any]:
    """What a comparison needs of one report: the pilot's names, its schedule's fingerprint,
    its arms' config and frozen settings, and its cells."""
    p = doc["pilot"]
    cfg = p.get("config") or {}
    return {
        "pilot_id": p.get("pilot_id"),
        "name": p.get("name"),
        "created_unix": p.get("created_unix"),
        "config_sha256": p.get("config_sha256"),
        "generated_by": doc.get("generated_by"),
        "schedule": p.get("schedule"),
        "config": {k: v for k, v in cfg.items() if k != "quick"},
        "frozen": {a["arm"]: frozen_settings(a) for a in doc.get("arms") or []},
        "cells": [_cell(c) for c in doc.get("comparisons") or []],
    }


def _flat(x: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves; a list of named mappings (arms) keyed by name."""
    if isinstance(x, Mapping):
        out: dict[str, Any] = {}
        for k, v in x.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    if isinstance(x, list) and x and all(isinstance(i, Mapping) and "name" in i for i in x):
        out = {}
        for i in x:
            out.update(_flat({k: v for k, v in i.items() if k != "name"}, f"{prefix}.{i['name']}"))
        return out
    return {prefix: x}


def config_changes(old: Doc, new: Doc) -> list[dict[str, Any]]:
    """Every setting of two configs that differs (dotted path; arms by name)."""
    a, b = _flat(old), _flat(new)
    return [
        {"field": k, "before": a.get(k), "after": b.get(k)}
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def _frozen_changes(old: Doc, new: Doc) -> tuple[list[dict[str, Any]], int]:
    """(each arm's frozen setting that changed, how many were compared and stayed)."""
    changed, same = [], 0
    for arm in sorted(set(old) | set(new)):
        a, b = old.get(arm) or {}, new.get(arm) or {}
        for k in sorted(set(a) | set(b)):
            if a.get(k) == b.get(k):
                same += 1
            else:
                changed.append({"arm": arm, "setting": k, "before": a.get(k), "after": b.get(k)})
    return changed, same


def _key(c: Doc) -> tuple[str, str, str, str]:
    return (c["candidate"], c["baseline"], c["phase"], c["group"])


_CELL_KEY = ("candidate", "baseline", "phase", "group")


def _kept(c: Doc | None) -> dict[str, Any] | None:
    """A cell's figures without its key (None: not in that run)."""
    return None if c is None else {x: v for x, v in c.items() if x not in _CELL_KEY}


def _cells(old: Sequence[Doc], new: Sequence[Doc]) -> list[dict[str, Any]]:
    before = {_key(c): c for c in old}
    after = {_key(c): c for c in new}
    order = list(before) + [k for k in after if k not in before]
    return [
        {
            **dict(zip(_CELL_KEY, k, strict=True)),
            "before": _kept(before.get(k)),
            "after": _kept(after.get(k)),
            "same_outcome": None
            if k not in before or k not in after
            else before[k]["outcome"] == after[k]["outcome"],
        }
        for k in order
    ]


DECIDED = ("faster", "slower", "no_difference")


def _text(cells: Sequence[Doc], frozen: Sequence[Doc]) -> str:
    both = [c for c in cells if c["before"] is not None and c["after"] is not None]
    decided = [c for c in both if c["before"]["outcome"] in DECIDED]
    kept = [c for c in decided if c["same_outcome"]]
    moved = [c for c in both if not c["same_outcome"]]
    settings = sorted({f["setting"] for f in frozen})
    return (
        f"{len(kept)} of the {len(decided)} cells decided before have the same outcome now; "
        f"{len(moved)} of {len(both)} cells in both runs changed outcome"
        + (f"; frozen settings that changed: {', '.join(settings)}" if settings else "")
        + ("" if settings else "; no frozen setting changed")
    )


def compare(old: Doc, new: Doc, *, given: Sequence[str] = ()) -> dict[str, Any]:
    """The two summaries side by side (``given``: the ``--set`` a rerun was given)."""
    fo, fn = old.get("schedule"), new.get("schedule")
    same = None if fo is None or fn is None else first_difference(fo, fn) is None
    frozen, unchanged = _frozen_changes(old.get("frozen") or {}, new.get("frozen") or {})
    cells = _cells(old.get("cells") or [], new.get("cells") or [])
    heads = ("pilot_id", "name", "created_unix", "config_sha256", "generated_by")
    return {
        "previous": {k: old.get(k) for k in heads},
        "current": {k: new.get(k) for k in heads},
        "schedule": {
            "same": same,
            "sha256": (fn or fo or {}).get("sha256"),
            "requests": len((fn or fo or {}).get("requests") or []),
            "seed": (fn or fo or {}).get("seed"),
        },
        "given": list(given),
        "config_changes": config_changes(old.get("config") or {}, new.get("config") or {}),
        "frozen_changes": frozen,
        "frozen_unchanged": unchanged,
        "cells": cells,
        "text": _text(cells, frozen),
    }


def previous_run(schedule: Mapping[str, Any] | None, doc: Doc) -> dict[str, Any] | None:
    """The "Compared with the previous run" section of a rerun's report (None: not a rerun):
    the previous run's summary, stored with the rerun's schedule, beside this report's."""
    prev = (schedule or {}).get("previous_run")
    if not isinstance(prev, Mapping) or not isinstance(prev.get("summary"), Mapping):
        return None
    out = compare(prev["summary"], summary_of(doc), given=prev.get("given") or [])
    out["change"] = prev.get("change")
    out["previous"]["pilot_file"] = prev.get("pilot_file")
    return out
