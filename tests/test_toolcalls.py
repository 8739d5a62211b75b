"""The tool-call parser on hand-written model outputs; streaming equals non-streaming."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from specpilot.serve.toolcalls import (
    ToolCall,
    ToolCallStream,
    assistant_tool_text,
    parse_tool_calls,
    template_supports_tools,
    tools_system_prompt,
)


def test_plain_text_has_no_calls() -> None:
    r = parse_tool_calls("Paris is the capital of France.")
    assert r.content == "Paris is the capital of France." and r.calls == []


def test_single_object_call_content_none() -> None:
    r = parse_tool_calls(
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    )
    assert r.content is None
    assert r.calls == [ToolCall("get_weather", '{"city": "Paris"}')]


def test_list_of_calls_smollm2_style_and_text_around() -> None:
    text = (
        "Let me check.\n<tool_call>[\n"
        '{"name": "a", "arguments": {}},\n'
        '{"name": "b", "arguments": {"x": 1, "y": "是"}}\n'
        "]</tool_call>"
    )
    r = parse_tool_calls(text)
    assert r.content == "Let me check.\n"
    assert [c.name for c in r.calls] == ["a", "b"]
    assert json.loads(r.calls[1].arguments) == {"x": 1, "y": "是"}


def test_several_blocks_parameters_alias_and_string_arguments() -> None:
    text = (
        '<tool_call>{"name": "a", "parameters": {"q": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": "{\\"z\\": [1, 2]}"}</tool_call>'
    )
    r = parse_tool_calls(text)
    assert r.content is None
    assert r.calls == [ToolCall("a", '{"q": 1}'), ToolCall("b", '{"z": [1, 2]}')]


def test_invalid_block_stays_content_verbatim() -> None:
    for bad in (
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
        '<tool_call>{"name": "f", "arguments": 3}</tool_call>',
        '<tool_call>{"name": "f", "arguments": "not json"}</tool_call>',
        "<tool_call>[]</tool_call>",
    ):
        r = parse_tool_calls("x " + bad)
        assert r.calls == [] and r.content == "x " + bad, bad


def test_unclosed_block_at_end_counts_when_it_parses() -> None:
    r = parse_tool_calls('<tool_call>{"name": "f", "arguments": {"a": 1}}')
    assert r.calls == [ToolCall("f", '{"a": 1}')]
    r = parse_tool_calls('<tool_call>{"name": "f", "argu')
    assert r.calls == [] and r.content == '<tool_call>{"name": "f", "argu'


def test_stream_holds_back_partial_tag_then_emits_call() -> None:
    p = ToolCallStream()
    assert p.feed("Sure <tool") == [("content", "Sure ")]
    assert p.feed('_call>{"name": "f", ') == []
    ev = p.feed('"arguments": {}}</tool_call> done')
    assert ev == [("call", ToolCall("f", "{}")), ("content", " done")]
    assert p.finish() == []


def test_stream_releases_lookalike_that_is_not_a_tag() -> None:
    p = ToolCallStream()
    assert p.feed("a <to") == [("content", "a ")]
    assert p.feed("ol>") == [("content", "<tool>")]


OUTPUTS = [
    "plain answer with < and > signs",
    'Thinking... <tool_call>{"name": "search", "arguments": {"q": "中文 query"}}</tool_call>',
    '<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"k": [1, {"x": null}]}}]</tool_call>\n',
    "<tool_call>{broken</tool_call> tail <tool_call>",
    '<tool_call>{"name": "f", "arguments": {"s": "</tool"}}</tool_call>',
    '<<tool_call>{"name": "g"}</tool_call>>',
]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(OUTPUTS), st.lists(st.integers(0, 200), max_size=12))
def test_streaming_any_split_equals_non_streaming(text: str, cuts: list[int]) -> None:
    whole = parse_tool_calls(text)
    points = sorted({min(c, len(text)) for c in cuts})
    p = ToolCallStream()
    events = []
    prev = 0
    for c in [*points, len(text)]:
        events += p.feed(text[prev:c])
        prev = c
    events += p.finish()
    streamed = p.result()
    assert streamed == whole
    content = "".join(v for k, v in events if k == "content")
    assert (content.strip() or None) == (whole.content.strip() if whole.content else None)
    assert [v for k, v in events if k == "call"] == whole.calls


def test_rendering_helpers_round_trip() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    prompt = tools_system_prompt(tools, "required")
    assert '"name": "f"' in prompt and "<tool_call>" in prompt and "must call" in prompt
    calls = [{"function": {"name": "f", "arguments": '{"a": 1}'}}]
    text = assistant_tool_text("", calls)
    assert parse_tool_calls(text).calls == [ToolCall("f", '{"a": 1}')]

    class Tok:
        chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"

    assert not template_supports_tools(Tok())
    Tok.chat_template += "{% if tools %}{{ tools }}{% endif %}"
    assert template_supports_tools(Tok())
