"""Tool calls parsed from a local model's text (Qwen2.5's ``<tool_call>{...}</tool_call>`` format).

Qwen2.5's chat template asks the model to answer a tool call as::

    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call>

:func:`parse_tool_calls` extracts every such block. A block whose JSON does not decode, or that
lacks a ``name`` or an object-valued ``arguments``, comes back as a :class:`ToolCall` with
``parsed=None``, ``error`` set and the raw text kept in ``arguments`` (issue 3, "Bad input":
malformed tool calls are returned as such; the reviewer turns them into recorded fallbacks). When
the model answered a code-executing tool (``execute_python``-like) with a fenced code block instead
of a tool call, the fenced block comes back the same way, so the caller can see what it meant.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from controlscope.core import ToolCall, ToolSpec

__all__ = ["code_tool", "parse_tool_calls", "tool_call_id"]

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n.*?(?:```|\Z)", re.DOTALL)
_CODE_LANGUAGES = ("", "python", "py", "python3")
_JSON_FENCE = re.compile(r"```[ \t]*json[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_CODE_PARAMS = ("code", "source", "program", "script")


def tool_call_id(text: str, index: int) -> str:
    """Return a deterministic id for the ``index``-th call in ``text`` (stable under replay)."""
    digest = hashlib.sha256(f"{index}\0{text}".encode()).hexdigest()[:16]
    return f"call_{index}_{digest}"


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


def _decode_call(raw: str, index: int, full_text: str) -> ToolCall:
    """Decode one ``<tool_call>`` body into a ToolCall (malformed ones keep ``raw``)."""
    call_id = tool_call_id(full_text, index)
    body = raw.strip()
    name_match = _NAME.search(body)
    guessed_name = name_match.group(1) if name_match else ""
    try:
        # strict=False admits raw newlines inside strings, which small models write in code
        obj: Any = json.loads(body, strict=False)
    except json.JSONDecodeError as exc:
        return ToolCall(
            id=call_id,
            name=guessed_name,
            arguments=body,
            error=f"tool call is not valid JSON: {exc}",
        )
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall(
            id=call_id,
            name=guessed_name,
            arguments=body,
            error='tool call is not a JSON object with a string "name"',
        )
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args, strict=False)
        except json.JSONDecodeError as exc:
            return ToolCall(
                id=call_id,
                name=obj["name"],
                arguments=obj["arguments"],
                error=f"tool call arguments are not valid JSON: {exc}",
            )
    if not isinstance(args, dict):
        return ToolCall(
            id=call_id,
            name=obj["name"],
            arguments=json.dumps(args, ensure_ascii=False),
            error="tool call arguments are not a JSON object",
        )
    return ToolCall(
        id=call_id,
        name=obj["name"],
        arguments=json.dumps(args, ensure_ascii=False),
        parsed=args,
    )


def _json_object_calls(text: str, tools: Sequence[ToolSpec]) -> list[ToolCall]:
    """Calls written as bare or ```json-fenced objects ``{"name": offered tool, "arguments": {}}``.

    Small models often answer this way instead of using ``<tool_call>`` tags. Only a text that
    consists of such objects (each whole, naming an offered tool) counts; anything else is prose.
    """
    names = {t.name for t in tools}
    bodies = [m.group(1) for m in _JSON_FENCE.finditer(text)]
    rest = _JSON_FENCE.sub("", text).strip()
    if rest:
        if bodies:
            return []
        bodies = [rest]
    calls: list[ToolCall] = []
    for i, body in enumerate(bodies):
        call = _decode_call(body, i, text)
        if call.parsed is None or call.name not in names:
            return []
        calls.append(call)
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
        and the calls in order. An unterminated last block (generation cut off) is still returned,
        flagged by ``error`` when its JSON is incomplete. Without ``<tool_call>`` tags, a text made
        only of bare or ```json-fenced call objects naming offered tools gives those calls.
        Failing that, when a code tool is offered and the text holds a fenced code block, that
        block is returned as a call with ``parsed=None`` and an ``error`` saying so (the prose
        keeps the text too).
    """
    calls = [_decode_call(m.group(1), i, text) for i, m in enumerate(_TOOL_CALL.finditer(text))]
    prose = _TOOL_CALL.sub("", text).strip() or None
    if not calls:
        calls = _json_object_calls(text, tools)
        if calls:
            return None, tuple(calls)
    if not calls:
        tool = code_tool(tools)
        fences = _FENCE.finditer(text) if tool is not None else iter(())
        fence = next((f for f in fences if f.group(1).lower() in _CODE_LANGUAGES), None)
        if tool is not None and fence is not None:
            calls.append(
                ToolCall(
                    id=tool_call_id(text, 0),
                    name=tool.name,
                    arguments=fence.group(0),
                    error=(
                        f"the model wrote a fenced code block instead of a {tool.name} tool call"
                    ),
                )
            )
    return prose, tuple(calls)
