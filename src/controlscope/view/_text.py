"""Text as the viewer shows it: whatever a log, a file name or a message holds, the page shows
every character of it, and nothing in it can break the page.

A file name is bytes; one that is not UTF-8 reaches Python with its bad bytes as lone
surrogates (PEP 383), which no page can encode: they are shown escaped (``\\xff``).
"""

from __future__ import annotations

import os
from pathlib import PurePath


def shown_name(name: str | PurePath) -> str:
    """A file name or path as text: bytes that are not UTF-8 written as ``\\xNN``.

    Args:
        name: a name or path as Python has it (bad bytes as surrogates).

    Returns:
        The same text when it is UTF-8, else with each bad byte escaped.
    """
    text = os.fspath(name)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")  # a file name's bad bytes
        except UnicodeEncodeError:  # a lone surrogate that is no byte: its code point
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
        return raw.decode("utf-8", "backslashreplace")
    return text


def shown(value: object) -> object:
    """What the page's templates print for ``value`` (Jinja's ``finalize``): a path or text
    with its unencodable characters escaped by :func:`shown_name`; anything else unchanged."""
    if isinstance(value, PurePath):
        return shown_name(value)
    if isinstance(value, str) and not hasattr(value, "__html__"):
        return shown_name(value)
    return value
