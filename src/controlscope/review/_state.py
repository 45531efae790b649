"""The public state ``h`` a reviewer may see at a boundary (paper section 3.1 and A.1).

"h denotes the complete public execution record available at a decision boundary. It includes
the user goal, observed tool results, current program, pending call, and exposed program
variables." At each boundary "the reviewer also sees the task history, current block, public tool
schemas, earlier review decisions, and queued calls" (A.1). Hidden evaluation data never enters it.

The agent loop builds a :class:`PublicState`; a view (:mod:`controlscope.review._views`) decides
which parts of it a review request shows.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from controlscope.core import (
    Boundary,
    FallbackKind,
    Message,
    Operation,
    OperationSet,
    PrimitiveCall,
    ReplaceBoundary,
    ScopeName,
    ToolSchema,
    operation_spec,
)


class DecisionRecord(BaseModel):
    """An earlier review decision of the trajectory.

    Attributes:
        call_index: the boundary's call index.
        block_id: the block that was running.
        tool: the pending tool at that boundary.
        granted: the granted scope.
        operation: the realized operation.
        fallback: the fallback kind when the reviewer's answer was not executed.
    """

    model_config = ConfigDict(frozen=True)
    call_index: int
    block_id: str
    tool: str
    granted: ScopeName
    operation: Operation
    fallback: FallbackKind | None = None


class PublicState(BaseModel):
    """The public execution record ``h`` at one boundary.

    Attributes:
        goal: the user's instruction.
        history: the planner conversation present when the current reply was generated (the
            current reply itself excluded; a system message, if present, is not shown).
        reply_blocks: the code of every block of the current reply, in order.
        running_block: index into ``reply_blocks`` of the running block; None when the running
            block is a replacement (its code is ``boundary.code``).
        queued_blocks: code of the blocks queued behind the running one (the continuation).
        boundary: the pending call with its arguments, line, call site, variables, printed
            output and the running block's code.
        tools: the environment's tool schemas (the API documentation).
        decisions: earlier review decisions in this trajectory, oldest first.
        reply_messages: tool messages (receipts) of the current reply's finished blocks.
        block_calls: primitive calls the running block has made, with their observations.
        calls_used: primitive calls completed in the task so far.
        call_budget: the task's primitive-call budget, if any.
        replace_boundary: what a replacement replaces (``block`` or ``reply``).
        tool_schema: the pending call's tool schema (a bare schema when the tool is not
            listed).
        source_line: the source line of the pending call: the boundary's (read by the
            controller from the block whose code makes the call), else the running block's line
            (empty when out of range).
    """

    model_config = ConfigDict(frozen=True)
    goal: str
    history: tuple[Message, ...] = ()
    reply_blocks: tuple[str, ...] = ()
    running_block: int | None = None
    queued_blocks: tuple[str, ...] = ()
    boundary: Boundary
    tools: tuple[ToolSchema, ...] = ()
    decisions: tuple[DecisionRecord, ...] = ()
    reply_messages: tuple[str, ...] = ()
    block_calls: tuple[PrimitiveCall, ...] = ()
    calls_used: int = 0
    call_budget: int | None = None
    replace_boundary: ReplaceBoundary = "reply"

    @property
    def tool_schema(self) -> ToolSchema:
        """The pending call's tool schema (a bare schema when the tool is not listed)."""
        for tool in self.tools:
            if tool.name == self.boundary.tool:
                return tool
        return ToolSchema(name=self.boundary.tool)

    @property
    def source_line(self) -> str:
        """The source line of the pending call (see the class's attributes)."""
        if self.boundary.source_line:
            return self.boundary.source_line
        lines = self.boundary.code.splitlines()
        index = self.boundary.line - 1
        return lines[index].strip() if 0 <= index < len(lines) else ""

    def operation_notes(self, granted: OperationSet) -> str:
        """What a reviewer granted ``granted`` must know about the pending call: the granted
        kinds' notes (:meth:`~controlscope.core.OperationSpec.note`; a ``patch_block_data`` at
        a call whose data it cannot edit or whose arguments are no literal,
        :attr:`Boundary.params_note`), one a line; empty when there is nothing to say.

        Args:
            granted: the granted operation set.

        Returns:
            The notes, or ``""``.
        """
        notes = (operation_spec(kind).note(self.boundary) for kind in granted.operations)
        return "\n".join(note for note in notes if note)
