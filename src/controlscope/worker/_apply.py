"""Applying a realized operation at a boundary: the one place where the call to make is decided.

Given the boundary, the operation the handler realized (already validated against the granted
scope) and what the controller knows of the running block, :func:`apply_operation` returns the
arguments of the primitive call to make, or its cancellation, and what the worker must be told
(README, the scope table; paper section 3.1 and A.2):

- ``keep``: the pending call as the block made it;
- ``patch_arguments``: the new values merged into the pending call's arguments;
- ``patch_block_data``: the rewrite's constants take effect for the rest of the block (the
  worker refills its constants table), and the pending call's plain-literal arguments take
  their new values;
- ``replace_workflow``: the pending call is cancelled and the block unwinds; the rewrite runs
  next as the replacement.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlscope.core import (
    Boundary,
    Keep,
    Operation,
    PatchArguments,
    PatchBlockData,
    ReplaceWorkflow,
    ToolResult,
)
from controlscope.worker import _runtime

_JSON_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class MakeCall:
    """The pending call is made, with these arguments.

    Attributes:
        arguments: the arguments of the primitive call to make, by parameter name.
        code: the running block's source from now on (the rewrite after ``patch_block_data``;
            later boundaries show it).
        patched: whether the worker must take ``code``'s constants (``patch_block_data``).
    """

    arguments: dict[str, Any]
    code: str
    patched: bool = False

    def reply(self, result: ToolResult) -> dict[str, Any]:
        """The worker's answer to the call once it was made.

        Args:
            result: the call's observation.

        Returns:
            ``{"t": "res", "text": ...}``, or ``{"t": "err", "msg": ...}`` for a tool error
            (agent code sees ``ToolError``); either with ``"code"`` when the block's constants
            were patched, which then take effect whatever the call gave.
        """
        reply: dict[str, Any] = (
            {"t": "err", "msg": result.text}
            if result.is_error
            else {"t": "res", "text": result.text}
        )
        if self.patched:
            reply["code"] = self.code
        return reply


@dataclass(frozen=True)
class Cancel:
    """The pending call is cancelled and the block unwinds (``replace_workflow``).

    Attributes:
        replacement: the code that replaces the rest of the block.
    """

    replacement: str

    @property
    def message(self) -> dict[str, Any]:
        """The worker's answer to the call: unwind the block."""
        return {"t": "cancel"}


Applied = MakeCall | Cancel
"""What a realized operation comes to at one boundary."""


def apply_operation(
    boundary: Boundary,
    operation: Operation,
    *,
    original_tree: ast.Module,
    literal_slots: Mapping[str, Any],
) -> Applied:
    """Decide the call to make at ``boundary`` under ``operation``.

    This is where the final arguments of every primitive call are computed.

    Args:
        boundary: the pending call (its arguments and the block's current source).
        operation: the realized operation.
        original_tree: the block as it started (parsed), against which a ``patch_block_data``
            rewrite is checked and its constants numbered.
        literal_slots: the pending call's arguments that are plain literals at its call site,
            by parameter name, each its slot in the block's constants table.

    Returns:
        :class:`MakeCall` (the arguments, and the block's source from now on) or
        :class:`Cancel`.

    Raises:
        ValueError: a ``patch_block_data`` rewrite that does not parse or changes the block's
            structure (operations must be validated before they are applied).
        TypeError: an unknown operation.
    """
    arguments = dict(boundary.arguments)
    if isinstance(operation, Keep):
        return MakeCall(arguments=arguments, code=boundary.code)
    if isinstance(operation, PatchArguments):
        return MakeCall(arguments={**arguments, **operation.arguments}, code=boundary.code)
    if isinstance(operation, PatchBlockData):
        literals = block_data_arguments(original_tree, operation.code, literal_slots)
        return MakeCall(arguments={**arguments, **literals}, code=operation.code, patched=True)
    if isinstance(operation, ReplaceWorkflow):
        return Cancel(replacement=operation.code)
    raise TypeError(f"unknown operation {operation!r}")


def block_data_arguments(
    original_tree: ast.Module, code: str, literal_slots: Mapping[str, Any]
) -> dict[str, Any]:
    """Check a ``patch_block_data`` rewrite; return the pending call's re-evaluated literals.

    Semantics: the rewrite must have the block's syntax tree except constant values. From the
    pending call on, every evaluation of a literal of this block (later statements, loop
    iterations, functions the block defines, even when called later) yields the rewrite's value;
    values already computed and stored (variables, default arguments, earlier calls) keep
    theirs. The pending call's arguments that are plain literals at its call site take the new
    values; other arguments are unchanged.

    Args:
        original_tree: the block as it started (parsed).
        code: the rewrite.
        literal_slots: parameter name -> slot of the block's constants table (entries that are
            not a valid slot are ignored).

    Returns:
        Parameter name -> the rewrite's value, for each literal argument whose new value is a
        JSON scalar.

    Raises:
        ValueError: the rewrite does not parse or changes the block's structure.
    """
    try:
        new_tree = ast.parse(code)
    except SyntaxError as exc:
        raise ValueError(f"patch_block_data code does not parse: {exc}") from None
    if _runtime.structure_key(new_tree) != _runtime.structure_key(original_tree):
        raise ValueError("patch_block_data code changes the block's structure")
    values = _runtime.slot_values(new_tree, _runtime.slot_positions(original_tree))
    out: dict[str, Any] = {}
    for name, slot in literal_slots.items():
        if isinstance(slot, int) and 0 <= slot < len(values):
            value = values[slot]
            if isinstance(value, _JSON_SCALARS):
                out[name] = value
    return out
