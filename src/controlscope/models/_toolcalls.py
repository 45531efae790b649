"""Tool calls parsed from a local model's text (Qwen2.5's ``<tool_call>{...}</tool_call>`` format).

Qwen2.5's chat template asks the model to answer a tool call as::

    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call>

:func:`parse_tool_calls` extracts every such block. A block whose JSON does not decode, or that
lacks a ``name`` or an object-valued ``arguments``, comes back as a :class:`ToolCall` with
``parsed=None``, ``error`` set and the raw text kept in ``arguments`` (malformed tool calls are
returned as such; the planner and the reviewer turn them into recorded messages and fallbacks).
The reading is JSON-aware: after the opening tag, JSON values are decoded one after another
(``json.JSONDecoder.raw_decode``) until the closing tag, so a ``</tool_call>`` inside a JSON string
does not end the call and several objects in one block are several calls. The arguments of every
call are decoded by :func:`controlscope.models._chat_format.parse_tool_call`, as for an
OpenAI-compatible endpoint (blank arguments are ``{}``; ids are :func:`tool_call_id`). When
the model answered a code-executing tool (``execute_python``-like) with a fenced code block instead
of a tool call, the fenced block comes back the same way, so the caller can see what it meant.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from controlscope.core import ToolCall, ToolSpec, fences, json_value_at, program_fence
from controlscope.models._chat_format import parse_tool_call, tool_call_id

__all__ = ["code_tool", "parse_tool_calls", "tool_call_id"]

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_CODE_PARAMS = ("code", "source", "program", "script")

_Item = tuple[str, Any, str | None]
"""One value read from a call block: its raw text, the decoded value, an error (then no value)."""


def code_tool(tools: Sequence[ToolSpec]) -> ToolSpec | None:
    """Return the offered tool that executes code, if any (``execute_python``-like).

    A tool counts when its name mentions ``python`` or ``exec`` and it has a string parameter named
    ``code``, ``source``, ``program`` or ``script``.
    """
    for tool in tools:
        props = tool.parameters.get("properties", {})
        if not isinstance(props, dict):
            continue
        has_code_param = any(
            isinstance(props.get(p), dict) and props[p].get("type") == "string"
            for p in _CODE_PARAMS
        )
        lowered = tool.name.lower()
        if has_code_param and ("python" in lowered or "exec" in lowered):
            return tool
    return None


def _read_values(text: str, pos: int) -> tuple[list[_Item], int]:
    """The JSON values of a call block whose body starts at ``text[pos]``.

    Values are decoded one after another until the closing tag or the end of the text; text
    that does not decode becomes one malformed item running to the closing tag (or the end).

    Returns:
        The items and the offset just past the block (its closing tag, or the end of the text).
    """
    items: list[_Item] = []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return items, len(text)
        if text.startswith(_CLOSE, pos):
            return items, pos + len(_CLOSE)
        try:
            value, end = json_value_at(text, pos)
        except json.JSONDecodeError as exc:
            close = text.find(_CLOSE, pos)
            stop = len(text) if close < 0 else close
            items.append((text[pos:stop].strip(), None, f"tool call is not valid JSON: {exc}"))
            return items, len(text) if close < 0 else close + len(_CLOSE)
        items.append((text[pos:end], value, None))
        pos = end


def _decode_call(item: _Item, index: int) -> ToolCall:
    """One ``{"name": ..., "arguments": {...}}`` value as a ToolCall (malformed ones keep the raw
    text; the name is recovered from it when it can be)."""
    raw, value, error = item
    if error is None and isinstance(value, dict) and isinstance(value.get("name"), str):
        arguments = value.get("arguments", value.get("parameters"))
        return parse_tool_call(None, value["name"], arguments, index)
    name_match = _NAME.search(raw)
    name = name_match.group(1) if name_match else ""
    error = error or 'tool call is not a JSON object with a string "name"'
    return ToolCall(id=tool_call_id(raw, index, name), name=name, arguments=raw, error=error)


def _tagged_calls(text: str) -> tuple[list[ToolCall], str | None]:
    """The calls of every ``<tool_call>`` block, and the text outside the blocks (stripped)."""
    items: list[_Item] = []
    prose: list[str] = []
    pos = 0
    while (start := text.find(_OPEN, pos)) >= 0:
        prose.append(text[pos:start])
        found, pos = _read_values(text, start + len(_OPEN))
        items.extend(found)
    prose.append(text[pos:])
    calls = [_decode_call(item, i) for i, item in enumerate(items)]
    return calls, "".join(prose).strip() or None


def _json_object_calls(text: str, tools: Sequence[ToolSpec]) -> list[ToolCall]:
    """Calls written as bare or ```json-fenced objects ``{"name": offered tool, "arguments": {}}``.

    Small models often answer this way instead of using ``<tool_call>`` tags. Only a text that
    consists of such objects (each whole, naming an offered tool) counts; anything else is prose.
    """
    blocks = [f for f in fences(text) if f.language == "json"]
    bodies = [f.body for f in blocks]
    outside = text
    for block in reversed(blocks):
        outside = outside[: block.start] + outside[block.end :]
    if outside.strip():
        if blocks:
            return []
        bodies = [text]
    items: list[_Item] = []
    for body in bodies:
        found, _ = _read_values(body, 0)
        items.extend(found)
    names = {t.name for t in tools}
    calls = [_decode_call(item, i) for i, item in enumerate(items)]
    if not calls or any(c.parsed is None or c.name not in names for c in calls):
        return []
    return calls


def parse_tool_calls(
    text: str, tools: Sequence[ToolSpec]
) -> tuple[str | None, tuple[ToolCall, ...]]:
    """Split a model's raw answer into its prose and its tool calls.

    Args:
        text: the generated text, special tokens such as ``<tool_call>`` included.
        tools: the tools offered in the request (used to recognise a fenced-code answer to an
            ``execute_python``-like tool).

    Returns:
        ``(prose, calls)``: the text outside ``<tool_call>`` blocks, stripped (None when empty),
        and the calls in order (one per JSON object of a block). An unterminated last block
        (generation cut off) is still returned, flagged by ``error`` when its JSON is
        incomplete. Without ``<tool_call>`` tags, a text made only of bare or ```json-fenced
        call objects naming offered tools gives those calls. Failing that, when a code tool is
        offered and the text holds a program (:func:`controlscope.core.program_fence`), that
        fenced block is returned as a call with ``parsed=None`` and an ``error`` saying so (the
        prose keeps the text too).
    """
    calls, prose = _tagged_calls(text)
    if calls:
        return prose, tuple(calls)
    calls = _json_object_calls(text, tools)
    if calls:
        return None, tuple(calls)
    tool = code_tool(tools)
    program = program_fence(text) if tool is not None else None
    if tool is None or program is None:
        return prose, ()
    fenced = text[program.start : program.end]
    error = f"the model wrote a fenced code block instead of a {tool.name} tool call"
    call = ToolCall(
        id=tool_call_id(fenced, 0, tool.name), name=tool.name, arguments=fenced, error=error
    )
    return prose, (call,)
