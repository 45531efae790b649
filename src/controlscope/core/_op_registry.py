"""The operation kinds, one :class:`~controlscope.core.OperationSpec` each: the registry every
layer iterates (paper section 3.1, eq. 1-3, and A.2), the union of their models and the verdict
on a proposal.

Adding a kind: its model and spec in ``core/_op_<kind>.py``, its name in ``OperationKind`` and
its row in ``LATTICE_OPERATIONS`` (``core/_operations.py``), its entry here, its counter on
``RunSummary`` and the exports (``docs/architecture.md``, "How to add an operation").
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from controlscope.core._bounds import clip_text
from controlscope.core._op_base import OperationSpec
from controlscope.core._op_keep import KEEP, Keep
from controlscope.core._op_patch_arguments import PATCH_ARGUMENTS, PatchArguments
from controlscope.core._op_patch_block_data import PATCH_BLOCK_DATA, PatchBlockData
from controlscope.core._op_replace_workflow import REPLACE_WORKFLOW, ReplaceWorkflow
from controlscope.core._operations import MAX_CODE_CHARS, RejectionReason, ScopeName, SummaryGroup

Operation = Annotated[
    Keep | PatchArguments | PatchBlockData | ReplaceWorkflow, Field(discriminator="kind")
]
"""A reviewer's operation at a boundary, one per scope level; ``kind`` tells which."""

OPERATIONS: tuple[OperationSpec[Any], ...] = (
    KEEP,
    PATCH_ARGUMENTS,
    PATCH_BLOCK_DATA,
    REPLACE_WORKFLOW,
)
"""Every operation kind's spec, in :data:`~controlscope.core.OPERATION_KINDS` order (smallest
scope first): the order of the reviewer's tools, of the summary's counts and of the columns."""

_BY_KIND: dict[str, OperationSpec[Any]] = {spec.kind: spec for spec in OPERATIONS}


def operation_spec(kind: str) -> OperationSpec[Any]:
    """The spec of the operation kind ``kind``.

    Raises:
        KeyError: ``kind`` is not an operation kind.
    """
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise KeyError(f"unknown operation kind {kind!r}") from None


OPERATION_GROUPS: dict[SummaryGroup, tuple[str, ...]] = {
    group: tuple(s.counter for s in OPERATIONS if s.group == group and s.counter is not None)
    for group in dict.fromkeys(s.group for s in OPERATIONS if s.group is not None)
}
"""The run tables' columns of realized operations (``patches``, ``replacements``), each the
``RunSummary`` counters it sums."""


def recorded_operation(operation: Operation | None) -> Operation | None:
    """``operation`` as a refused proposal is recorded: code longer than
    :data:`MAX_CODE_CHARS` clipped to it (its head and tail kept, the cut marked, so the
    log's one event holds it); any other operation as it is."""
    code = getattr(operation, "code", None)
    if operation is not None and isinstance(code, str) and len(code) > MAX_CODE_CHARS:
        return operation.model_copy(update={"code": clip_text(code, MAX_CODE_CHARS)})
    return operation


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
