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

:func:`final_arguments` computes the arguments a call is made with, by the kind's
:class:`~controlscope.core.OperationSpec` (:data:`controlscope.core.OPERATIONS`); the scope
validation (:func:`controlscope.scope.validate_operation`) checks them against the tool's schema
with the same spec, so what was validated is what runs. :func:`block_data_arguments` and
:class:`FinalArguments` are core's, re-exported.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controlscope.core import (
    OPERATIONS,
    Boundary,
    FinalArguments,
    Operation,
    OperationKind,
    OperationSpec,
    ToolParam,
    ToolResult,
    block_data_arguments,
)

__all__ = [
    "Applied",
    "Cancel",
    "FinalArguments",
    "MakeCall",
    "apply_operation",
    "block_data_arguments",
    "final_arguments",
]


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


def _spec(operation: object) -> OperationSpec[Any]:
    """The spec of ``operation``'s kind.

    Raises:
        TypeError: ``operation`` is not an operation.
    """
    for spec in OPERATIONS:
        if isinstance(operation, spec.model):
            return spec
    raise TypeError(f"unknown operation {operation!r}")


def final_arguments(
    boundary: Boundary,
    operation: Operation,
    *,
    params: Sequence[ToolParam] = (),
    original_tree: ast.Module | None = None,
) -> FinalArguments:
    """The arguments the pending call is made with under ``operation`` (the kind's
    :meth:`~controlscope.core.OperationSpec.final_arguments`).

    Args:
        boundary: the pending call (its arguments, the running block's source, the literal
            slots the controller derived).
        operation: the operation; one that cancels the call (a replacement) makes none.
        params: the tool's parameters (an optional one whose new literal is ``None`` is left
            out of the call, as the tool's function does).
        original_tree: the block as it started, parsed; None parses ``boundary.code`` (same
            structure, same constants numbering).

    Returns:
        The final arguments and, for a block-data rewrite that changes none of them, a notice.

    Raises:
        ValueError: an operation that makes no call; a ``patch_block_data`` at a call whose
            data it cannot edit, or whose code does not parse or changes the block's structure.
        TypeError: an unknown operation.
    """
    spec = _spec(operation)
    final = spec.final_arguments(operation, boundary, params=params, original_tree=original_tree)
    if final is None:
        raise ValueError(f"{spec.kind} cancels the pending call: it is made with no arguments")
    return final


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
    spec = _spec(operation)
    final = spec.final_arguments(operation, boundary, params=params, original_tree=original_tree)
    new_code = spec.new_code(operation)
    if final is None:
        return Cancel(replacement=new_code or "")
    return MakeCall(
        arguments=final.arguments,
        code=boundary.code if new_code is None else new_code,
        patched=new_code is not None,
        operation=spec.kind,
        requested=dict(boundary.arguments) if operation.kind != "keep" else None,
        notice=final.notice,
    )
