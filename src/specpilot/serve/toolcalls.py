"""Tool calling: render tools into the prompt, parse tool calls out of the model's text.

Output format parsed (the Hermes / Qwen / SmolLM2 convention)::

    <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>
    <tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]</tool_call>

One block holds one call object or a JSON list of them; several blocks may follow each other.
``"parameters"`` is accepted for ``"arguments"``, and arguments given as a JSON string are kept
as that string. Text outside the blocks is the message ``content``; when there are tool calls
and the remaining content is only whitespace, ``content`` is None. A block whose body is not a
valid call stays in ``content`` verbatim (nothing is invented). A block left open when the
generation ends counts if its body parses.

Rendering: if the tokenizer's chat template uses ``tools`` it receives them; otherwise (e.g.
SmolLM2's template) a system message in SmolLM2's function-calling format lists them.

Streaming uses the same parser (``ToolCallStream``), fed text deltas: content is released as
soon as it cannot be the start of ``<tool_call>``, and each call is emitted as one delta when its
block closes. ``parse_tool_calls(text)`` is ``feed(text)`` + ``finish()``, so a streamed and a
non-streamed response carry the same calls and the same content.

    >>> r = parse_tool_calls('ok <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    >>> r.content, r.calls[0].name, r.calls[0].arguments
    ('ok ', 'f', '{"x": 1}')
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON text, as OpenAI's ``function.arguments``


@dataclass
class ParsedOutput:
    content: str | None
    calls: list[ToolCall] = field(default_factory=list)


def _parse_block(body: str) -> list[ToolCall] | None:
    """One block's body -> calls, or None when it is not a valid call (kept as text)."""
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return None
    items = obj if isinstance(obj, list) else [obj]
    if not items:
        return None
    calls = []
    for it in items:
        if not isinstance(it, dict) or not isinstance(it.get("name"), str) or not it["name"]:
            return None
        args: Any = it.get("arguments", it.get("parameters", {}))
        if isinstance(args, str):
            try:
                json.loads(args)
            except json.JSONDecodeError:
                return None
            text = args
        elif isinstance(args, dict):
            text = json.dumps(args, ensure_ascii=False)
        else:
            return None
        calls.append(ToolCall(it["name"], text))
    return calls


def _partial_open(buf: str) -> int:
    """Length of the longest suffix of ``buf`` that is a proper prefix of ``<tool_call>``."""
    for n in range(min(len(OPEN) - 1, len(buf)), 0, -1):
        if buf.endswith(OPEN[:n]):
            return n
    return 0


class ToolCallStream:
    """Incremental parser: ``feed(delta)`` / ``finish()`` -> events.

    Events are ``("content", text)`` and ``("call", ToolCall)``, in output order.
    """

    def __init__(self) -> None:
        self._buf = ""
        self._in_call = False
        self.calls: list[ToolCall] = []
        self.content_parts: list[str] = []

    def _content(self, text: str, out: list[tuple[str, Any]]) -> None:
        if text:
            self.content_parts.append(text)
            out.append(("content", text))

    def feed(self, delta: str) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        self._buf += delta
        while True:
            if not self._in_call:
                i = self._buf.find(OPEN)
                if i < 0:
                    keep = _partial_open(self._buf)
                    self._content(self._buf[: len(self._buf) - keep], out)
                    self._buf = self._buf[len(self._buf) - keep :]
                    return out
                self._content(self._buf[:i], out)
                self._buf = self._buf[i + len(OPEN) :]
                self._in_call = True
            else:
                j = self._buf.find(CLOSE)
                if j < 0:
                    return out
                self._block(self._buf[:j], closed=True, out=out)
                self._buf = self._buf[j + len(CLOSE) :]
                self._in_call = False

    def _block(self, body: str, closed: bool, out: list[tuple[str, Any]]) -> None:
        calls = _parse_block(body.strip())
        if calls is None:
            self._content(OPEN + body + (CLOSE if closed else ""), out)
            return
        for c in calls:
            self.calls.append(c)
            out.append(("call", c))

    def finish(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        if self._in_call:
            self._block(self._buf, closed=False, out=out)
        else:
            self._content(self._buf, out)
        self._buf, self._in_call = "", False
        return out

    def result(self) -> ParsedOutput:
        content = "".join(self.content_parts)
        if self.calls and not content.strip():
            return ParsedOutput(None, list(self.calls))
        return ParsedOutput(content, list(self.calls))


def parse_tool_calls(text: str) -> ParsedOutput:
    p = ToolCallStream()
    p.feed(text)
    p.finish()
    return p.result()


# ---------------------------------------------------------------------- rendering
def template_supports_tools(tokenizer: Any) -> bool:
    tpl = getattr(tokenizer, "chat_template", None)
    return isinstance(tpl, str) and "tools" in tpl


def tools_system_prompt(tools: list[dict[str, Any]], choice: str | dict[str, Any] | None) -> str:
    """SmolLM2's function-calling system prompt (its model card's format), in our tag syntax."""
    lines = [
        "You are an expert in composing functions. You are given a question and a set of possible "
        "functions. Based on the question, you will need to make one or more function/tool calls "
        "to achieve the purpose. If none of the functions can be used, answer in plain text.",
        "",
        "You have access to the following tools:",
        f"<tools>{json.dumps(tools, ensure_ascii=False)}</tools>",
        "",
        "To call tools, answer with a list of calls in exactly this format:",
        '<tool_call>[{"name": "func_name1", "arguments": {"argument1": "value1"}}]</tool_call>',
    ]
    if choice == "required":
        lines.append("You must call at least one function.")
    elif isinstance(choice, dict):
        lines.append(f"You must call the function {choice['function']['name']}.")
    return "\n".join(lines)


def assistant_tool_text(content: str, calls: list[dict[str, Any]]) -> str:
    """An assistant turn with tool calls, rendered back into the format we parse."""
    items = []
    for c in calls:
        args = c["function"].get("arguments", "{}")
        args_obj = json.loads(args) if isinstance(args, str) and args.strip() else (args or {})
        items.append({"name": c["function"]["name"], "arguments": args_obj})
    block = OPEN + json.dumps(items, ensure_ascii=False) + CLOSE
    return f"{content}{block}" if content else block
