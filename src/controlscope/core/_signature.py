"""A tool's JSON schema as a Python function signature: one rule for the prompt and the proxies.

The planner's prompt shows every tool as a ``def`` line, and the worker runs a proxy function
per tool (paper section A.1: "tools are exposed as Python functions"). Both come from
:func:`tool_params`, so the agent calls exactly the function it was shown:

- the function is named :func:`python_name` of the tool, each parameter :func:`python_name` of
  its argument (made unique within the function);
- required parameters come first, in the schema's ``required`` order, then the optional ones in
  the schema's ``properties`` order;
- an optional parameter defaults to its schema ``default`` when there is one, else to ``None``;
  an optional parameter whose value is ``None`` is left out of the call, so that the server
  applies its own default (``None`` is never sent for it).
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from controlscope.core._tools import ToolSchema

_IDENT = re.compile(r"[^0-9A-Za-z_]")
_JSON_LITERAL = (str, int, float, bool, type(None), list, dict)
_JSON_TO_PY = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
}
_RESERVED = frozenset({"_cs_call"})
"""Names a proxy's body uses, which no parameter may take."""


def python_name(name: str) -> str:
    """A valid, non-keyword Python identifier for a tool or parameter name.

    Characters outside ``[0-9A-Za-z_]`` become ``_``; a leading digit gets a ``_`` prefix and a
    keyword (``from``, ``class``...) a ``_`` suffix.
    """
    out = _IDENT.sub("_", name) or "_"
    if out[0].isdigit():
        out = "_" + out
    if keyword.iskeyword(out) or keyword.issoftkeyword(out):
        out += "_"
    return out


BUILTIN_NAMES = frozenset(
    {name for name in dir(builtins) if not name.startswith("_")} | {"exit", "quit"}
)
"""The names Python's builtins go by in the agent's program (``print``, ``open``, ``len``...;
``exit`` and ``quit`` included, which the worker defines as the ``site`` module would)."""


def shadowed_builtins(tools: Iterable[ToolSchema]) -> list[str]:
    """The tools' Python names (:func:`python_name`) that are names of Python builtins
    (:data:`BUILTIN_NAMES`), in the tools' order: in the agent's program each such name is the
    tool's proxy, so a call of ``print(...)`` there calls the tool, not the builtin."""
    names = [python_name(tool.name) for tool in tools]
    return [name for name in dict.fromkeys(names) if name in BUILTIN_NAMES]


def shadowing_warning(tools: Iterable[ToolSchema]) -> str | None:
    """One line warning that tools replace Python builtins in the agent's program
    (:func:`shadowed_builtins`); None when none does."""
    names = shadowed_builtins(tools)
    if not names:
        return None
    listed = ", ".join(names)
    return f"tools named like Python builtins replace them in the agent's program: {listed}"


@dataclass(frozen=True)
class ToolParam:
    """One parameter of a tool's Python function.

    Attributes:
        name: the argument's name on the server.
        python: the parameter's name in Python (unique within the function).
        schema: the argument's JSON schema (``{}`` when the schema gives none).
        required: whether the schema requires the argument.
        default: the value an optional parameter defaults to (the schema's ``default``, else
            ``None``); ``None`` for a required one.
    """

    name: str
    python: str
    schema: dict[str, Any]
    required: bool
    default: Any = None


def tool_params(tool: ToolSchema) -> list[ToolParam]:
    """The tool's parameters in positional order (required first; see the module).

    Raises:
        ValueError: a schema ``default`` is not a JSON literal.
    """
    props: dict[str, Any] = dict(tool.input_schema.get("properties") or {})
    required = [p for p in tool.input_schema.get("required") or [] if p in props]
    optional = [p for p in props if p not in required]
    used = set(_RESERVED)
    params: list[ToolParam] = []
    for name in required + optional:
        pname = python_name(name)
        while pname in used:
            pname += "_"
        used.add(pname)
        schema = props[name] if isinstance(props[name], dict) else {}
        default = schema.get("default")
        if not isinstance(default, _JSON_LITERAL):
            raise ValueError(f"{tool.name}.{name}: default is not a JSON literal")
        is_required = name in required
        params.append(ToolParam(name, pname, schema, is_required, None if is_required else default))
    return params


def annotation(schema: dict[str, Any]) -> str:
    """The Python annotation for an argument's JSON schema (``object`` when it gives no type)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        names = [_JSON_TO_PY.get(str(k), "object") for k in kind if k != "null"]
        return " | ".join(names) or "object"
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, dict) and items.get("type") in _JSON_TO_PY:
            return f"list[{_JSON_TO_PY[str(items['type'])]}]"
        return "list"
    if isinstance(kind, str):
        return _JSON_TO_PY.get(kind, "object")
    return "object"


def python_signature(tool: ToolSchema, *, annotated: bool = True) -> str:
    """``name(a: str, b: int = 3, c: float = None)``: the tool's function head without ``def``.

    Args:
        tool: the tool.
        annotated: whether parameters carry annotations (the prompt shows them; the generated
            proxies do without).

    Raises:
        ValueError: a schema ``default`` is not a JSON literal.
    """
    parts: list[str] = []
    for param in tool_params(tool):
        text = param.python
        if annotated:
            text += f": {annotation(param.schema)}"
        if not param.required:
            text += f" = {param.default!r}" if annotated else f"={param.default!r}"
        parts.append(text)
    return f"{python_name(tool.name)}({', '.join(parts)})"
