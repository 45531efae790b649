"""The private-runtime guard of the V2 app protocol (paper A.2, section 5.3).

Agent code must reach the environment only through the tool proxies. The worker's isolation
already keeps the environment's files out of its sight; the guard adds a check of each block's
code before it runs (a planner's block or a replacement) and refuses one that reaches for the
runtime's private state: the database or any file (``open``, file and process modules), the
proxies' and the runtime's internals (names and attributes starting with an underscore,
dunder names, ``globals()``, ``getattr``...), or dynamic code (``exec``, ``eval``,
``compile``, ``__import__``). Standard-library computation stays allowed: imports are limited
to the data modules of :data:`ALLOWED_MODULES`. The other users' tokens are out of reach as
they are without the guard: an app gives a token only for its user's own password.

Being a check of the source, the guard also refuses what reaches the same state by a detour:
a module an allowed module imported (``typing.sys``, ``dataclasses.builtins``), attribute
access by a string (``operator.attrgetter``, ``string.Formatter``, a format string's
``{0.__globals__}`` field, a ``match`` class pattern's keyword), the frames and code objects
behind generators, coroutines and tracebacks (``gi_frame``, ``f_back``, ``f_globals``...),
and code evaluated from strings by ``typing`` (``get_type_hints``, ``ForwardRef``).
"""

from __future__ import annotations

import ast
import importlib
import string
import types

__all__ = ["ALLOWED_MODULES", "REFUSED_NAMES", "private_runtime_problem"]

ALLOWED_MODULES = frozenset(
    {
        "abc", "bisect", "calendar", "collections", "copy", "dataclasses", "datetime",
        "decimal", "difflib", "enum", "fractions", "functools", "heapq", "itertools", "json",
        "keyword", "math", "numbers", "operator", "pprint", "random", "re", "statistics",
        "string", "textwrap", "typing", "unicodedata", "zoneinfo",
    }
)  # fmt: skip
"""The modules agent code may import under the guard (computation on data, nothing that
reaches files, processes, the interpreter or the network)."""

REFUSED_NAMES = frozenset(
    {
        "open", "exec", "eval", "compile", "globals", "locals", "vars", "getattr", "setattr",
        "delattr", "breakpoint", "input", "memoryview", "help", "exit", "quit",
    }
)  # fmt: skip
"""Built-in names refused under the guard (files, dynamic code, introspection)."""

REFUSED_ATTRIBUTES = frozenset(
    {
        "attrgetter", "methodcaller", "Formatter", "get_type_hints", "ForwardRef",
        "singledispatch", "singledispatchmethod", "reset_tzpath", "mro", "format_map",
        "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await",
        "cr_origin", "ag_frame", "ag_code", "ag_await", "f_back", "f_globals", "f_locals",
        "f_builtins", "f_code", "tb_frame", "tb_next",
    }
)  # fmt: skip
"""Attributes (and names imported from an allowed module) refused under the guard besides
those starting with an underscore: access to attributes by a string, code evaluated from a
string, and the frames and code objects behind generators, coroutines and tracebacks."""


def _imported_modules() -> frozenset[str]:
    """Names under which an allowed module holds another, not allowed, module (``typing.sys``)."""
    names: set[str] = set()
    for module_name in ALLOWED_MODULES:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            top = value.__name__.split(".")[0] if isinstance(value, types.ModuleType) else ""
            if top and top not in ALLOWED_MODULES:
                names.add(name)
    return frozenset(names)


_MODULE_ATTRIBUTES = _imported_modules()


def private_runtime_problem(code: str) -> str | None:
    """Why ``code`` would reach the runtime's private state, or None when it would not.

    Args:
        code: a block's source.

    Returns:
        The first problem with its line (``import of os (line 2)``); None for code that keeps
        to the proxies and standard-library computation, or that does not parse (the worker
        reports the syntax error as usual). Code nested too deeply to check is refused: the
        worker, with a shallower stack, might still compile it.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    except (RecursionError, MemoryError):
        return "code nested too deeply to check"
    for node in ast.walk(tree):
        problem = _problem(node)
        if problem is not None:
            return f"{problem} (line {getattr(node, 'lineno', '?')})"
    return None


def _problem(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] not in ALLOWED_MODULES:
                return f"import of {alias.name}"
    elif isinstance(node, ast.ImportFrom):
        module = node.module or ""
        if node.level or module.split(".")[0] not in ALLOWED_MODULES:
            return f"import from {module or '.'}"
        for alias in node.names:
            if _refused_attribute(alias.name):
                return f"import of {module}.{alias.name}"
    elif isinstance(node, ast.Name):
        if node.id in REFUSED_NAMES or node.id.startswith("__") or node.id.startswith("_cs"):
            return f"use of {node.id}"
    elif isinstance(node, ast.Attribute):
        return _attribute_problem(node)
    elif isinstance(node, ast.MatchClass):
        for attr in node.kwd_attrs:
            if _refused_attribute(attr):
                return f"access to the attribute {attr}"
    return None


def _refused_attribute(name: str) -> bool:
    return name.startswith("_") or name in REFUSED_ATTRIBUTES or name in _MODULE_ATTRIBUTES


def _attribute_problem(node: ast.Attribute) -> str | None:
    """An attribute's problem: a refused name, or ``.format`` on a string with a refused field."""
    if _refused_attribute(node.attr):
        return f"access to the attribute {node.attr}"
    if node.attr != "format":
        return None
    if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
        return "str.format on a string built at run time (use an f-string)"
    return _format_problem(node.value.value)


def _format_problem(text: str) -> str | None:
    """A format string's field that reaches an attribute the guard refuses."""
    try:
        fields = [field for _, field, spec, _ in string.Formatter().parse(text) if field]
        fields += [
            field
            for _, _, spec, _ in string.Formatter().parse(text)
            if spec
            for _, field, _, _ in string.Formatter().parse(spec)
            if field
        ]
    except ValueError:
        return None  # the format call fails at run time as usual
    for field in fields:
        for part in field.replace("[", ".").split(".")[1:]:
            if _refused_attribute(part.rstrip("]")):
                return f"a format field reaching {part.rstrip(']')}"
    return None
