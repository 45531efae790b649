"""Scopes and operations: what a reviewer may do at a boundary, and the check of what it proposed.

Paper section 3.1 defines nested operation sets A_Keep ⊂ A_Arg ⊂ A_Full; Params (the paper's
AppWorld V2 "coordinated data edit", section A.2) sits between Arg and Full.

INTERFACE CONTRACT (fixed; the implementation of :func:`validate_operation` is filled in by the
scope work): other modules rely on the names and fields below.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Scope(enum.IntEnum):
    """Granted scope, ordered by inclusion: Keep ⊂ Arg ⊂ Params ⊂ Full."""

    KEEP = 0
    ARG = 1
    PARAMS = 2
    FULL = 3


OperationKind = Literal["keep", "patch_arguments", "patch_block_data", "replace_workflow"]


class Keep(BaseModel):
    """Continue the program unchanged."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["keep"] = "keep"


class PatchArguments(BaseModel):
    """Arg: new values for some data arguments of the pending primitive call.

    ``arguments`` maps argument names to their new values; names not given keep their values.
    """

    model_config = ConfigDict(frozen=True)
    kind: Literal["patch_arguments"] = "patch_arguments"
    arguments: dict[str, Any]


class PatchBlockData(BaseModel):
    """Params: a rewrite of the whole current block whose syntax tree equals the original except for
    constant values."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["patch_block_data"] = "patch_block_data"
    code: str


class ReplaceWorkflow(BaseModel):
    """Full: new code for the rest of the block (or reply); the pending call is cancelled."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["replace_workflow"] = "replace_workflow"
    code: str


Operation = Annotated[
    Keep | PatchArguments | PatchBlockData | ReplaceWorkflow, Field(discriminator="kind")
]

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
]


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

    granted: Scope
    proposal: Operation | None
    accepted: bool
    reason: RejectionReason | None = None
    detail: str = ""
    realized: Operation
