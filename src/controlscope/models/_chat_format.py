"""The OpenAI chat shape, shared by every model path: messages, tools, and tool calls read back.

One rule each, whichever model answered (an OpenAI-compatible endpoint, the embedded model's
``<tool_call>`` text, a script):

- a tool call's arguments are decoded by :func:`parse_tool_call`. Blank or missing arguments are
  the empty object ``{}``: that is how servers write a call of a tool without parameters (the
  OpenAI format carries arguments as a JSON string, and several servers send ``""`` for none),
  and a call that lacks a required argument is still refused where the arguments are checked
  against the tool (the planner's ``code`` field, the reviewer's payload, the tool's schema);
- a call without a provider id gets :func:`tool_call_id`, derived from its position, name and
  argument text, so replays and cache keys see the same id for the same call;
- :func:`message_to_openai` and :func:`tools_to_openai` give the wire shape; a chat template
  takes the same shape with two differences (content never null, arguments as objects).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from controlscope.core import Message, ToolCall, ToolSpec, decode_json

__all__ = [
    "message_to_openai",
    "parse_tool_call",
    "tool_call_id",
    "tool_call_to_openai",
    "tools_to_openai",
]

_JSON_TYPES = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def tool_call_id(text: str, index: int, name: str = "") -> str:
    """A deterministic id for a tool call that came without one: ``call_<index>_<16 hex>``.

    Args:
        text: the call's argument text as written (or, for a call that could not be read, its
            raw text).
        index: the call's position among the calls of its response.
        name: the tool's name as written.
    """
    digest = hashlib.sha256(f"{index}\0{name}\0{text}".encode()).hexdigest()[:16]
    return f"call_{index}_{digest}"


def parse_tool_call(call_id: str | None, name: str, arguments: object, index: int = 0) -> ToolCall:
    """Decode one emitted tool call, keeping malformed arguments as they came.

    Args:
        call_id: the provider's call id; when missing, :func:`tool_call_id` of the call.
        name: the tool name as emitted.
        arguments: the arguments: JSON text (an OpenAI-shaped call; raw newlines inside strings
            are accepted), an already decoded value (a ``<tool_call>`` object), or None. Blank
            text and None are ``{}``.
        index: the call's position in its response (only used to derive a missing id).

    Returns:
        A :class:`ToolCall` whose ``parsed`` is the decoded object, or ``None`` with ``error``
        saying why (``not valid JSON``, or JSON that is not an object); ``arguments`` holds the
        text as it came, or the JSON text of a decoded value.
    """
    raw = _argument_text(arguments)
    call_id = call_id or tool_call_id(raw, index, name)
    value: Any = arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        value = {}
    elif isinstance(arguments, str):
        try:
            value = decode_json(arguments)
        except json.JSONDecodeError as exc:
            error = f"arguments are not valid JSON: {exc}"
            return ToolCall(id=call_id, name=name, arguments=raw, error=error)
    if not isinstance(value, Mapping):
        kind = _JSON_TYPES.get(type(value), type(value).__name__)
        error = f"arguments are not a JSON object (got JSON {kind})"
        return ToolCall(id=call_id, name=name, arguments=raw, error=error)
    return ToolCall(id=call_id, name=name, arguments=raw, parsed=dict(value))


def _argument_text(arguments: object) -> str:
    """The argument text a :class:`ToolCall` keeps (see :func:`parse_tool_call`)."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(arguments)


def tool_call_to_openai(call: ToolCall, *, chat_template: bool = False) -> dict[str, Any]:
    """One tool call in the OpenAI shape ``{"id", "type": "function", "function": {"name",
    "arguments"}}``; for a chat template, the arguments are the decoded object when there is
    one (see :func:`message_to_openai`)."""
    decoded = chat_template and call.parsed is not None
    function = {"name": call.name, "arguments": call.parsed if decoded else call.arguments}
    return {"id": call.id, "type": "function", "function": function}


def message_to_openai(message: Message, *, chat_template: bool = False) -> dict[str, Any]:
    """One message in the OpenAI chat shape.

    Args:
        message: the message.
        chat_template: shape it for a Jinja chat template instead of the wire: content ``""``
            rather than null, and each tool call's arguments as the decoded object when there is
            one (templates serialise them themselves).

    Returns:
        ``{"role", "content", "tool_calls"?, "tool_call_id"?, "name"?}``; a tool message never
        carries ``name`` (the wire format has no such field for it).
    """
    content = (message.content or "") if chat_template else message.content
    out: dict[str, Any] = {"role": message.role, "content": content}
    if message.tool_calls:
        out["tool_calls"] = [
            tool_call_to_openai(call, chat_template=chat_template) for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None and message.role != "tool":
        out["name"] = message.name
    return out


def tools_to_openai(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The tools in the OpenAI shape ``{"type": "function", "function": {name, description,
    parameters}}``, for the wire and for chat templates alike."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]
