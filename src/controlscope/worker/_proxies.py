"""Tool proxies: Python functions generated from the tools' schemas (paper section A.1).

A proxy has the tool's name, one parameter per schema property (required ones first, in schema
order; optional ones default to the schema's ``default`` or, without one, to a marker that leaves
the argument out of the call), and the tool's description as its docstring. Calling it with
keyword or positional arguments hands ``(tool_name, arguments_by_name)`` to the runtime's
boundary (``_cs_call``); the runtime pauses there until the controller answers.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from controlscope.core import ToolSchema

_IDENT = re.compile(r"[^0-9A-Za-z_]")


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


@dataclass(frozen=True)
class ProxySet:
    """Generated proxy source and the positional parameter order of each tool.

    Attributes:
        source: Python source defining one function per tool (run by the worker runtime).
        params: proxy function name -> the tool's argument names in positional order.
        tools: proxy function name -> the tool's name on the server.
    """

    source: str
    params: dict[str, list[str]]
    tools: dict[str, str]


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
    for schema in schemas:
        fname = python_name(schema.name)
        if fname in tools:
            raise ValueError(f"tools {tools[fname]!r} and {schema.name!r} share the name {fname}")
        props = schema.input_schema.get("properties") or {}
        required = [p for p in schema.input_schema.get("required") or [] if p in props]
        optional = [p for p in props if p not in required]
        order = required + optional
        used: set[str] = {"_cs_call", "_MISSING"}
        sig: list[str] = []
        pairs: list[str] = []
        for arg in order:
            pname = python_name(arg)
            while pname in used:
                pname += "_"
            used.add(pname)
            if arg in required:
                sig.append(pname)
            else:
                spec = props.get(arg) or {}
                default = spec.get("default", None) if isinstance(spec, dict) else None
                if isinstance(spec, dict) and "default" in spec:
                    if not isinstance(default, str | int | float | bool | type(None) | list | dict):
                        raise ValueError(f"{schema.name}.{arg}: default is not a JSON literal")
                    sig.append(f"{pname}={default!r}")
                else:
                    sig.append(f"{pname}=_MISSING")
            pairs.append(f"({arg!r}, {pname})")
        doc = (schema.description or f"Call the {schema.name} tool.").replace('"""', "'''")
        chunks.append(
            f"def {fname}({', '.join(sig)}):\n"
            f"    {doc!r}\n"
            f"    return _cs_call({schema.name!r}, "
            f"{{k: v for k, v in ({', '.join(pairs)}{',' if len(pairs) == 1 else ''}) "
            f"if v is not _MISSING}})\n"
        )
        params[fname] = order
        tools[fname] = schema.name
    return ProxySet(source="\n\n".join(chunks), params=params, tools=tools)
