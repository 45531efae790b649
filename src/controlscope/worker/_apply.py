"""Applying a realized operation at a boundary: the one place where the call to make is decided.

Given the boundary, the operation the handler realized (already validated against the granted
scope) and what the controller knows of the running block, :func:`apply_operation` returns the
arguments of the primitive call to make, or its cancellation, and what the worker must be told
(README, the scope table; paper section 3.1 and A.2):

- ``keep``: the pending call as the block made it;
- ``patch_arguments``: the new values merged into the pending call's arguments;
- ``patch_block_data``: the rewrite's constants take effect for the rest of the block (the
  worker refills its constants table), and the pending call's plain-literal arguments take
  their new values (the slots the controller derived itself, ``Boundary.literal_slots``); a
  rewrite that leaves the pending call's arguments as they are says so;
- ``replace_workflow``: the pending call is cancelled and the block unwinds; the rewrite runs
  next as the replacement.

:func:`final_arguments` computes the arguments a call is made with; the scope validation
(:func:`controlscope.scope.validate_operation`) checks them against the tool's schema with the
same function, so what was validated is what runs.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlscope.core import (
    Boundary,
    Keep,
    Operation,
    OperationKind,
    PatchArguments,
    PatchBlockData,
    ReplaceWorkflow,
    ToolParam,
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
        operation: the realized operation's kind.
        requested: the arguments the block asked for, under a patch (None under ``keep``).
        notice: what the operation did not do (a ``patch_block_data`` that left the call's
            arguments unchanged), for the log.
    """

    arguments: dict[str, Any]
    code: str
    patched: bool = False
    operation: OperationKind = "keep"
    requested: dict[str, Any] | None = None
    notice: str | None = None

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


@dataclass(frozen=True)
class FinalArguments:
    """The arguments a call is made with under an operation.

    Attributes:
        arguments: the final arguments, by parameter name.
        notice: set when a ``patch_block_data`` leaves them as the block asked for them.
    """

    arguments: dict[str, Any]
    notice: str | None = None


def final_arguments(
    boundary: Boundary,
    operation: Keep | PatchArguments | PatchBlockData,
    *,
    params: Sequence[ToolParam] = (),
    original_tree: ast.Module | None = None,
) -> FinalArguments:
    """The arguments the pending call is made with under ``operation``.

    Args:
        boundary: the pending call (its arguments, the running block's source, the literal
            slots the controller derived).
        operation: the operation (not a replacement: that makes no call).
        params: the tool's parameters (an optional one whose new literal is ``None`` is left
            out of the call, as the tool's function does).
        original_tree: the block as it started, parsed; None parses ``boundary.code`` (same
            structure, same constants numbering).

    Returns:
        The final arguments and, for a block-data rewrite that changes none of them, a notice.

    Raises:
        ValueError: a ``patch_block_data`` at a call whose data it cannot edit, or whose code
            does not parse or changes the block's structure.
    """
    arguments = dict(boundary.arguments)
    if isinstance(operation, Keep):
        return FinalArguments(arguments)
    if isinstance(operation, PatchArguments):
        return FinalArguments({**arguments, **operation.arguments})
    if boundary.params_refusal is not None:
        raise ValueError(f"patch_block_data cannot edit this call: {boundary.params_refusal}")
    tree = original_tree if original_tree is not None else ast.parse(boundary.code)
    optional = {p.name for p in params if not p.required}
    for name, value in block_data_arguments(tree, operation.code, boundary.literal_slots).items():
        if value is None and name in optional:
            arguments.pop(name, None)  # the tool's function leaves out an optional None
        else:
            arguments[name] = value
    if arguments != boundary.arguments:
        return FinalArguments(arguments)
    why = (
        "none of its arguments is a literal at its call site"
        if not boundary.literal_slots
        else "the rewrite keeps the values of its literal arguments"
    )
    notice = (
        f"patch_block_data left this call's arguments unchanged ({why}); the rewrite's "
        "constants take effect for the rest of the block"
    )
    return FinalArguments(arguments, notice)


def apply_operation(
    boundary: Boundary,
    operation: Operation,
    *,
    original_tree: ast.Module,
    params: Sequence[ToolParam] = (),
) -> Applied:
    """Decide the call to make at ``boundary`` under ``operation``.

    This is where the final arguments of every primitive call are computed (with
    :func:`final_arguments`).

    Args:
        boundary: the pending call (its arguments, the block's current source and the
            literal slots the controller derived from it).
        operation: the realized operation.
        original_tree: the block as it started (parsed), against which a ``patch_block_data``
            rewrite is checked and its constants numbered.
        params: the tool's parameters.

    Returns:
        :class:`MakeCall` (the arguments, and the block's source from now on) or
        :class:`Cancel`.

    Raises:
        ValueError: a ``patch_block_data`` at a call whose data it cannot edit, or whose
            rewrite does not parse or changes the block's structure (operations must be
            validated before they are applied).
        TypeError: an unknown operation.
    """
    if isinstance(operation, ReplaceWorkflow):
        return Cancel(replacement=operation.code)
    if not isinstance(operation, Keep | PatchArguments | PatchBlockData):
        raise TypeError(f"unknown operation {operation!r}")
    final = final_arguments(boundary, operation, params=params, original_tree=original_tree)
    patched = isinstance(operation, PatchBlockData)
    return MakeCall(
        arguments=final.arguments,
        code=operation.code if isinstance(operation, PatchBlockData) else boundary.code,
        patched=patched,
        operation=operation.kind,
        requested=None if isinstance(operation, Keep) else dict(boundary.arguments),
        notice=final.notice,
    )


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
