"""Scopes and operations: what a reviewer may do at a boundary, and the verdict on a proposal.

Paper section 3.1 defines nested operation sets A_Keep ⊂ A_Arg ⊂ A_Full; Params (the paper's
AppWorld V2 "coordinated data edit", section A.2) sits between Arg and Full. These are records
shared by every layer; judging a proposal is :func:`controlscope.scope.validate_operation`.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer


class Scope(enum.IntEnum):
    """Granted scope, ordered by inclusion: Keep ⊂ Arg ⊂ Params ⊂ Full (paper section 3.1).

    Attributes:
        KEEP: only ``keep``: the program continues unchanged.
        ARG: also ``patch_arguments``: new values for the pending call's data arguments.
        PARAMS: also ``patch_block_data``: the block rewritten with other constants.
        FULL: also ``replace_workflow``: new code for the rest of the block (or reply).
    """

    KEEP = 0
    ARG = 1
    PARAMS = 2
    FULL = 3


OperationKind = Literal["keep", "patch_arguments", "patch_block_data", "replace_workflow"]

OPERATION_KINDS: tuple[OperationKind, ...] = get_args(OperationKind)
"""Every operation kind, smallest scope first."""

SCOPE_NAMES: tuple[str, ...] = tuple(s.name.lower() for s in Scope)
"""The scopes' names (``keep``, ``arg``, ``params``, ``full``), smallest first."""


class Keep(BaseModel):
    """Continue the program unchanged."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["keep"] = "keep"


class PatchArguments(BaseModel):
    """Arg: new values for some data arguments of the pending primitive call.

    Attributes:
        arguments: argument names to their new values; names not given keep their values.
    """

    model_config = ConfigDict(frozen=True)
    kind: Literal["patch_arguments"] = "patch_arguments"
    arguments: dict[str, Any]


class PatchBlockData(BaseModel):
    """Params: a rewrite of the whole current block whose syntax tree equals the original except for
    constant values.

    Attributes:
        code: the rewritten block's full source.
    """

    model_config = ConfigDict(frozen=True)
    kind: Literal["patch_block_data"] = "patch_block_data"
    code: str


class ReplaceWorkflow(BaseModel):
    """Full: new code for the rest of the block (or reply); the pending call is cancelled.

    Attributes:
        code: the replacement's source, run in the same namespace.
    """

    model_config = ConfigDict(frozen=True)
    kind: Literal["replace_workflow"] = "replace_workflow"
    code: str


Operation = Annotated[
    Keep | PatchArguments | PatchBlockData | ReplaceWorkflow, Field(discriminator="kind")
]
"""A reviewer's operation at a boundary, one per scope level; ``kind`` tells which."""

#: The least scope that grants each operation kind.
REQUIRED_SCOPE: dict[str, Scope] = {
    "keep": Scope.KEEP,
    "patch_arguments": Scope.ARG,
    "patch_block_data": Scope.PARAMS,
    "replace_workflow": Scope.FULL,
}

RejectionReason = Literal[
    "out_of_scope",
    "unknown_argument",
    "schema_violation",
    "code_parameter",
    "structure_changed",
    "syntax_error",
    "empty_patch",
    "malformed",
    "data_not_editable",
]
"""Why a proposal was rejected (it is then executed as ``Keep``).

``malformed`` means the review held no parseable operation; ``data_not_editable`` a
``patch_block_data`` at a call whose data it cannot edit (``Boundary.params_refusal``)."""


def _scope_from(value: Any) -> Any:
    """Accept a scope as a :class:`Scope`, its integer value or its (case-insensitive) name."""
    if isinstance(value, str) and not value.isdigit():
        try:
            return Scope[value.upper()]
        except KeyError:
            names = ", ".join(SCOPE_NAMES)
            raise ValueError(f"unknown scope {value!r} (expected one of {names})") from None
    return value


ScopeName = Annotated[
    Scope,
    BeforeValidator(_scope_from),
    PlainSerializer(lambda s: Scope(s).name.lower(), return_type=str),
]
"""A :class:`Scope` in a record: written as its lower-case name (``"full"``), read back from a
name or an integer."""


class Validation(BaseModel):
    """The verdict on one proposal, for the log.

    Attributes:
        granted: the scope the reviewer was offered.
        proposal: what the reviewer proposed (None when it proposed nothing parseable).
        accepted: whether the proposal is executed as proposed.
        reason: the typed rejection reason when not accepted.
        detail: a human-readable explanation of the rejection.
        realized: the operation actually executed (``Keep`` when rejected).
    """

    granted: ScopeName
    proposal: Operation | None
    accepted: bool
    reason: RejectionReason | None = None
    detail: str = ""
    realized: Operation


FallbackKind = Literal["malformed", "out_of_scope", "invalid_arguments", "provider_error"]
"""Why a review was executed as ``keep`` although the reviewer did not choose it (paper A.4)."""

FALLBACK_KINDS: tuple[FallbackKind, ...] = get_args(FallbackKind)
"""Every fallback kind."""
