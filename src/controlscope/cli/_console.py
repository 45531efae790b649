"""How the command line prints untrusted text (inert: no markup, no terminal control), reports a
problem (one such line on stderr, and an exit status), and reads a path option."""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import ValidationError
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
    """Print ``controlscope VERB: MESSAGE`` in red (the message made :func:`inert`: it may quote
    agent, model, endpoint or task text) and return ``code``.

    Args:
        console: the stderr console.
        verb: the command's verb (``run``...).
        message: what went wrong.
        code: the exit status to return.

    Returns:
        ``code``.
    """
    console.print(f"[red]controlscope {verb}: {inert(message, lines=True)}[/red]")
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
