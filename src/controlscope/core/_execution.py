"""Records of execution: boundaries, primitive calls and block results.

What crosses between the controller and the worker, and what the reviewer, the schedules and the
trajectory log read (design notes: "boundary", "primitive call", "block").
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from controlscope.core._operations import OperationKind
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
        line: 1-based source line of the call in the block whose code makes it (the running
            block, or an earlier block whose function it calls; 0 when unknown). The
            controller derives it from its own parse of that block's source.
        call_site: module, function and class of the call (derived the same way).
        module_vars: JSON-serialisable module variables (values truncated; others as
            ``"<TypeName>"``).
        local_vars: the same for the calling frame's locals (empty at module level).
        output: printed output of the block so far (bounded).
        code: the running block's source.
        literal_slots: the pending call's arguments that are plain literals of the running
            block at a call made directly there, by parameter name, each its slot in the
            block's constants table (paper A.2). Derived by the controller from the block's
            source and checked against the call's own arguments; what a ``patch_block_data``
            changes in the pending call.
        params_refusal: why a ``patch_block_data`` cannot edit this call's data (the literal
            behind an argument cannot be identified with certainty: the call is made
            indirectly, or by code of another block, or from an unknown position); None when
            it can. A Params proposal at such a boundary is rejected (``data_not_editable``).
        source_line: the text of ``line`` in the source of the block whose code makes the
            call (an earlier block's, for its function), as the controller read it; empty when
            unknown.
        params_note: what a reviewer granted ``patch_block_data`` is told about this call
            (the refusal, or that no argument is a literal), or None.
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
    literal_slots: dict[str, int] = Field(default_factory=dict)
    params_refusal: str | None = None
    source_line: str = ""

    @property
    def params_note(self) -> str | None:
        """What a reviewer granted ``patch_block_data`` must know about this call, or None.

        The refusal when the call's data cannot be edited; when no argument of the call is a
        literal of the block, that a block-data rewrite leaves this call's arguments as they
        are.
        """
        if self.params_refusal is not None:
            return (
                f"patch_block_data cannot edit this call's data ({self.params_refusal}); "
                "such a proposal is refused here"
            )
        if not self.literal_slots:
            return (
                "no argument of this call is a literal at its call site: patch_block_data "
                "changes the block's later evaluations but leaves this call's arguments as "
                "they are"
            )
        return None


class PrimitiveCall(BaseModel):
    """One primitive call as executed (after any patch) with its observation and timing.

    Attributes:
        block_id: the block that made it.
        call_index: 0-based index of this primitive call within the task (all blocks).
        tool: the tool's name.
        arguments: the arguments it was made with: the final arguments, after the realized
            operation (checked against the tool's input schema before the call).
        result: the tool's observation.
        started_at: when it was sent (wall clock, seconds since the epoch).
        elapsed_ms: milliseconds until the observation came back.
        operation: the realized operation at its boundary (``keep`` when not reviewed).
        requested: the arguments the block's code asked for, when a patch was applied (so
            the log holds both the request and what was executed); None under ``keep``.
        notice: what the operation did not do, e.g. a ``patch_block_data`` that left the
            call's arguments unchanged; None otherwise.
    """

    block_id: str
    call_index: int
    tool: str
    arguments: dict[str, Any]
    result: ToolResult
    started_at: float = Field(description="wall clock, seconds since the epoch")
    elapsed_ms: float
    operation: OperationKind = "keep"
    requested: dict[str, Any] | None = None
    notice: str | None = None


BlockStatus = Literal["completed", "error", "cancelled", "timeout", "killed", "budget_exhausted"]


RefusalKind = Literal["quota", "private_runtime"]
"""Why the controller refused what a block tried (paper A.2): a request over the block's
allowance of API requests (a quota rejection), or code reaching for the runtime's private
state (the private-runtime guard of the V2 protocol)."""


class Refusal(BaseModel):
    """What the controller refused a block, and why (paper A.2).

    Attributes:
        kind: ``quota`` (the block's allowance of requests was spent: the request was not
            made and the block was stopped) or ``private_runtime`` (the block reached for the
            runtime's private state and did not run).
        detail: what was refused, in words.
        tool: the refused request's tool (``quota``); None for the guard.
    """

    model_config = ConfigDict(frozen=True)
    kind: RefusalKind
    detail: str
    tool: str | None = None


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
        allowance: the API requests the block could make when it started, where blocks have an
            allowance (the app protocols, paper A.2); None otherwise.
        allowance_renewed: the block is a replacement that started a new allowance (the V1
            protocol: a Full replacement renews it, which favours Full) rather than sharing
            what was left of its block's.
        refusal: what the controller refused the block (a quota rejection, the private-runtime
            guard), if anything.
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
    allowance: int | None = None
    allowance_renewed: bool = False
    refusal: Refusal | None = None

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
