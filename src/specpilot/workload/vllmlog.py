"""vLLM's request log (``vllm serve --enable-log-requests``), read as a request log.

The lines come from ``RequestLogger.log_inputs`` in ``vllm/entrypoints/logger.py`` behind the
prefix ``_FORMAT`` = ``%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s`` with
``_DATE_FORMAT`` = ``%m-%d %H:%M:%S`` (``vllm/logger.py``); a ``(APIServer pid=N)`` or
``VLLM_LOGGING_PREFIX`` before it, colour codes, or a logging config's ``YYYY-MM-DD`` date and
``.mmm``/``,mmm`` fraction are accepted. Two message forms:

- older vLLM, one INFO line: ``Received request ID: prompt: REPR, params: SamplingParams(...),
  prompt_token_ids: [...], ... lora_request: ...``;
- newer vLLM: ``Request ID details: prompt: REPR, prompt_token_ids: [...], ...`` at DEBUG, then
  ``Received request ID: params: SamplingParams(...), lora_request: ...`` at INFO: the prompt is
  in the log only with ``VLLM_LOGGING_LEVEL=DEBUG``.

The prompt is logged after the chat template, so each request replays as a completions request
with that text (vLLM tokenizes it again: a template's BOS may come twice). Pooling and beam
search requests are skipped. A time without a year (vLLM's default) is placed in 2000 and moves
to the next year when it jumps back by more than half a year (a log across New Year).

    >>> from specpilot.workload.logshapes import Line
    >>> text = ("INFO 03-01 12:00:05 [logger.py:43] Received request cmpl-1-0: prompt: 'Hi', "
    ...         "params: SamplingParams(n=1, temperature=0.0, top_p=1.0, seed=None, stop=[], "
    ...         "max_tokens=16), prompt_token_ids: [1, 2], lora_request: None.")
    >>> r = next(VllmLog("vllm.log").read([Line(1, 0, text)]))
    >>> r.api, r.body, r.input_tokens, r.whole_second
    ('completions', {'prompt': 'Hi', 'max_tokens': 16, 'temperature': 0.0, 'top_p': 1.0}, 2, True)
"""

from __future__ import annotations

import ast
import datetime as dt
import re
from collections.abc import Iterable, Iterator
from typing import Any

from specpilot.errors import InputFileError
from specpilot.workload.logshapes import MISSING, Line, Parsed, Skipped

__all__ = ["VllmLog"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TIME = re.compile(
    r"(?:(?P<y>\d{4})-)?(?P<mo>\d\d)-(?P<d>\d\d)[ T]"
    r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,9}))?"
)
_RECEIVED = re.compile(r"Received request (?P<id>.+?): (?=prompt: |params: )")
_DETAILS = re.compile(r"Request (?P<id>.+?) details: prompt: ")
_STR = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_PROMPT = re.compile(rf"None|{_STR}", re.S)
_IDS = re.compile(r"prompt_token_ids: (\[[\d,\s]*\]|None)")
_PARAMS = re.compile(r"params: (\w+)\(")
_LORA = re.compile(rf"lora_request: LoRARequest\(lora_name=({_STR})")
# SamplingParams -> request fields: the OpenAI ones whenever set, vLLM's extras when not default
_ALWAYS = ("max_tokens", "temperature", "top_p")
_UNLESS: dict[str, Any] = {
    "n": 1,
    "seed": None,
    "stop": [],
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "top_k": (0, -1),
    "min_p": 0.0,
    "min_tokens": 0,
    "ignore_eos": False,
}
PROMPT_FIX = (
    "newer vLLM logs prompts at DEBUG level only: run vllm serve with --enable-log-requests "
    "and VLLM_LOGGING_LEVEL=DEBUG"
)


def _marker(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The message marker, where the log prefix ends: never after a quote, so a prompt or an
    output that quotes a log line is not taken for a request."""
    m = pattern.search(text)
    return m if m and "'" not in text[: m.start()] and '"' not in text[: m.start()] else None


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return MISSING  # an enum or an object repr: not a request field


def _call_args(text: str, start: int) -> tuple[list[str], int] | None:
    """The top-level ``key=value`` items of a repr from ``start`` (after its ``(``) and the
    index of its ``)``; None when the line ends first."""
    items, depth, quote, i, begin = [], 0, "", start, start
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}" and depth:
            depth -= 1
        elif c == ")" or (c == "," and depth == 0):
            items.append(text[begin:i].strip())
            if c == ")":
                return [x for x in items if x], i
            begin = i + 1
        i += 1
    return None


def sampling_fields(items: list[str]) -> dict[str, Any]:
    """The request fields of SamplingParams(...)'s items (see _ALWAYS and _UNLESS)."""
    got = {}
    for item in items:
        key, eq, value = item.partition("=")
        if eq and (key in _ALWAYS or key in _UNLESS):
            got[key] = _literal(value)
    out = {k: got[k] for k in _ALWAYS if got.get(k, MISSING) is not MISSING}
    for key, default in _UNLESS.items():
        v = got.get(key, MISSING)
        skip = v in default if isinstance(default, tuple) else v == default
        if v is not MISSING and v is not None and not skip:
            out[key] = v
    return out


class VllmLog:
    name = "vllm_log"

    def __init__(self, source: str) -> None:
        self.source = source
        self.has_year = True  # False once a time without a year was read
        self._year = 2000
        self._last: dt.datetime | None = None

    def _bad(self, line: Line, what: str, fix: str | None = None) -> InputFileError:
        return InputFileError(f"{self.source}:{line.number}: {what}", fix=fix)

    def read(self, lines: Iterable[Line]) -> Iterator[Parsed | Skipped]:
        pending: dict[str, tuple[Line, Any, list[int] | None]] = {}
        for line in lines:
            text = _ANSI.sub("", line.text)
            m = _marker(_DETAILS, text)
            if m:
                prompt, end = self._prompt(text, m.end(), line)
                pending[m["id"]] = (line, prompt, self._ids(text, end))
                continue
            m = _marker(_RECEIVED, text)
            if m:
                yield self._request(text, m, line, pending)

    def _request(
        self, text: str, m: re.Match[str], line: Line, pending: dict[str, Any]
    ) -> Parsed | Skipped:
        rid = m["id"]
        lines: tuple[Line, ...]
        t, whole = self._time(text[: m.start()], line)
        if text.startswith("prompt: ", m.end()):
            prompt, end = self._prompt(text, m.end() + len("prompt: "), line)
            ids, lines = self._ids(text, end), (line,)
        else:
            if rid not in pending:
                raise self._bad(line, f"request {rid}: its prompt is not in the log", PROMPT_FIX)
            first, prompt, ids = pending.pop(rid)
            end, lines = m.end(), (first, line)
        p = _PARAMS.search(text, end)
        args = _call_args(text, p.end()) if p else None
        if p is None or args is None:
            raise self._bad(line, f"request {rid}: no complete params: ...(...)", "a whole line")
        if p[1] != "SamplingParams":
            return Skipped(line, p[1])
        if prompt is None and not ids:
            raise self._bad(line, f"request {rid}: neither a prompt nor its token ids logged")
        body = {"prompt": prompt if prompt is not None else ids, **sampling_fields(args[0])}
        lora = _LORA.search(text, args[1])
        fields = {"request_id": rid, "lora_name": _literal(lora[1]) if lora else None}
        n = len(ids) if ids else None
        return Parsed(lines, t, whole, "completions", body, fields, rid, input_tokens=n)

    def _prompt(self, text: str, pos: int, line: Line) -> tuple[str | None, int]:
        m = _PROMPT.match(text, pos)
        if m is None:
            raise self._bad(line, "prompt: not a quoted string (a line cut short?)", "whole lines")
        return (None if m[0] == "None" else ast.literal_eval(m[0])), m.end()

    @staticmethod
    def _ids(text: str, pos: int) -> list[int] | None:
        m = _IDS.search(text, pos)
        return ast.literal_eval(m[1]) if m else None

    def _time(self, prefix: str, line: Line) -> tuple[float, bool]:
        m = _TIME.search(prefix)
        if m is None:
            raise self._bad(
                line,
                "no time before 'Received request'",
                "keep vLLM's log prefix: LEVEL MM-DD HH:MM:SS (or a date) before the message",
            )
        frac = m["f"] or ""
        if not m["y"]:
            self.has_year = False
        year = int(m["y"] or self._year)
        try:
            d = dt.datetime(
                year, int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]),
                int((frac + "000000")[:6]), tzinfo=dt.UTC,
            )  # fmt: skip
        except ValueError as exc:
            raise self._bad(line, f"time {m[0]!r}: {exc}") from None
        if not m["y"] and self._last is not None and d < self._last - dt.timedelta(days=183):
            self._year += 1
            d = d.replace(year=self._year)
        self._last = d
        return d.timestamp(), not frac
