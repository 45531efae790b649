"""How the command line reports a problem: one escaped line on stderr, and an exit status."""

from __future__ import annotations

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape


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
    """Print ``controlscope VERB: MESSAGE`` in red (the message escaped: it may quote agent,
    model or endpoint text) and return ``code``.

    Args:
        console: the stderr console.
        verb: the command's verb (``run``...).
        message: what went wrong.
        code: the exit status to return.

    Returns:
        ``code``.
    """
    console.print(f"[red]controlscope {verb}: {escape(message)}[/red]")
    return code
