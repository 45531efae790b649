"""``replace_workflow`` (Full, paper section 3.1): the pending call is cancelled and new code
replaces the rest of the block (or of the reply, paper A.1)."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from controlscope.core._execution import Boundary
from controlscope.core._op_base import (
    OperationSpec,
    PayloadShape,
    Rejection,
    code_field,
    code_size,
    compile_block,
    syntax_detail,
)
from controlscope.core._operations import OperationKind, SummaryGroup
from controlscope.core._signature import ToolParam
from controlscope.core._tools import ToolSchema


class ReplaceWorkflow(BaseModel):
    """Full: new code for the rest of the block (or reply); the pending call is cancelled.

    Attributes:
        code: the replacement's source, run in the same namespace.
    """

    model_config = ConfigDict(frozen=True)
    kind: Literal["replace_workflow"] = "replace_workflow"
    code: str


class ReplaceWorkflowSpec(OperationSpec[ReplaceWorkflow]):
    """``replace_workflow``: the pending call is cancelled, the block unwinds and the new code
    runs next as the replacement."""

    kind: ClassVar[OperationKind] = "replace_workflow"
    model = ReplaceWorkflow
    payload: ClassVar[PayloadShape] = "code"
    group: ClassVar[SummaryGroup | None] = "replacements"
    counter = "replacements"
    label = "replacements"
    noun = "replacement"
    cancels = True
    description = (
        "Cancel the pending call and the rest of the workflow; run `code` instead, a new Python "
        "program in the same namespace (variables so far stay available)."
    )
    rule = (
        'replace_workflow: the pending call is cancelled; "code", new Python '
        "that finishes the task from here, replaces {what}. Tools are plain functions returning "
        "text; variables defined so far still exist."
    )
    answer_field = '"code": Python source'

    def parse(self, payload: Mapping[str, Any]) -> ReplaceWorkflow:
        """``payload["code"]``, a string (unfenced)."""
        return ReplaceWorkflow(code=code_field(self.kind, payload))

    def check(self, op: ReplaceWorkflow, boundary: Boundary, tool: ToolSchema) -> Rejection | None:
        """Rules 3 and 6 of :func:`controlscope.scope.validate_operation`."""
        if (too_large := code_size(self.kind, op.code)) is not None:
            return too_large
        try:
            tree = compile_block(op.code, "<replace_workflow>")
        except SyntaxError as exc:
            return Rejection(
                "syntax_error", f"the replacement does not compile: {syntax_detail(exc)}"
            )
        if not tree.body:
            return Rejection(
                "empty_patch",
                "the replacement has no statements; to stop the workflow on purpose, replace it "
                "with code that says so (e.g. a print of the reason)",
            )
        return None

    def final_arguments(
        self,
        op: ReplaceWorkflow,
        boundary: Boundary,
        *,
        params: Sequence[ToolParam] = (),
        original_tree: ast.Module | None = None,
    ) -> None:
        """None: the pending call is cancelled."""
        return None

    def new_code(self, op: ReplaceWorkflow) -> str:
        """The replacement, run next in the same namespace."""
        return op.code

    def shown(self, op: ReplaceWorkflow) -> dict[str, Any]:
        """``{"code_lines": n}``."""
        return {"code_lines": len(op.code.splitlines())}


REPLACE_WORKFLOW = ReplaceWorkflowSpec()
"""The ``replace_workflow`` entry of :data:`controlscope.core.OPERATIONS`."""
