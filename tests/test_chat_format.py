"""Tests of the OpenAI chat shape shared by the model paths (controlscope.models._chat_format)."""

from __future__ import annotations

from controlscope.core import Message, ToolCall, ToolSpec
from controlscope.models._chat_format import (
    message_to_openai,
    parse_tool_call,
    tools_to_openai,
)

CALL = ToolCall(id="c1", name="execute_python", arguments='{"code": "x"}', parsed={"code": "x"})


def test_wire_and_template_shapes_differ_only_in_content_and_arguments() -> None:
    assistant = Message(role="assistant", content=None, tool_calls=(CALL,))
    wire = message_to_openai(assistant)
    template = message_to_openai(assistant, chat_template=True)
    assert wire["content"] is None and template["content"] == ""
    assert wire["tool_calls"][0]["function"]["arguments"] == '{"code": "x"}'
    assert template["tool_calls"][0]["function"]["arguments"] == {"code": "x"}
    assert {k: v for k, v in wire.items() if k not in ("content", "tool_calls")} == {
        k: v for k, v in template.items() if k not in ("content", "tool_calls")
    }
    tool = Message(role="tool", content="1", tool_call_id="c1", name="execute_python")
    assert message_to_openai(tool) == {"role": "tool", "content": "1", "tool_call_id": "c1"}
    user = Message(role="user", content="hi", name="ann")
    assert message_to_openai(user, chat_template=True)["name"] == "ann"


def test_a_malformed_call_keeps_its_raw_text_in_the_template_too() -> None:
    bad = parse_tool_call("c2", "execute_python", '{"code": ')
    shaped = message_to_openai(Message(role="assistant", tool_calls=(bad,)), chat_template=True)
    assert shaped["tool_calls"][0]["function"]["arguments"] == '{"code": '


def test_decoded_values_and_non_objects() -> None:
    decoded = parse_tool_call(None, "f", {"a": "é"}, 1)
    assert decoded.parsed == {"a": "é"} and decoded.arguments == '{"a": "é"}'
    assert decoded.id.startswith("call_1_")
    for value, kind in (([1], "array"), ("3", "number"), ('"s"', "string"), ("null", "null")):
        call = parse_tool_call(None, "f", value)
        assert call.parsed is None and f"got JSON {kind}" in (call.error or "")
    assert parse_tool_call(None, "f", '{"code": "a\nb"}').parsed == {"code": "a\nb"}


def test_tools_shape() -> None:
    spec = ToolSpec(name="t", description="d", parameters={"type": "object"})
    assert tools_to_openai([spec]) == [
        {
            "type": "function",
            "function": {"name": "t", "description": "d", "parameters": spec.parameters},
        }
    ]
