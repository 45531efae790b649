"""What an operation changed at a boundary: the call's arguments before and after, and the
block's code against a block-data edit or a replacement (paper 3.1 and A.2), as a unified diff
made with :mod:`difflib`."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any, Literal

from controlscope.core import Boundary, Operation, operation_spec

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


def patched(boundary: Boundary, operation: Operation) -> dict[str, Any]:
    """The pending call's arguments after an operation that carries new argument values (as
    the worker applies it: names not given keep their values); the arguments unchanged under
    any other operation (a block-data edit's effect is known from the call as made)."""
    spec = operation_spec(operation.kind)
    final = spec.final_arguments(operation, boundary) if spec.payload == "arguments" else None
    return dict(final.arguments if final is not None else boundary.arguments)


def code_diff(code: str, operation: Operation) -> list[DiffLine] | None:
    """The block's code against the code an operation runs instead: a block-data edit's
    rewrite or a replacement (:meth:`~controlscope.core.OperationSpec.new_code`).

    Args:
        code: the running block's source at the boundary.
        operation: the realized operation.

    Returns:
        The unified diff's lines (every line of both, so nothing is hidden; the new side named
        by the kind's noun), or None for an operation that changes no code.
    """
    spec = operation_spec(operation.kind)
    new_code = spec.new_code(operation)
    if new_code is None:
        return None
    old, new = code.splitlines(), new_code.splitlines()
    lines = difflib.unified_diff(
        old, new, "block", spec.noun, n=max(len(old), len(new)), lineterm=""
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
