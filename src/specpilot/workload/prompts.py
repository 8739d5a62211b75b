"""Prompts and the files they come from: the ``Prompt`` record, its split, and the readers of
specpilot's own data-file format and of the formats users add their own groups from (see
:func:`import_prompts`):

- ``openai_jsonl``: one ``{"messages": [{"role": ..., "content": ...}, ...]}`` per line (the
  OpenAI chat fine-tuning format); a trailing assistant message is kept as the reference.
- ``sharegpt``: a JSON array (or JSONL) of ``{"id", "conversations": [{"from": "human"|"gpt"|
  "system", "value": ...}]}``; the prompt is the first human turn (with a leading system turn).
- ``specbench``: Spec-Bench's ``question.jsonl``, ``{"question_id", "category", "turns": [...]}``
  per line; the prompt is the first turn, the category is kept (filterable).
- ``specpilot_jsonl``: our own data-file format (``id``, ``split``, ``messages``, ``meta``).

Imported prompts without an explicit split get one from a hash of their text (1 in 3 ``eval``),
so a prompt keeps its split when the file is reordered or grows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specpilot.errors import ConfigError, InputFileError

SPLITS = ("train", "dev", "eval")
IMPORT_FORMATS = ("openai_jsonl", "sharegpt", "specbench", "specpilot_jsonl")


@dataclass(frozen=True)
class Prompt:
    id: str
    group: str
    split: str  # train | dev | eval
    messages: tuple[dict[str, Any], ...]
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    checks: tuple[Any, ...] = ()

    @property
    def text(self) -> str:
        """The last user message (what retrieval queries and length estimates use)."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                return str(m.get("content", ""))
        return ""


def hash_split(text: str) -> str:
    """Stable split for an imported prompt without one: 1 in 3 eval, 1 in 6 dev, rest train."""
    h = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    return "eval" if h % 3 == 0 else ("dev" if h % 6 == 1 else "train")


# -- importers --------------------------------------------------------------------------


def import_prompts(
    path: str | Path,
    fmt: str,
    group: str,
    *,
    categories: Sequence[str] | None = None,
    limit: int | None = None,
) -> list[Prompt]:
    """Read a user prompt file in one of :data:`IMPORT_FORMATS` as prompts of ``group``."""
    p = Path(path)
    if fmt not in IMPORT_FORMATS:
        raise ConfigError(f"format {fmt!r}: use one of {', '.join(IMPORT_FORMATS)}")
    if not p.is_file():
        raise FileNotFoundError(f"prompt file not found: {p}")
    text = p.read_text("utf-8")
    if fmt == "openai_jsonl":
        out = _parse_openai_jsonl(text, group, p.name)
    elif fmt == "sharegpt":
        out = _parse_sharegpt(text, group, p.name)
    elif fmt == "specbench":
        out = _parse_specbench(text, group, p.name)
    else:
        out = list(parse_specpilot_lines(text.splitlines(), group, p.name))
    if categories:
        keep = set(categories)
        out = [q for q in out if q.meta.get("category") in keep]
    if limit is not None:
        out = out[:limit]
    if not out:
        raise InputFileError(f"{p}: no usable prompts in {fmt} format (check the file's format)")
    return out


def _json_lines(text: str, where: str) -> Iterable[tuple[int, Any]]:
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputFileError(f"{where}:{n}: not valid JSON ({exc.msg})") from None


def parse_specpilot_lines(lines: Iterable[str], group: str, where: str) -> Iterable[Prompt]:
    for n, obj in _json_lines("\n".join(lines), where):
        split = obj.get("split") or hash_split(json.dumps(obj["messages"], ensure_ascii=False))
        if split not in SPLITS:
            raise InputFileError(f"{where}:{n}: split {split!r}: use train, dev or eval")
        yield Prompt(
            id=str(obj.get("id", f"{group}-{n:04d}")),
            group=group,
            split=split,
            messages=tuple(obj["messages"]),
            meta=dict(obj.get("meta") or {}),
            checks=tuple(obj.get("checks") or ()),
        )


def _make(
    group: str, pid: str, messages: list[dict[str, Any]], meta: dict[str, Any], split: str | None
) -> Prompt:
    key = json.dumps(messages, ensure_ascii=False, sort_keys=True)
    return Prompt(
        id=pid,
        group=group,
        split=split if split in SPLITS else hash_split(key),
        messages=tuple(messages),
        meta=meta,
    )


def _parse_openai_jsonl(text: str, group: str, where: str) -> list[Prompt]:
    out = []
    for n, obj in _json_lines(text, where):
        msgs = obj.get("messages") if isinstance(obj, dict) else None
        if not isinstance(msgs, list) or not msgs:
            raise InputFileError(
                f"{where}:{n}: expected an object with a non-empty 'messages' list"
            )
        msgs = [{"role": m["role"], "content": m.get("content") or ""} for m in msgs]
        meta: dict[str, Any] = {}
        if msgs[-1]["role"] == "assistant":  # the dataset's answer: a reference, not prompt
            meta["reference"] = msgs.pop()["content"]
        if not msgs or msgs[-1]["role"] != "user":
            raise InputFileError(f"{where}:{n}: the prompt must end with a user message")
        pid = str(obj.get("id", f"{group}-{n:04d}"))
        out.append(_make(group, pid, msgs, meta, obj.get("split")))
    return out


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}


def _parse_sharegpt(text: str, group: str, where: str) -> list[Prompt]:
    stripped = text.lstrip()
    items = (
        json.loads(stripped)
        if stripped.startswith("[")
        else [o for _, o in _json_lines(text, where)]
    )
    out = []
    for n, item in enumerate(items, 1):
        conv = item.get("conversations") or item.get("conversation") or []
        msgs: list[dict[str, Any]] = []
        reference = None
        for turn in conv:
            role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
            if role is None:
                continue
            if msgs and msgs[-1]["role"] == "user":  # the first human turn is the prompt
                if role == "assistant":
                    reference = turn.get("value", "")  # its answer: the reference
                break
            if role != "assistant":  # an answer before any question is skipped
                msgs.append({"role": role, "content": turn.get("value", "")})
        if not msgs or msgs[-1]["role"] != "user":
            continue  # no human turn: nothing to send (ShareGPT has such entries)
        meta: dict[str, Any] = {"source_id": item.get("id")}
        if reference is not None:
            meta["reference"] = reference
        out.append(
            _make(group, str(item.get("id", f"{group}-{n:04d}")), msgs, meta, item.get("split"))
        )
    return out


def _parse_specbench(text: str, group: str, where: str) -> list[Prompt]:
    out = []
    for n, obj in _json_lines(text, where):
        turns = obj.get("turns")
        if not isinstance(turns, list) or not turns:
            raise InputFileError(f"{where}:{n}: expected a Spec-Bench question with a 'turns' list")
        meta = {
            "category": obj.get("category"),
            "question_id": obj.get("question_id"),
            "turns": turns,
        }
        if "reference" in obj:
            meta["reference"] = obj["reference"]
        pid = f"{group}-{obj.get('question_id', n)}"
        out.append(
            _make(group, pid, [{"role": "user", "content": str(turns[0])}], meta, obj.get("split"))
        )
    return out
