"""Client-side stages before the model call (retrieval, tool calls), with their own timing.

Two kinds, declared under ``stages:`` in the workload YAML:

- ``simulated``: a duration drawn from a distribution (``fixed``, ``uniform`` [lo, hi] or
  ``lognormal`` with ``median_s`` and ``sigma``) when the schedule is built. The schedule holds
  the planned seconds in ``ScheduledRequest.client_stages[name]``; the load generator waits
  that long before sending.
- ``bm25``: a real BM25 search over a local document set (``docs``: a JSONL file of
  ``{"id", "title", "text"}``, a directory of ``.txt``/``.md`` files, or ``builtin`` for the
  small bilingual knowledge base shipped with specpilot). The schedule is built with the
  retrieved passages already in the messages (a leading system message "Reference
  material"), so every arm sends identical text; the stage is listed in
  ``ScheduledRequest.measured_stages`` (``client_stages[name]`` is ``0.0``: nothing planned
  to wait) and the load generator re-runs the search at send time to measure it.

:class:`StagePlanner` decides each request's stages when the schedule is built;
:class:`StageRunner` runs and times them when it is sent.

For the load generator, one call does both (and returns what to store in
``RequestRecord.client_stages``)::

    runner = StageRunner(schedule.stages, base_dir=schedule.base_dir)
    measured = await runner.run(req)   # {"retrieval": 0.0012, "tool": 0.31}

BM25 (Robertson/Sparck Jones, k1 = 1.5, b = 0.75) over tokens that are lower-cased ASCII words
plus CJK character bigrams, so Chinese text needs no segmenter. It is written here rather than
taken from ``bm25s`` (the maintained fast BM25) on purpose: bm25s would put scipy into the core
install that the load generator runs with, and its tokenizer splits on spaces, so this CJK
tokenizer would stay anyway; for the ~25 builtin documents (or a few hundred of a user's) this
index builds in ~20 ms and answers in ~0.5 ms. The tests check its scores against bm25s (same
Lucene idf; bm25s leaves out the constant factor k1 + 1).

    >>> idx = BM25Index.builtin()
    >>> [d for d, _ in idx.search("差旅住宿标准 超标部分", k=1)]
    ['kb-travel']
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from specpilot.errors import InputFileError
from specpilot.records import ScheduledRequest

_WORD = re.compile(r"[a-z0-9]+|[\u3400-\u9fff\uf900-\ufaff]+")


def tokenize(text: str) -> list[str]:
    """ASCII words, and character bigrams (plus single characters) of CJK runs."""
    out: list[str] = []
    for tok in _WORD.findall(text.lower()):
        if tok[0].isascii():
            out.append(tok)
        else:
            out.extend(tok)
            out.extend(tok[i : i + 2] for i in range(len(tok) - 1))
    return out


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


class BM25Index:
    """Okapi BM25 over a small in-memory document set."""

    def __init__(self, docs: Sequence[Document], k1: float = 1.5, b: float = 0.75) -> None:
        if not docs:
            raise InputFileError(
                "the document set for BM25 is empty", fix="give .txt/.md files or JSONL lines"
            )
        self.docs = list(docs)
        self.k1, self.b = k1, b
        self._tf = [Counter(tokenize(d.title + " " + d.text)) for d in self.docs]
        self._len = np.array([sum(tf.values()) for tf in self._tf], dtype=np.float64)
        self._avg = float(self._len.mean()) or 1.0
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        n = len(self.docs)
        self._idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}

    @classmethod
    def builtin(cls) -> BM25Index:
        text = (
            resources.files("specpilot.workload")
            .joinpath("data")
            .joinpath("docs.jsonl")
            .read_text("utf-8")
        )
        return cls(_parse_docs(text, "builtin docs.jsonl"))

    @classmethod
    def from_path(cls, path: str | Path) -> BM25Index:
        """A JSONL file of {"id", "title", "text"} or a directory of .txt / .md files."""
        p = Path(path)
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.suffix in (".txt", ".md") and f.is_file())
            docs = [Document(str(f.relative_to(p)), f.stem, f.read_text("utf-8")) for f in files]
            return cls(docs)
        if not p.is_file():
            raise InputFileError(
                f"document set not found: {p}",
                fix="docs: builtin, a JSONL file or a directory (relative to the workload file)",
            )
        return cls(_parse_docs(p.read_text("utf-8"), str(p)))

    def scores(self, query: str) -> np.ndarray:
        q = tokenize(query)
        s = np.zeros(len(self.docs))
        norm = self.k1 * (1 - self.b + self.b * self._len / self._avg)
        for term in set(q):
            idf = self._idf.get(term)
            if idf is None:
                continue
            tf = np.array([d.get(term, 0) for d in self._tf], dtype=np.float64)
            s += idf * tf * (self.k1 + 1) / (tf + norm)
        return s

    def search(self, query: str, k: int = 3) -> list[tuple[str, float]]:
        """Top ``k`` (doc id, score), best first; ties by document order; zero scores dropped."""
        s = self.scores(query)
        order = sorted(range(len(s)), key=lambda i: (-s[i], i))[:k]
        return [(self.docs[i].id, round(float(s[i]), 6)) for i in order if s[i] > 0]

    def get(self, doc_id: str) -> Document:
        return next(d for d in self.docs if d.id == doc_id)


def _parse_docs(text: str, where: str) -> list[Document]:
    docs = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputFileError(f"{where}:{n}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise InputFileError(
                f"{where}:{n}: expected an object with a 'text' string",
                fix='one document per line: {"id": ..., "title": ..., "text": ...}',
            )
        docs.append(Document(str(obj.get("id", n)), str(obj.get("title", "")), obj["text"]))
    return docs


def load_index(docs: str, base_dir: str | Path | None = None) -> BM25Index:
    if docs == "builtin":
        return BM25Index.builtin()
    p = Path(docs)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return BM25Index.from_path(p)


def sample_duration(spec: Mapping[str, Any], rng: np.random.Generator) -> float:
    """One simulated stage duration (seconds, rounded to microseconds)."""
    dist = spec.get("dist", "lognormal")
    if dist == "fixed":
        v = float(spec["median_s"])
    elif dist == "uniform":
        v = float(rng.uniform(spec["min_s"], spec["max_s"]))
    else:
        v = float(spec["median_s"]) * math.exp(
            float(spec.get("sigma", 0.5)) * rng.standard_normal()
        )
    if spec.get("max_s") is not None:
        v = min(v, float(spec["max_s"]))
    return round(max(v, 0.0), 6)


def context_message(index: BM25Index, hits: Sequence[tuple[str, float]]) -> dict[str, str]:
    """The system message carrying the retrieved passages."""
    parts = []
    for doc_id, _ in hits:
        d = index.get(doc_id)
        parts.append(f"[{d.id}] {d.title}\n{d.text}")
    return {"role": "system", "content": "Reference material:\n\n" + "\n\n".join(parts)}


MEASURED_AT_SEND = 0.0  # client_stages value of a real stage: no planned wait (see records)


@dataclass
class PlannedStages:
    """One request's stages, decided when the schedule is built."""

    seconds: dict[str, float] = field(default_factory=dict)  # -> ScheduledRequest.client_stages
    measured: list[str] = field(default_factory=list)  # -> ScheduledRequest.measured_stages
    context: list[dict[str, str]] = field(default_factory=list)  # retrieved passages, as messages


class StagePlanner:
    """Build time: which stages a request runs, their simulated seconds, retrieved passages.

    ``stages`` is ``Schedule.stages`` (name -> spec with ``kind``, ``groups``, ``probability``).
    For every stage one uniform draw decides whether the request runs it (drawn even when the
    group does not take part, so streams stay aligned); a simulated stage then draws its
    duration, a BM25 stage searches the request's prompt text now so every arm sends the same
    passages, and is timed again at send time by :class:`StageRunner`.
    """

    def __init__(
        self, stages: Mapping[str, Mapping[str, Any]], base_dir: str | Path | None = None
    ) -> None:
        self.stages = {k: dict(v) for k, v in stages.items()}
        self._indexes = {
            name: load_index(str(spec.get("docs", "builtin")), base_dir)
            for name, spec in self.stages.items()
            if spec.get("kind") == "bm25"
        }

    def plan(self, group: str, query: str, rng: np.random.Generator) -> PlannedStages:
        out = PlannedStages()
        for name, spec in self.stages.items():
            u = float(rng.random())  # drawn for every stage: stable streams
            groups = spec.get("groups")
            if (groups is not None and group not in groups) or u >= spec.get("probability", 1.0):
                continue
            if name in self._indexes:
                hits = self._indexes[name].search(query, int(spec.get("top_k", 3)))
                if hits:
                    out.context.append(context_message(self._indexes[name], hits))
                out.seconds[name] = MEASURED_AT_SEND
                out.measured.append(name)
            else:
                out.seconds[name] = sample_duration(spec, rng)
        return out


def query_of(req: ScheduledRequest) -> str:
    """What retrieval searches for: the last user message."""
    for m in reversed(req.messages):
        if m.get("role") == "user":
            return str(m.get("content", ""))
    return ""


class StageRunner:
    """Executes a scheduled request's client stages at send time and times each one.

    ``stages`` is ``Schedule.stages`` (name -> spec with ``kind``); relative ``docs`` paths
    resolve against ``base_dir`` (the workload YAML's directory).
    """

    def __init__(
        self, stages: Mapping[str, Mapping[str, Any]], base_dir: str | Path | None = None
    ) -> None:
        self.stages = {k: dict(v) for k, v in stages.items()}
        self._indexes: dict[str, BM25Index] = {}
        for name, spec in self.stages.items():
            if spec.get("kind") == "bm25":
                self._indexes[name] = load_index(str(spec.get("docs", "builtin")), base_dir)

    def run_sync(self, req: ScheduledRequest) -> dict[str, float]:
        """Blocking variant (simulated stages sleep with ``time.sleep``)."""
        out = {}
        for name, planned in req.client_stages.items():
            t0 = time.perf_counter()
            if name in self._indexes:
                self._indexes[name].search(query_of(req), int(self.stages[name].get("top_k", 3)))
            else:
                time.sleep(planned)
            out[name] = time.perf_counter() - t0
        return out

    async def run(self, req: ScheduledRequest) -> dict[str, float]:
        """Measured seconds per stage, in the order the schedule lists them."""
        out = {}
        for name, planned in req.client_stages.items():
            t0 = time.perf_counter()
            if name in self._indexes:
                self._indexes[name].search(query_of(req), int(self.stages[name].get("top_k", 3)))
            else:
                await asyncio.sleep(planned)
            out[name] = time.perf_counter() - t0
        return out
