"""The controller of one trajectory: the worker's boundary handler.

The worker session calls :class:`Controller` at every block start, boundary, primitive call and
block end (:class:`~controlscope.worker.BoundaryHandler`); at a boundary the schedule decides
whether to review, and the review's realized operation is what the worker executes (paper
sections 3.1 and A.1). Its state has three parts: what the trajectory runs with
(:class:`RunContext`, fixed), who decides at a boundary (:class:`Review`, replaced whole by
:meth:`Controller.steer`, the one way a replay or a branch changes it) and the running reply's
public state (:class:`ReplyState`, reset at each reply). The planner's own state (its history,
turns and blocks) is the planner loop's (:mod:`controlscope.run._loop`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from controlscope.core import (
    BlockEndEvent,
    BlockId,
    BlockResult,
    BlockStartEvent,
    Boundary,
    BoundaryEvent,
    Condition,
    Deadline,
    Event,
    FallbackKind,
    Keep,
    Message,
    Operation,
    PlanErrorEvent,
    PrimitiveCall,
    PrimitiveCallEvent,
    ProgramExtraction,
    Task,
    ToolSchema,
    clip_text,
)
from controlscope.planner import PlannedBlock
from controlscope.record import RecordedActions
from controlscope.review import DecisionRecord, PublicState, Reviewer, review_boundary
from controlscope.run._ceiling import CeilingReviewer
from controlscope.run._fork import ForkPoint
from controlscope.run._hook import TrajectoryHook
from controlscope.schedule import Schedule, ScheduleContext, tool_risk
from controlscope.worker import EndPlan

EventSink = Callable[[Event], object]
"""Where events go as they happen (the trajectory writer, plus live progress)."""


@dataclass(frozen=True)
class RunContext:
    """What a trajectory's controller runs with, fixed for the trajectory.

    Attributes:
        task: the task (its instruction is the reviewer's goal).
        tools: the environment's tool schemas.
        sink: receives every event as it happens.
        deadline: the run's wall-clock ceiling: model requests and reviews are waited for at
            most until then (:func:`~controlscope.run._ceiling.call_within`).
        actions: a replay's recorded primitive calls: every call made is checked against
            them and the first that differs ends the run (``replay_diverged``); None for a
            run that replays nothing.
        hook: called at every boundary, call and block end (a prefix replay or a branch,
            :mod:`controlscope.replay`); it steers the trajectory through
            :meth:`Controller.steer`.
        fork_point: what a branch by fork replaces at a boundary (:class:`ForkPoint`); None
            where the trajectory has none.
    """

    task: Task
    tools: tuple[ToolSchema, ...]
    sink: EventSink
    deadline: Deadline | None = None
    actions: RecordedActions | None = None
    hook: TrajectoryHook | None = None
    fork_point: ForkPoint | None = None


@dataclass(frozen=True)
class Review:
    """Who decides at a boundary, replaced whole by :meth:`Controller.steer`.

    Attributes:
        condition: the run's condition (granted scope, view, sampling, budgets...).
        schedule: when to review.
        reviewer: who proposes at reviewed boundaries; None for no reviews.
    """

    condition: Condition
    schedule: Schedule
    reviewer: Reviewer | None


@dataclass
class ReplyState:
    """The public state of the running reply (paper A.1), reset by
    :meth:`Controller.start_reply`.

    Attributes:
        turn: the planner's reply the blocks belong to.
        blocks: the reply's blocks' code, in order.
        extracted: how each block was read from the reply (``tool_call`` or ``text``), in order.
        index: each planned block's position in the reply, by block id.
        history: the planner's history before the reply: the public history "present when
            the current assistant reply was generated" (paper A.3).
        messages: the receipts of the reply's blocks that have ended.
        replacement_code: the code of each replacement block of the reply, by block id.
        running_is_replacement: whether the running block is a replacement.
        block_calls: the primitive calls the running block has made.
        plan_error: why the running plan ended in a plan error, if it did.
    """

    turn: int = 0
    blocks: tuple[str, ...] = ()
    extracted: tuple[ProgramExtraction, ...] = ()
    index: dict[str, int] = field(default_factory=dict)
    history: tuple[Message, ...] = ()
    messages: list[str] = field(default_factory=list)
    replacement_code: dict[str, str] = field(default_factory=dict)
    running_is_replacement: bool = False
    block_calls: list[PrimitiveCall] = field(default_factory=list)
    plan_error: str | None = None


class Controller:
    """The boundary handler of one trajectory's worker; it writes only its own state.

    Args:
        context: what the trajectory runs with.
        review: the condition, schedule and reviewer it starts with.

    Attributes:
        context: what the trajectory runs with.
        review: who decides at a boundary (changed only by :meth:`steer`).
        reply: the running reply's public state.
        decisions: every review's decision so far.
        calls_completed: primitive calls made so far.
        review_seconds: seconds spent in reviews.
    """

    def __init__(self, context: RunContext, review: Review) -> None:
        self.context = context
        self.review = review
        self.reply = ReplyState()
        self.decisions: list[DecisionRecord] = []
        self.calls_completed = 0
        self.review_seconds = 0.0

    @property
    def condition(self) -> Condition:
        """The condition the trajectory is reviewed under now."""
        return self.review.condition

    @property
    def fork_point(self) -> ForkPoint | None:
        """What a branch by fork replaces at a boundary (see :class:`RunContext`)."""
        return self.context.fork_point

    def sink(self, event: Event) -> None:
        """Record ``event`` (and show it live)."""
        self.context.sink(event)

    def steer(
        self,
        *,
        condition: Condition | None = None,
        schedule: Schedule | None = None,
        reviewer: Reviewer | None = None,
    ) -> None:
        """The one way a run's condition, schedule or reviewer changes (a prefix replay or a
        branch, :mod:`controlscope.replay`): what is given replaces what was.

        Args:
            condition: the condition from now on (None: unchanged).
            schedule: the schedule from now on (None: unchanged).
            reviewer: the reviewer from now on (None: unchanged).
        """
        self.review = Review(
            condition=self.review.condition if condition is None else condition,
            schedule=self.review.schedule if schedule is None else schedule,
            reviewer=self.review.reviewer if reviewer is None else reviewer,
        )

    # -- BoundaryHandler -------------------------------------------------------------------

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        """A block (or a replacement of block ``replaces``) starts."""
        reply = self.reply
        reply.running_is_replacement = replaces is not None
        if replaces is not None:
            reply.replacement_code[block_id] = code
        reply.block_calls = []
        index = None if replaces is not None else reply.index.get(block_id)
        extracted = reply.extracted[index] if index is not None else None
        self.sink(
            BlockStartEvent(
                block_id=block_id,
                code=code,
                replaces=replaces,
                turn=reply.turn,
                extracted=extracted,
            )
        )

    def on_boundary(self, boundary: Boundary) -> Operation:
        """Ask the schedule, review if it says so, and return the operation to execute."""
        if self.context.hook is not None:
            self.context.hook.before_boundary(self, boundary)
        index, queued = self._position(boundary)
        ctx = ScheduleContext(
            code=boundary.code,
            block_index=index if index is not None else len(self.reply.blocks),
            is_replacement=self.reply.running_is_replacement,
            queued_blocks=queued,
            calls_completed=self.calls_completed,
        )
        reviewer, schedule = self.review.reviewer, self.review.schedule
        review = reviewer is not None and schedule.should_review(boundary, ctx)
        risk = tool_risk(schedule, boundary)
        self.sink(BoundaryEvent(boundary=boundary, review=review, risk=risk))
        realized: Operation = Keep()
        if review and reviewer is not None:
            realized = self._review(reviewer, boundary)
        schedule.observe(boundary, realized)
        return realized

    def _position(self, boundary: Boundary) -> tuple[int | None, tuple[str, ...]]:
        """The running block's index in its reply (None for a replacement's own) and the
        blocks queued behind it."""
        reply = self.reply
        index = reply.index.get(BlockId.parse(boundary.block_id).root)
        queued: tuple[str, ...] = ()
        if index is not None and (
            not reply.running_is_replacement or self.condition.replace_boundary == "block"
        ):
            # Under a reply boundary a replacement has cancelled the blocks queued behind it.
            queued = reply.blocks[index + 1 :]
        return index, queued

    def on_call(self, call: PrimitiveCall) -> None:
        """A primitive call was made on the environment server.

        Raises:
            controlscope.record.ActionMismatch: a replay's call differs from the recording's
                (after the call is logged).
        """
        self.calls_completed += 1
        self.reply.block_calls.append(call)
        self.sink(PrimitiveCallEvent(call=call))
        if self.context.actions is not None:
            self.context.actions.check(call)
        if self.context.hook is not None:
            self.context.hook.after_call(self, call)

    def on_block_end(self, result: BlockResult) -> None:
        """A block ended (cancellation receipts included)."""
        self.reply.messages.append(result.receipt())
        self.sink(BlockEndEvent(result=result))
        if self.context.hook is not None:
            self.context.hook.after_block(self, result)

    # -- reviews ---------------------------------------------------------------------------

    def public_state(self, boundary: Boundary) -> PublicState:
        """The public state ``h`` at ``boundary`` (paper 3.1, A.1), as a review would see it."""
        index, queued = self._position(boundary)
        reply = self.reply
        return PublicState(
            goal=self.context.task.instruction,
            history=tuple(m for m in reply.history if m.role != "system"),
            reply_blocks=reply.blocks,
            running_block=None if reply.running_is_replacement else index,
            queued_blocks=queued,
            boundary=boundary,
            tools=self.context.tools,
            decisions=tuple(self.decisions),
            reply_messages=tuple(reply.messages),
            block_calls=tuple(reply.block_calls),
            calls_used=self.calls_completed,
            call_budget=self.condition.budgets.primitive_calls,
            replace_boundary=self.condition.replace_boundary,
        )

    def _review(self, reviewer: Reviewer, boundary: Boundary) -> Operation:
        """Review the boundary; the realized operation.

        Raises:
            EndPlan: the review fell back under the ``plan_error`` protocol (recorded first).
        """
        state = self.public_state(boundary)
        if self.context.deadline is not None:
            reviewer = CeilingReviewer(reviewer, self.context.deadline)
        outcome = review_boundary(reviewer, state, self.condition, log=self.sink)
        self.review_seconds += outcome.latency_s
        self.decisions.append(
            DecisionRecord(
                call_index=boundary.call_index,
                block_id=boundary.block_id,
                tool=boundary.tool,
                granted=self.condition.scope,
                operation=outcome.realized,
                fallback=outcome.fallback,
            )
        )
        if outcome.fallback is not None and self.condition.review_fallback == "plan_error":
            self._plan_error(boundary, outcome.fallback, outcome.validation.detail)
        return outcome.realized

    def _plan_error(self, boundary: Boundary, fallback: FallbackKind, detail: str) -> None:
        """End the plan at ``boundary``: a review that fell back is a plan error (paper
        section 4, ALFWorld's fast reviewers), recorded; ordinary recovery takes over.

        Raises:
            EndPlan: always.
        """
        reason = (
            f"plan error: the review of call {boundary.call_index} ({boundary.tool}) could not "
            f"be used ({fallback}); the plan was stopped before the call"
        )
        self.reply.plan_error = reason
        self.sink(
            PlanErrorEvent(
                call_index=boundary.call_index,
                block_id=boundary.block_id,
                fallback=fallback,
                detail=clip_text(detail, 2000),
            )
        )
        raise EndPlan(reason)

    # -- replies -----------------------------------------------------------------------------

    def start_reply(
        self, blocks: Sequence[PlannedBlock], *, turn: int, history: tuple[Message, ...]
    ) -> list[tuple[str, str]]:
        """Name the reply's blocks and reset the reply's public state.

        Args:
            blocks: the reply's blocks, in order.
            turn: the planner's reply they belong to (their ids are ``t{turn}.b{i}``).
            history: the planner's history before the reply (paper A.3).

        Returns:
            The reply's ``(block_id, code)`` pairs.
        """
        named = [(str(BlockId.planned(turn, i)), b.code) for i, b in enumerate(blocks)]
        self.reply = ReplyState(
            turn=turn,
            blocks=tuple(code for _, code in named),
            extracted=tuple(b.extracted for b in blocks),
            index={block_id: i for i, (block_id, _) in enumerate(named)},
            history=history,
        )
        return named
