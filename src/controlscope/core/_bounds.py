"""Bounds on data that enters a run from outside: what agent code, a model or a server shaped.

Everything a run receives ends up in its trajectory log, and the log must read back exactly what
was written (``docs/architecture.md``, "The log's schema"). The log's reader refuses JSON nested
deeper than its parser allows, non-finite numbers and strings that are not Unicode text, so data
is checked where it enters (the worker's messages, tool results, model answers) against one rule:
plain JSON data, nested at most :data:`MAX_DATA_DEPTH` levels, finite numbers, text without lone
surrogates. Text is bounded by :func:`clip_text`, which keeps both ends.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DATA_DEPTH = 64
"""Containers nested inside one value that a run accepts from outside (tool arguments, tool
results, model-written JSON). An event wraps such a value in a few levels of its own, and the
log's reader parses up to 200 levels."""

CUT_MARKER = "[... {n} chars cut ...]"
"""What :func:`clip_text` puts where it cut (the review views' marker: the clock masks of
replays recognise it)."""


def data_problem(value: Any, *, max_depth: int = MAX_DATA_DEPTH) -> str | None:
    """Why ``value`` is not plain JSON data that a run can record, or None when it is.

    Plain data is ``None``, booleans, integers, finite floats, strings without lone surrogates,
    and lists, tuples and dicts (string keys) of plain data nested at most ``max_depth`` levels.
    The walk is iterative, so no nesting can exhaust the interpreter's stack.

    Args:
        value: the value to check.
        max_depth: the most containers nested in each other (a scalar alone is depth 0).

    Returns:
        None, or the first problem found in words (e.g. ``"nested deeper than 64 levels"``).
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if item is None or kind is bool or kind is int:
            continue
        if kind is float:
            if not math.isfinite(item):
                return f"a number is not finite ({item!r})"
        elif kind is str:
            if not _is_text(item):
                return "a string holds a lone surrogate (not Unicode text)"
        elif kind is dict or kind is list or kind is tuple:
            if depth >= max_depth:
                return f"nested deeper than {max_depth} levels"
            if kind is dict:
                for key in item:
                    if type(key) is not str or not _is_text(key):
                        return f"a key is not text ({type(key).__name__})"
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        else:
            return f"a {kind.__name__} is not JSON data"
    return None


def refuse_json_constant(name: str) -> None:
    """A ``parse_constant`` hook for :func:`json.loads` that refuses ``NaN`` and ``Infinity``.

    Raises:
        ValueError: always (standard JSON has no such constants).
    """
    raise ValueError(f"{name} is not JSON")


def finite_json_float(text: str) -> float:
    """A ``parse_float`` hook for :func:`json.loads` that refuses numbers too large for a float
    (``1e999`` would read as infinity).

    Raises:
        ValueError: the number is not finite as a float.
    """
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def clip_text(text: str, max_chars: int) -> str:
    """``text`` cut to about ``max_chars`` characters, keeping its head and its tail.

    The cut is marked with :data:`CUT_MARKER` (its count is the characters left out). A
    traceback keeps where it started and the exception at its end.

    Args:
        text: any text.
        max_chars: the characters to keep (at least 2; the marker comes on top).

    Returns:
        ``text`` itself when it fits, else its first and last ``max_chars // 2`` characters
        around the marker.
    """
    if len(text) <= max_chars:
        return text
    keep = max(1, max_chars // 2)
    cut = len(text) - 2 * keep
    return f"{text[:keep]}{CUT_MARKER.format(n=cut)}{text[-keep:]}"


def _is_text(text: str) -> bool:
    """Whether ``text`` is Unicode text (encodable as UTF-8: no lone surrogates)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
