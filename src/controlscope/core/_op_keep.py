"""``keep``: the program continues unchanged (every scope grants it, paper section 3.1)."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from controlscope.core._execution import Boundary
from controlscope.core._op_base import FinalArguments, OperationSpec, PayloadShape, Rejection
from controlscope.core._operations import OperationKind
from controlscope.core._signature import ToolParam
from controlscope.core._tools import ToolSchema


class Keep(BaseModel):
    """Continue the program unchanged."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["keep"] = "keep"


class KeepSpec(OperationSpec[Keep]):
    """``keep``: always accepted; the pending call is made as the block asked for it."""

    kind: ClassVar[OperationKind] = "keep"
    model = Keep
    payload: ClassVar[PayloadShape] = "none"
    description = "Let the program make the pending call unchanged and continue."
    rule = "keep: the program makes the pending call unchanged."

    def parse(self, payload: Mapping[str, Any]) -> Keep:
        """A ``keep`` (its payload is ignored)."""
        return Keep()

    def check(self, op: Keep, boundary: Boundary, tool: ToolSchema) -> Rejection | None:
        """Nothing: ``keep`` is always accepted."""
        return None

    def final_arguments(
        self,
        op: Keep,
        boundary: Boundary,
        *,
        params: Sequence[ToolParam] = (),
        original_tree: ast.Module | None = None,
    ) -> FinalArguments:
        """The pending call's own arguments."""
        return FinalArguments(dict(boundary.arguments))


KEEP = KeepSpec()
"""The ``keep`` entry of :data:`controlscope.core.OPERATIONS`."""
