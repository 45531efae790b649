"""Text as the viewer shows it: whatever a log, a file name or a message holds, the page shows
every character of it, and nothing in it can break the page.

A file name is bytes; one that is not UTF-8 reaches Python with its bad bytes as lone
surrogates (PEP 383), which no page can encode: they are shown escaped (``\\xff``).

Characters a browser would not show as they are get a visible mark instead: control characters
(a NUL is dropped by the HTML parser, a terminal escape is invisible) as their Unicode control
pictures (``\u2400``, ``\u241b``), and the bidirectional controls, which would draw the text
after them in another order than it is read and run ("Trojan Source"), as their abbreviations in
angle brackets (``\u27e8RLO\u27e9``). Tabs and line breaks are kept.
"""

from __future__ import annotations

import os
import re
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


_BIDI = {
    0x061C: "ALM", 0x200E: "LRM", 0x200F: "RLM", 0x202A: "LRE", 0x202B: "RLE", 0x202C: "PDF",
    0x202D: "LRO", 0x202E: "RLO", 0x2066: "LRI", 0x2067: "RLI", 0x2068: "FSI", 0x2069: "PDI",
}  # fmt: skip
_MARKS: dict[int, str] = {
    **{c: chr(0x2400 + c) for c in range(0x20) if chr(c) not in "\t\n\r"},
    0x7F: "\u2421",
    **{c: f"\u27e8U+{c:04X}\u27e9" for c in range(0x80, 0xA0)},
    **{c: f"\u27e8{name}\u27e9" for c, name in _BIDI.items()},
}
"""Each character a browser would hide or let reorder the text, and its visible mark."""


_HIDDEN = re.compile("[" + "".join(re.escape(chr(c)) for c in _MARKS) + "]")


def visible(text: str) -> str:
    """``text`` with each control and bidirectional control character replaced by its mark
    (see the module's docstring); every other character kept."""
    return _HIDDEN.sub(lambda found: _MARKS[ord(found.group())], text)


def shown(value: object) -> object:
    """What the page's templates print for ``value`` (Jinja's ``finalize``): a path or text
    with its unencodable characters escaped by :func:`shown_name` and its hidden ones marked by
    :func:`visible`; anything else unchanged."""
    if isinstance(value, PurePath):
        return visible(shown_name(value))
    if isinstance(value, str) and not hasattr(value, "__html__"):
        return visible(shown_name(value))
    return value
