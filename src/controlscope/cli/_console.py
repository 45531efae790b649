"""How the command line prints untrusted text (inert: no markup, no terminal control), reports a
problem (one such line on stderr, and an exit status), and reads a path or a number option."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape

from controlscope.core import escape_untrusted


def inert(text: str, *, lines: bool = False) -> str:
    """``text`` ready for a Rich console, whatever wrote it (agent code, a model, an endpoint,
    a task's files, a third-party verifier): Rich markup escaped, and every character that is
    not printable (terminal escapes, carriage returns, backspaces, NUL, bidirectional
    overrides) written as a Python escape, so it cannot recolour, retitle, clear or overwrite
    the terminal.

    Args:
        text: the text.
        lines: keep its line breaks (a verifier's output); otherwise they are escaped too.

    Returns:
        The text to put into a Rich ``print`` (inside markup of ours or alone).
    """
    if lines:
        return escape("\n".join(escape_untrusted(line) for line in text.split("\n")))
    return escape(escape_untrusted(text))


def one_line(err: ValidationError) -> str:
    """A validation error as one line naming the options, e.g. ``--max-calls: ...``.

    Args:
        err: the error of a spec built from options (field names map to ``--field-name``).

    Returns:
        Every problem, ``; ``-separated.
    """
    parts = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"])
        if not where:  # a check of the options together: its message names them
            parts.append(e["msg"].removeprefix("Value error, "))
            continue
        parts.append(f"--{where.replace('_', '-')}: {e['msg']} (got {e.get('input')!r})")
    return "; ".join(parts)


def fail(console: Console, verb: str, message: str, code: int) -> int:
    """Print ``controlscope VERB: MESSAGE`` in red on one line (the message made :func:`inert`:
    it may quote agent, model, endpoint or task text; its line breaks are written ``\\n``)
    and return ``code``.

    Args:
        console: the stderr console.
        verb: the command's verb (``run``...).
        message: what went wrong.
        code: the exit status to return.

    Returns:
        ``code``.
    """
    console.print(f"[red]controlscope {verb}: {inert(message)}[/red]")
    return code


def path_option(text: str) -> Path:
    """An option's path (argparse's ``type``): a blank one is refused, since ``Path("")`` is
    the current folder (``--state "$UNSET"`` would copy it whole into a workspace).

    Raises:
        argparse.ArgumentTypeError: ``text`` is blank.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a file or folder")
    return Path(text)


def range_words(schema: Mapping[str, Any]) -> str:
    """A number's range in words, read from its JSON schema (a pydantic field's or an
    annotated type's, where the range is declared once): ``1 to 100,000``, ``above 0, at most
    604,800``, ``at least 0``; empty when the schema gives no bound.

    Args:
        schema: the JSON schema of the number (or of ``number | null``: its ``anyOf``).
    """
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") in ("integer", "number"):
            schema = branch
            break
    integer = schema.get("type") == "integer"
    low, high = schema.get("minimum"), schema.get("maximum")
    if integer and "exclusiveMinimum" in schema:
        low = schema["exclusiveMinimum"] + 1
    if integer and "exclusiveMaximum" in schema:
        high = schema["exclusiveMaximum"] - 1
    above = None if integer else schema.get("exclusiveMinimum")
    below = None if integer else schema.get("exclusiveMaximum")
    if low is not None and high is not None:
        return f"{low:,g} to {high:,g}" if not integer else f"{low:,} to {high:,}"
    parts = [f"above {above:,g}"] if above is not None else []
    parts += [f"at least {low:,}"] if low is not None else []
    parts += [f"below {below:,g}"] if below is not None else []
    parts += [f"at most {high:,g}"] if high is not None else []
    return ", ".join(parts)


class NumberOption:
    """An option's number (argparse's ``type``), checked against the annotated type that
    declares its setting's range (:mod:`controlscope.core`'s ceilings: ``Draws``,
    ``Resamples``...), so the command line refuses what Python callers are refused, before
    anything runs (exit status 2, one line).

    Args:
        setting: the annotated type, e.g. ``controlscope.core.Draws``.

    Attributes:
        span: the range in words, for the option's help (:func:`range_words`).
    """

    def __init__(self, setting: Any) -> None:
        self._adapter: TypeAdapter[Any] = TypeAdapter(setting)
        schema = self._adapter.json_schema()
        self.span = range_words(schema)
        self.__name__ = "integer" if schema.get("type") == "integer" else "number"

    def __call__(self, text: str) -> Any:
        """The number ``text`` gives.

        Raises:
            argparse.ArgumentTypeError: not a number of the setting's kind, or out of range.
        """
        try:
            return self._adapter.validate_strings(text.strip())
        except ValidationError:
            kind = "an integer" if self.__name__ == "integer" else "a finite number"
            span = f"from {self.span}" if " to " in self.span else self.span
            raise argparse.ArgumentTypeError(f"expected {kind} {span}, not {text!r}") from None
