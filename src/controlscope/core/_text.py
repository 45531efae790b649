"""Reading model text: fenced code blocks and JSON objects, one implementation for every layer;
and untrusted text made inert for a terminal or an error message (:func:`escape_untrusted`).

Fences follow CommonMark's rules for fenced code blocks (https://spec.commonmark.org/0.31.2/,
section 4.5), read line by line:

- an opening fence is a line of at least three backticks or three tildes, optionally indented,
  followed by an info string (for a backtick fence, one without backticks); the info string's
  first word, lower-cased, is the block's language (``Python`` and ``python`` are one language);
- the block is closed only by a line holding nothing but at least as many of the same character
  (and blanks), so backticks inside a code line (``s = "```"``) never close it;
- a block that is never closed runs to the end of the text (a cut-off generation);
- content lines lose up to as much leading indentation as the opening fence had.

Unlike CommonMark, any indentation of a fence is accepted (models fence code inside list items).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from controlscope.core._bounds import data_problem, finite_json_float, refuse_json_constant

PYTHON_LANGUAGES = frozenset({"python", "py", "python3", "py3"})
"""Fence languages that label Python code (compared lower-cased)."""

DATA_LANGUAGES = frozenset(
    {
        "text",
        "txt",
        "plain",
        "plaintext",
        "output",
        "out",
        "result",
        "json",
        "jsonl",
        "csv",
        "tsv",
        "yaml",
        "yml",
        "toml",
        "xml",
        "markdown",
        "md",
        "log",
    }
)
"""Fence languages that label data or prose rather than a program (compared lower-cased)."""

_OPENING = re.compile(r"(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)")
_TRANSCRIPT = re.compile(r"^[ \t]*(?:output|assistant|user|execution results)[ \t]*:", re.I | re.M)


@dataclass(frozen=True)
class Fence:
    """One fenced code block of a text.

    Attributes:
        language: the info string's first word, lower-cased (``""`` without an info string).
        info: the whole info string, stripped.
        body: the lines between the fences (without the newline that ends the last one).
        start: offset in the text of the opening fence line's first character.
        end: offset just past the closing fence line (its newline excluded), or the text's
            length when the block is never closed.
        closed: whether a closing fence line was found.
    """

    language: str
    info: str
    body: str
    start: int
    end: int
    closed: bool


def _lines(text: str) -> list[tuple[int, str]]:
    """``(offset, line)`` for every line of ``text`` (``\\n`` separated, ``\\r`` dropped)."""
    out: list[tuple[int, str]] = []
    offset = 0
    for line in text.split("\n"):
        out.append((offset, line.removesuffix("\r")))
        offset += len(line) + 1
    return out


def _dedent(line: str, indent: int) -> str:
    """``line`` without up to ``indent`` leading blanks."""
    cut = 0
    while cut < indent and cut < len(line) and line[cut] in " \t":
        cut += 1
    return line[cut:]


def fences(text: str) -> list[Fence]:
    """Every fenced code block of ``text``, in order (CommonMark's rules, see the module).

    Args:
        text: any text, e.g. a model's reply.

    Returns:
        The blocks; an unclosed last block runs to the end of the text.
    """
    lines = _lines(text)
    found: list[Fence] = []
    i = 0
    while i < len(lines):
        start, line = lines[i]
        i += 1
        opening = _OPENING.fullmatch(line)
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            continue
        char, size, indent = opening["fence"][0], len(opening["fence"]), len(opening["indent"])
        closing = re.compile(rf"[ \t]*{re.escape(char)}{{{size},}}[ \t]*")
        body: list[str] = []
        end, closed = len(text), False
        while i < len(lines):
            offset, content = lines[i]
            i += 1
            if closing.fullmatch(content):
                end, closed = offset + len(content), True
                break
            body.append(_dedent(content, indent))
        info = opening["info"].strip()
        language = info.split(maxsplit=1)[0].lower() if info else ""
        found.append(Fence(language, info, "\n".join(body), start, end, closed))
    return found


def unfence(text: str) -> str:
    """The body of the one fenced block that is the whole of ``text``, else ``text`` unchanged.

    Blank text around the block is allowed; any language is. Models often fence code that is
    already delimited (a JSON string, a tool argument).
    """
    found = fences(text)
    if len(found) == 1:
        block = found[0]
        if not text[: block.start].strip() and not text[block.end :].strip():
            return block.body
    return text


def own_turn(text: str, found: list[Fence]) -> list[Fence]:
    """The blocks of ``found`` before the reply starts imagining the rest of the conversation.

    A line outside the blocks that begins with ``Output:``, ``Assistant:``, ``User:`` or
    ``Execution results:`` after a block ends the reply's own turn: small models imitate the
    worked example of the prompt and go on to write the output they expect and their next turn.
    """
    for n, block in enumerate(found):
        gap_end = found[n + 1].start if n + 1 < len(found) else len(text)
        if _TRANSCRIPT.search(text, block.end, gap_end):
            return found[: n + 1]
    return found


def program_fence(text: str) -> Fence | None:
    """The fenced block that holds a reply's program, or None when it holds none.

    The rule (one program per reply, as the planner's prompt asks):

    1. only blocks of the reply's own turn count (:func:`own_turn`);
    2. blocks labelled Python (:data:`PYTHON_LANGUAGES`, any case) are the candidates, or
       unlabelled blocks when there is no Python-labelled one;
    3. the program is the last non-blank candidate: models write illustrative snippets while
       they reason and the program they mean last.

    Args:
        text: the reply's text.

    Returns:
        The block, or None.
    """
    found = own_turn(text, fences(text))
    labelled = [f for f in found if f.language in PYTHON_LANGUAGES and f.body.strip()]
    candidates = labelled or [f for f in found if not f.language and f.body.strip()]
    return candidates[-1] if candidates else None


def foreign_fence(text: str) -> Fence | None:
    """The first non-blank block labelled neither Python nor data (``bash``, ``js``...), if any.

    A reply whose only code is in such a block is not a final answer: it meant to act.
    """
    for block in fences(text):
        known = block.language in PYTHON_LANGUAGES or block.language in DATA_LANGUAGES
        if block.language and not known and block.body.strip():
            return block
    return None


def fence(code: str, language: str = "python") -> str:
    """``code`` as a fenced block whose fence no line of ``code`` can close.

    The fence is one backtick longer than the longest run of backticks in ``code`` (at least
    three), so :func:`fences` reads the block back whole.
    """
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    marker = "`" * max(3, longest + 1)
    return f"{marker}{language}\n{code}\n{marker}"


_LENIENT = json.JSONDecoder(
    strict=False, parse_constant=refuse_json_constant, parse_float=finite_json_float
)
"""Admits raw control characters (newlines, tabs) inside strings: small models write code that
way, and the text stays unambiguous. Refuses ``NaN``, ``Infinity`` and numbers too large for a
float: the log holds standard JSON only."""


def _plain(text: str, index: int) -> tuple[Any, int]:
    """:meth:`json.JSONDecoder.raw_decode` that also refuses what the log cannot hold (see
    :func:`~controlscope.core.data_problem`): every refusal is a :class:`json.JSONDecodeError`."""
    try:
        value, end = _LENIENT.raw_decode(text, index)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as err:
        raise json.JSONDecodeError(f"not JSON data: {err}", text, index) from None
    problem = data_problem(value)
    if problem is not None:
        raise json.JSONDecodeError(f"not JSON data: {problem}", text, index)
    return value, end


def decode_json(text: str) -> Any:
    """``text`` as one JSON value (raw newlines inside strings allowed).

    Raises:
        json.JSONDecodeError: ``text`` is not one JSON value (blank text included), or one the
            log cannot hold: ``NaN`` or an infinite number, a lone surrogate, nesting deeper
            than :data:`~controlscope.core.MAX_DATA_DEPTH`.
    """
    stripped = len(text) - len(text.lstrip(" \t\n\r"))
    value, end = _plain(text, stripped)
    if text[end:].strip(" \t\n\r"):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def json_value_at(text: str, index: int) -> tuple[Any, int]:
    """The JSON value that starts at ``text[index]`` and the offset just past it.

    Raises:
        json.JSONDecodeError: no JSON value starts there (see :func:`decode_json`).
    """
    return _plain(text, index)


def json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object that starts at a ``{`` of ``text``, nested ones included, in order."""
    for match in re.finditer(r"\{", text):
        try:
            value, _ = json_value_at(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            yield value


def find_json_object(text: str, *, key: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` that has ``key``, or None.

    Looked for, in this order: the whole text; the body of a ``json`` or unlabelled fenced block;
    any object in the text (inside prose, or nested in another object).
    """
    whole = [text, *(f.body for f in fences(text) if f.language in ("json", ""))]
    for candidate in whole:
        try:
            value = decode_json(candidate.strip())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and key in value:
            return value
    return next((value for value in json_objects(text) if key in value), None)


def escape_untrusted(text: str) -> str:
    """Return ``text`` with every non-printable character (control codes, terminal escapes,
    newlines) written as a Python escape, so it prints as one inert line."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )
