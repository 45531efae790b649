"""What one executed block returns: :class:`Execution`, built from the events the block wrote."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controlscope.core import (
    BlockResult,
    BlockStatus,
    EndReason,
    Event,
    FallbackKind,
    Operation,
    PrimitiveCall,
    ScopeName,
)


@dataclass(frozen=True)
class Decision:
    """One boundary's review decision (paper 3.1: proposal, validation, realized operation).

    Attributes:
        call_index: the boundary's call index (calls made before it in the session).
        block_id: the block that was running.
        granted: the scope granted.
        proposal: what the reviewer proposed; None when nothing usable came back (or no
            reviewer was asked: granted Keep).
        operation: the realized operation (what ran).
        fallback: why the proposal was not executed (``malformed``, ``out_of_scope``,
            ``invalid_arguments``, ``provider_error``); None when it was.
        detail: the validation's reason, when the proposal was refused.
        reviewed: whether a reviewer was asked (False under granted Keep, where no reviewer
            is).
    """

    call_index: int
    block_id: str
    granted: ScopeName
    proposal: Operation | None
    operation: Operation
    fallback: FallbackKind | None
    detail: str
    reviewed: bool


@dataclass(frozen=True)
class Execution:
    """One block run by :meth:`Executor.execute <controlscope.Executor.execute>`.

    Attributes:
        block_id: the block's id in the session's log (``t3.b0`` is the fourth block).
        status: how the block ended (``completed``, ``error``, ``cancelled`` when a reviewer
            replaced it, ``timeout``, ``killed``, ``budget_exhausted``); a replacement's own
            status is in :attr:`blocks`.
        output: everything the block (and any replacement) printed, in order.
        error: the error of the block that ran last (a traceback, or the reason), if any.
        calls: every primitive call made, with its final arguments (after a patch),
            ``requested`` (what the code asked for, when a patch changed it) and its
            observation (``result``).
        decisions: every review decision, in order.
        blocks: the block's result and its replacements', in order.
        session_end: why the session ended during this block (a budget, its wall-clock
            ceiling, an error), or None while it goes on.
        ok: whether the block (or the replacement that ran in its place) completed.
    """

    block_id: str
    status: BlockStatus
    output: str
    error: str | None
    calls: tuple[PrimitiveCall, ...]
    decisions: tuple[Decision, ...]
    blocks: tuple[BlockResult, ...]
    session_end: EndReason | None = None

    @property
    def ok(self) -> bool:
        """Whether the block (or the replacement that ran in its place) completed."""
        return bool(self.blocks) and self.blocks[-1].status == "completed"


def execution_of(events: Sequence[Event], session_end: EndReason | None) -> Execution:
    """The execution the events of one block (its replacements included) record.

    Args:
        events: the events written while the block ran.
        session_end: why the session ended meanwhile, if it did.

    Returns:
        The execution; a block that never started (the session ended first) has status
        ``cancelled`` and no calls.
    """
    calls: list[PrimitiveCall] = []
    decisions: list[Decision] = []
    blocks: list[BlockResult] = []
    pending: dict[int, tuple[Operation | None, str]] = {}
    asked: set[int] = set()
    for event in events:
        if event.type == "primitive_call":
            calls.append(event.call)
        elif event.type == "block_end":
            blocks.append(event.result)
        elif event.type == "review_request":
            asked.add(event.call_index)
        elif event.type == "proposal":
            pending[event.call_index] = (event.operation, "")
        elif event.type == "validation":
            proposal = pending.get(event.call_index, (None, ""))[0]
            pending[event.call_index] = (proposal, event.validation.detail)
        elif event.type == "realized_operation":
            proposal, detail = pending.pop(event.call_index, (None, ""))
            decisions.append(
                Decision(
                    call_index=event.call_index,
                    block_id=event.block_id,
                    granted=event.granted,
                    proposal=proposal,
                    operation=event.operation,
                    fallback=event.fallback,
                    detail=detail,
                    reviewed=event.call_index in asked,
                )
            )
    return _assembled(blocks, calls, decisions, session_end)


def _assembled(
    blocks: list[BlockResult],
    calls: list[PrimitiveCall],
    decisions: list[Decision],
    session_end: EndReason | None,
) -> Execution:
    if not blocks:
        return Execution(
            block_id="",
            status="cancelled",
            output="",
            error=(
                "the block did not run"
                + (f": the session ended ({session_end})" if session_end is not None else "")
            ),
            calls=(),
            decisions=(),
            blocks=(),
            session_end=session_end,
        )
    return Execution(
        block_id=blocks[0].block_id,
        status=blocks[0].status,
        output="".join(b.output for b in blocks),
        error=blocks[-1].error,
        calls=tuple(calls),
        decisions=tuple(decisions),
        blocks=tuple(blocks),
        session_end=session_end,
    )
