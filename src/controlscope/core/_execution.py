"""Records of execution: boundaries, primitive calls and block results.

What crosses between the controller and the worker, and what the reviewer, the schedules and the
trajectory log read (design notes: "boundary", "primitive call", "block").
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from controlscope.core._tools import ToolResult


class CallSite(BaseModel):
    """Where in agent code a primitive call was made.

    Attributes:
        module: the block's pseudo-module name (e.g. ``block_3``).
        function: the innermost enclosing function's name, None at module level.
        class_name: the innermost enclosing class's name, if any.
    """

    model_config = ConfigDict(frozen=True)
    module: str
    function: str | None = None
    class_name: str | None = None

    @property
    def at_module_level(self) -> bool:
        """True when the call is made directly in the block's top-level code."""
        return self.function is None and self.class_name is None


class Boundary(BaseModel):
    """A block paused at a primitive call (a "boundary", ``docs/architecture.md``).

    Attributes:
        block_id: the running block.
        call_index: 0-based index of this primitive call within the task (all blocks).
        block_call_index: 0-based index of this call within the block.
        tool: the pending tool's name.
        arguments: the pending call's arguments, by parameter name (positional ones named).
        line: 1-based source line within the block.
        call_site: module, function and class of the call.
        module_vars: JSON-serialisable module variables (values truncated; others as
            ``"<TypeName>"``).
        local_vars: the same for the calling frame's locals (empty at module level).
        output: printed output of the block so far (bounded).
        code: the running block's source.
    """

    block_id: str
    call_index: int
    block_call_index: int
    tool: str
    arguments: dict[str, Any]
    line: int
    call_site: CallSite
    module_vars: dict[str, Any] = Field(default_factory=dict)
    local_vars: dict[str, Any] = Field(default_factory=dict)
    output: str = ""
    code: str = ""


class PrimitiveCall(BaseModel):
    """One primitive call as executed (after any patch) with its observation and timing.

    Attributes:
        block_id: the block that made it.
        call_index: 0-based index of this primitive call within the task (all blocks).
        tool: the tool's name.
        arguments: the arguments it was made with (after any patch).
        result: the tool's observation.
        started_at: when it was sent (wall clock, seconds since the epoch).
        elapsed_ms: milliseconds until the observation came back.
    """

    block_id: str
    call_index: int
    tool: str
    arguments: dict[str, Any]
    result: ToolResult
    started_at: float = Field(description="wall clock, seconds since the epoch")
    elapsed_ms: float


BlockStatus = Literal["completed", "error", "cancelled", "timeout", "killed", "budget_exhausted"]


class BlockResult(BaseModel):
    """How a block ended.

    Attributes:
        block_id: the block.
        status: ``completed`` (ran to the end), ``error`` (agent code raised), ``cancelled``
            (replaced, or queued behind a replaced block: a cancellation receipt), ``timeout``
            (wall-seconds budget; the worker was killed), ``killed`` (the worker died or broke
            the protocol), ``budget_exhausted`` (ended by the primitive-call budget).
        output: captured printed output (bounded; truncation marked).
        error: the traceback text for ``error``, the reason for the others.
        calls: primitive calls this block made.
        replaced_by: the id of the block that replaced this one, if any.
        wall_s: wall seconds the block ran (review time included).
        exec_s: execution seconds the block ran (review time excluded; what budgets count).
        fresh_worker: the block ran in a fresh worker because the previous one was killed
            (timeout, protocol violation, death): variables of earlier blocks are gone.
    """

    block_id: str
    status: BlockStatus
    output: str = ""
    error: str | None = None
    calls: int = 0
    replaced_by: str | None = None
    wall_s: float = 0.0
    exec_s: float = 0.0
    fresh_worker: bool = False

    def receipt(self) -> str:
        """The tool-message text the planner sees for this block."""
        parts = [f"[block {self.block_id}: {self.status}; {self.calls} primitive calls]"]
        if self.fresh_worker:
            parts.append("(ran in a fresh worker: variables of earlier blocks are gone)")
        if self.output:
            parts.append(self.output)
        if self.error:
            parts.append(self.error)
        if self.replaced_by:
            parts.append(f"(replaced by block {self.replaced_by})")
        return "\n".join(parts)


ReplaceBoundary = Literal["block", "reply"]
"""What a replacement replaces: the current block only, or the current block and the blocks
queued behind it in the same reply (those get cancellation receipts). Paper section A.1."""


View = Literal["code_only", "with_feedback"]
"""What a reviewer sees of the public state: ``code_only`` or ``with_feedback`` (paper A.3)."""

VIEWS: tuple[View, ...] = get_args(View)
"""Every view."""

REPLACE_BOUNDARIES: tuple[ReplaceBoundary, ...] = get_args(ReplaceBoundary)
"""Every replacement boundary."""
