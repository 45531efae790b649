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
"""

from __future__ import annotations

import ast

__all__ = ["ALLOWED_MODULES", "REFUSED_NAMES", "private_runtime_problem"]

ALLOWED_MODULES = frozenset(
    {
        "bisect", "calendar", "collections", "copy", "dataclasses", "datetime", "decimal",
        "difflib", "enum", "fractions", "functools", "heapq", "itertools", "json", "math",
        "operator", "pprint", "random", "re", "statistics", "string", "textwrap", "typing",
        "unicodedata", "zoneinfo",
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


def private_runtime_problem(code: str) -> str | None:
    """Why ``code`` would reach the runtime's private state, or None when it would not.

    Args:
        code: a block's source.

    Returns:
        The first problem with its line (``import of os (line 2)``); None for code that keeps
        to the proxies and standard-library computation, or that does not parse (the worker
        reports the syntax error as usual).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
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
    elif isinstance(node, ast.Name):
        if node.id in REFUSED_NAMES or node.id.startswith("__") or node.id.startswith("_cs"):
            return f"use of {node.id}"
    elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
        return f"access to the attribute {node.attr}"
    return None
