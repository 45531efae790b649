"""Tool proxies: Python functions generated from the tools' schemas (paper section A.1).

A proxy is the function the planner's prompt shows for the tool
(:func:`controlscope.core.python_signature`): the tool's Python name, one parameter per schema
property (required ones first; an optional one defaults to the schema's ``default``, else to
``None``, and is left out of the call when it is ``None``), and the tool's description as its
docstring. Calling it with keyword or positional arguments hands ``(tool_name,
arguments_by_name)`` to the runtime's boundary (``_cs_call``); the runtime pauses there until the
controller answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlscope.core import ToolSchema, python_name, python_signature, tool_params

__all__ = ["ProxySet", "generate_proxies"]


@dataclass(frozen=True)
class ProxySet:
    """Generated proxy source and the positional parameter order of each tool.

    Attributes:
        source: Python source defining one function per tool (run by the worker runtime).
        params: proxy function name -> the tool's argument names in positional order.
        tools: proxy function name -> the tool's name on the server.
        signatures: the tool's name on the server -> its parameters in positional order, each
            ``[argument name, Python parameter name]`` (how a call's arguments are named).
    """

    source: str
    params: dict[str, list[str]]
    tools: dict[str, str]
    signatures: dict[str, list[list[str]]]


def _pairs(items: list[tuple[str, str]]) -> str:
    """Source of a tuple of ``(argument name, parameter)`` pairs."""
    inner = ", ".join(f"({name!r}, {pname})" for name, pname in items)
    return f"({inner}{',' if len(items) == 1 else ''})"


def _proxy_source(schema: ToolSchema) -> str:
    """One proxy function's source (see the module for its rules)."""
    params = tool_params(schema)
    required = [(p.name, p.python) for p in params if p.required]
    optional = [(p.name, p.python) for p in params if not p.required]
    parts = [f"{name!r}: {pname}" for name, pname in required]
    if optional:
        parts.append(f"**{{k: v for k, v in {_pairs(optional)} if v is not None}}")
    doc = (schema.description or f"Call the {schema.name} tool.").replace('"""', "'''")
    return (
        f"def {python_signature(schema, annotated=False)}:\n"
        f"    {doc!r}\n"
        f"    return _cs_call({schema.name!r}, {{{', '.join(parts)}}})\n"
    )


def generate_proxies(schemas: list[ToolSchema]) -> ProxySet:
    """Generate the proxy source for a server's tools.

    Args:
        schemas: the tools, in the server's order.

    Returns:
        The :class:`ProxySet`.

    Raises:
        ValueError: two tools map to the same Python name, or a schema default is not a JSON
            literal.
    """
    chunks: list[str] = []
    params: dict[str, list[str]] = {}
    tools: dict[str, str] = {}
    signatures: dict[str, list[list[str]]] = {}
    for schema in schemas:
        fname = python_name(schema.name)
        if fname in tools:
            raise ValueError(f"tools {tools[fname]!r} and {schema.name!r} share the name {fname}")
        chunks.append(_proxy_source(schema))
        params[fname] = [p.name for p in tool_params(schema)]
        tools[fname] = schema.name
        signatures[schema.name] = [[p.name, p.python] for p in tool_params(schema)]
    return ProxySet(source="\n\n".join(chunks), params=params, tools=tools, signatures=signatures)
