"""What an operation changed at a boundary: the call's arguments before and after, and the
block's code against a block-data edit or a replacement (paper 3.1 and A.2), as a unified diff
made with :mod:`difflib`."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any, Literal

from controlscope.core import Operation

DiffKind = Literal["add", "del", "ctx", "hunk", "head"]


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff.

    Attributes:
        kind: ``add`` (only in the new code), ``del`` (only in the old), ``ctx`` (both),
            ``hunk`` (an ``@@`` line), ``head`` (the file names).
        text: the line as ``difflib.unified_diff`` wrote it, without its newline.
    """

    kind: DiffKind
    text: str


@dataclass(frozen=True)
class ArgumentChange:
    """One argument of a primitive call, as the block asked for it and as executed.

    Attributes:
        name: the parameter's name.
        before: its value as the block's code gave it, as indented JSON ("" when absent).
        after: its value in the call as made, as indented JSON ("" when left out).
        changed: whether the two differ.
    """

    name: str
    before: str
    after: str
    changed: bool


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def argument_changes(before: dict[str, Any], after: dict[str, Any]) -> list[ArgumentChange]:
    """Every argument named in ``before`` or ``after``, in ``before``'s order then the new ones.

    Args:
        before: the arguments the block's code asked for.
        after: the arguments the call was (or will be) made with.

    Returns:
        One :class:`ArgumentChange` per name.
    """
    names = [*before, *(n for n in after if n not in before)]
    return [
        ArgumentChange(
            name=n,
            before=_json(before[n]) if n in before else "",
            after=_json(after[n]) if n in after else "",
            changed=(n in before) != (n in after) or before.get(n) != after.get(n),
        )
        for n in names
    ]


def patched(arguments: dict[str, Any], operation: Operation) -> dict[str, Any]:
    """The arguments after an argument patch (names not given keep their values, as the worker
    applies it); the arguments unchanged under any other operation (a block-data edit's effect
    is known from the call as made)."""
    if operation.kind == "patch_arguments":
        return {**arguments, **operation.arguments}
    return dict(arguments)


def code_diff(code: str, operation: Operation) -> list[DiffLine] | None:
    """The block's code against a block-data edit's rewrite or a replacement's code.

    Args:
        code: the running block's source at the boundary.
        operation: the realized operation.

    Returns:
        The unified diff's lines (every line of both, so nothing is hidden), or None for an
        operation that changes no code.
    """
    if operation.kind not in ("patch_block_data", "replace_workflow"):
        return None
    new_name = "edited block" if operation.kind == "patch_block_data" else "replacement"
    old, new = code.splitlines(), operation.code.splitlines()
    lines = difflib.unified_diff(
        old, new, "block", new_name, n=max(len(old), len(new)), lineterm=""
    )
    return [DiffLine(_kind(i, line), line) for i, line in enumerate(lines)]


def _kind(position: int, line: str) -> DiffKind:
    if position < 2:  # the "--- block" and "+++ replacement" lines
        return "head"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"
