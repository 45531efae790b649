"""Judging a reviewer's proposal against the granted scope (paper section 3.1).

:func:`validate_operation` is the one check every proposal passes before it can run: a rejected
proposal is recorded and executed as ``keep``. Scope is judged here; each kind's own rules are
its spec's (:meth:`~controlscope.core.OperationSpec.check`). Block-data validation uses the
worker runtime's own constant walk (:func:`block_data_constants`), so what it accepts the worker
can make effective. The records it judges (:class:`~controlscope.core.Scope`, the operations,
:class:`~controlscope.core.Validation`) and the helpers re-exported here live in
:mod:`controlscope.core`.
"""

from __future__ import annotations

from controlscope.core import (
    CODE_NAME_TOKENS,
    DATA_CODE_QUALIFIERS,
    SCALAR_TYPES,
    Boundary,
    Keep,
    Operation,
    OperationSet,
    RejectionReason,
    Scope,
    ToolSchema,
    Validation,
    block_data_constants,
    code_parameters,
    is_code_parameter,
    operation_spec,
    recorded_operation,
)

__all__ = [
    "CODE_NAME_TOKENS",
    "DATA_CODE_QUALIFIERS",
    "SCALAR_TYPES",
    "block_data_constants",
    "code_parameters",
    "is_code_parameter",
    "validate_operation",
]


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def _reject(
    granted: Scope, proposal: Operation | None, reason: RejectionReason, detail: str
) -> Validation:
    return Validation(
        granted=granted,
        proposal=recorded_operation(proposal),
        accepted=False,
        reason=reason,
        detail=detail,
        realized=Keep(),
    )


def _accept(granted: Scope, proposal: Operation) -> Validation:
    return Validation(granted=granted, proposal=proposal, accepted=True, realized=proposal)


def validate_operation(
    proposal: Operation | None,
    granted: OperationSet | Scope,
    *,
    boundary: Boundary,
    tool: ToolSchema,
) -> Validation:
    """Judge a reviewer's proposal at a boundary against the granted operation set (paper
    section 3.1, eq. 1-3; A.2).

    Rules, checked in this order; the first failing one gives the typed ``reason``, and a rejected
    proposal is realized as ``Keep()`` (a "fallback", ``docs/architecture.md``). Rules 1-2 are
    checked here, rules 3-6 by the kind's spec (:meth:`~controlscope.core.OperationSpec.check`):

    1. ``None`` (nothing parseable) -> ``malformed``.
    2. The operation is not in the granted set -> ``out_of_scope`` (under the default lattice
       Full grants keep, patch_arguments and replace_workflow, not patch_block_data). Scopes
       nest within a lattice, so a larger grant accepts every operation a smaller one does.
    3. ``keep`` is always accepted; a ``patch_block_data`` or ``replace_workflow`` whose code
       is longer than :data:`~controlscope.core.MAX_CODE_CHARS` -> ``too_large`` (before it
       is parsed; the recorded proposal holds its code clipped).
    4. ``patch_arguments`` (Arg):

       - no argument named -> ``empty_patch``;
       - a name not among the schema's ``properties`` -> ``unknown_argument`` (a schema with no
         ``properties`` that allows additional properties leaves names to the schema check);
       - a code-valued parameter (``tool.code_params`` or schema hints, see
         :func:`is_code_parameter`) -> ``code_parameter``;
       - values that are not JSON (objects, NaN, infinities) -> ``schema_violation``;
       - every patched value equal to the current one -> ``empty_patch``. A patch sets values; it
         cannot delete an argument;
       - the final arguments (the spec's ``final_arguments``, which the worker applies)
         showing a JSON-schema error that the unpatched call did not have (validator from the
         schema's ``$schema``, default Draft 2020-12) -> ``schema_violation``. An error the
         pending call already had does not block a patch of another argument: Keep would fail
         the same way.

    5. ``patch_block_data`` (Params, paper section A.2 "coordinated data edits"): at a call
       whose data it cannot edit (``boundary.params_refusal``) -> ``data_not_editable``. The
       code must compile (``syntax_error``), and its syntax tree must equal ``boundary.code``'s
       with every constant blanked (``structure_changed``; comments and layout free). Only data
       constants (see :func:`block_data_constants`) may change: a change to an f-string format
       spec, a docstring or a ``case`` pattern is ``structure_changed``, because the running
       block would not see it. A constant may change type only among str/int/float/bool/None
       (other types, e.g. bytes, ``...``, keep theirs) -> else ``structure_changed``. A sign is
       structure: ``-1`` -> ``-5`` is data, ``-1`` -> ``5`` is not. No constant changed ->
       ``empty_patch``. Final arguments are checked as for ``patch_arguments``.
    6. ``replace_workflow`` (Full): the code must compile (``syntax_error``: module-level
       ``return``, top-level ``await`` and null bytes included). Code with no statement (empty,
       blank or comments only) -> ``empty_patch``: an empty code field is the commonest malformed
       answer of small models, and a reviewer that wants the workflow to stop can say so in code
       (``print("stopping: ...")``), which keeps the decision visible in the log.

    Args:
        proposal: the parsed proposal (see :func:`parse_operation`), or None.
        granted: the operation set the reviewer was offered; a bare :class:`Scope` is read in
            the ``v2`` lattice, where every scope exists (``OperationSet.of(scope, "v2")``).
        boundary: the pending call (its ``arguments`` and the running block's ``code``).
        tool: the schema of the pending call's tool.

    Returns:
        A :class:`Validation` with granted, proposal, verdict and realized operation.

    Raises:
        TypeError: ``granted`` is neither a :class:`Scope` nor an :class:`OperationSet`.
        ValueError: ``tool`` is not the pending call's tool (a controller bug, not a review).
    """
    if isinstance(granted, Scope):
        granted = OperationSet.of(granted, "v2")
    if not isinstance(granted, OperationSet):
        raise TypeError(f"granted must be a Scope or an OperationSet, got {type(granted).__name__}")
    if tool.name != boundary.tool:
        raise ValueError(
            f"the tool schema {tool.name!r} does not belong to the pending call {boundary.tool!r}"
        )
    return _judge(proposal, granted, boundary, tool)


def _judge(
    proposal: Operation | None, granted: OperationSet, boundary: Boundary, tool: ToolSchema
) -> Validation:
    """Rules 1-2 of :func:`validate_operation`, then the kind's own (3-6)."""
    scope = granted.scope
    if proposal is None:
        return _reject(scope, None, "malformed", "the review contained no parseable operation")
    if not granted.allows(proposal.kind):
        return _reject(
            scope,
            proposal,
            "out_of_scope",
            f"{proposal.kind} is not granted: {granted.describe()}",
        )
    rejection = operation_spec(proposal.kind).check(proposal, boundary, tool)
    if rejection is not None:
        return _reject(scope, proposal, rejection.reason, rejection.detail)
    return _accept(scope, proposal)
