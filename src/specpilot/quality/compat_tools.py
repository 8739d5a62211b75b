"""Tool-call features of the compatibility suite: a required call whose arguments parse
(``tool_call``), and streamed tool-call deltas that assemble to the same call
(``tool_call_stream``). A server that accepts ``tools`` but leaves them out of the prompt
(the prompt is no longer than without them) does not support tools: ``unsupported``.

One worked tool round trip is in the history, so even a 135M model answers with a call.
"""

from __future__ import annotations

import json
from typing import Any

from specpilot.quality.compat_http import Client, Outcome, choice_of, text_of

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
# One worked tool round trip in the history (small models follow the example).
TOOL_CHAT: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in London?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "London"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 12}'},
    {"role": "assistant", "content": "It is 12 degrees in London."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def _tool_kw(max_tokens: int) -> dict[str, Any]:
    return dict(tools=TOOLS, tool_choice="required", temperature=0, max_tokens=max(40, max_tokens))


def _parse_args(args: str) -> str | None:
    try:
        v = json.loads(args)
    except json.JSONDecodeError as exc:
        return f"arguments do not parse: {exc.msg}: {args[:60]!r}"
    return None if isinstance(v, dict) else f"arguments are not an object: {args[:60]!r}"


def _tools_ignored(c: Client, resp: dict[str, Any]) -> bool:
    """True when the server left the tools out of the prompt (same prompt size without them)."""
    bare = c.chat(TOOL_CHAT, temperature=0, max_tokens=1)
    return int(resp["usage"]["prompt_tokens"]) <= int(bare["usage"]["prompt_tokens"])


def f_tool_call(c: Client, max_tokens: int) -> Outcome:
    resp = c.chat(TOOL_CHAT, **_tool_kw(max_tokens))
    ch = choice_of(resp)
    calls = (ch.get("message") or {}).get("tool_calls") or []
    if not calls:
        if _tools_ignored(c, resp):
            return (
                "unsupported",
                "tools were accepted but not put into the prompt (no tool call)",
                {},
            )
        return (
            "fail",
            f"no tool call (finish {ch.get('finish_reason')}): {text_of({'choices': [ch]})[:80]!r}",
            {},
        )
    fn = calls[0].get("function") or {}
    err = _parse_args(str(fn.get("arguments")))
    ok = err is None and fn.get("name") == "get_weather" and ch.get("finish_reason") == "tool_calls"
    ev = err or f"{fn.get('name')}({fn.get('arguments')}), finish {ch.get('finish_reason')}"
    return ("pass" if ok else "fail"), ev, {}


def f_tool_call_stream(c: Client, max_tokens: int) -> Outcome:
    ch = choice_of(c.chat(TOOL_CHAT, **_tool_kw(max_tokens)))
    want = [
        {"name": str(t["function"]["name"]), "arguments": str(t["function"]["arguments"])}
        for t in (ch.get("message") or {}).get("tool_calls") or []
    ]
    s = c.stream(TOOL_CHAT, **_tool_kw(max_tokens))
    got = s.tool_calls()
    if not got and not want and _tools_ignored(c, c.chat(TOOL_CHAT, **_tool_kw(max_tokens))):
        return "unsupported", "tools were accepted but not put into the prompt (no tool call)", {}
    if not got:
        return "fail", f"no streamed tool-call delta (finish {s.finish_reasons})", {}
    err = _parse_args(got[0]["arguments"])
    same = [(g["name"], json.loads(g["arguments"]) if err is None else None) for g in got] == [
        (w["name"], json.loads(w["arguments"]) if _parse_args(w["arguments"]) is None else None)
        for w in want
    ]
    ok = err is None and same and s.finish_reasons[-1:] == ["tool_calls"]
    return ("pass" if ok else "fail"), err or f"assembled {got} vs non-streamed {want}", {}
