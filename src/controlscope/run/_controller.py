"""The controller of one trajectory: the worker's boundary handler and the planner's history.

The worker session calls :class:`Controller` at every block start, boundary, primitive call and
block end (:class:`~controlscope.worker.BoundaryHandler`); at a boundary the schedule decides
whether to review, and the review's realized operation is what the worker executes (paper
sections 3.1 and A.1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from controlscope.core import (
    BlockEndEvent,
    BlockResult,
    BlockStartEvent,
    Boundary,
    BoundaryEvent,
    ChatModel,
    Condition,
    Deadline,
    Event,
    FallbackKind,
    Keep,
    Message,
    ModelRequest,
    ModelResponse,
    Operation,
    PlanErrorEvent,
    PlannerTurnEvent,
    PrimitiveCall,
    PrimitiveCallEvent,
    ProviderError,
    Task,
    ToolSchema,
    WallClockExceeded,
    clip_text,
    model_call_event,
    seeded_request,
)
from controlscope.planner import EXECUTE_PYTHON_SPEC, PlannedBlock
from controlscope.record import RecordedActions
from controlscope.review import DecisionRecord, PublicState, Reviewer, review_boundary
from controlscope.run._ceiling import CeilingReviewer, call_within
from controlscope.run._fork import ForkPoint
from controlscope.run._hook import TrajectoryHook
from controlscope.schedule import Schedule, ScheduleContext
from controlscope.worker import EndPlan

EventSink = Callable[[Event], object]
"""Where events go as they happen (the trajectory writer, plus live progress)."""


class Controller:
    """Drives one trajectory: the boundary handler of the worker and the planner loop's state.

    Args:
        task: the task (its instruction is the reviewer's goal).
        tools: the environment's tool schemas.
        sink: receives every event as it happens.
        schedule: when to review.
        reviewer: who proposes at reviewed boundaries; None for no reviews.
        condition: the run's condition (granted scope, view, sampling, budgets...).
        deadline: the run's wall-clock ceiling: model requests and reviews are waited for at
            most until then (:func:`~controlscope.run._ceiling.call_within`).
        actions: a replay's recorded primitive calls: every call made is checked against
            them and the first that differs ends the run (``replay_diverged``); None for a
            run that replays nothing.
        hook: called at every boundary, call and block end (a prefix replay or a branch,
            :mod:`controlscope.replay`); it may replace ``condition``, ``schedule`` and
            ``reviewer`` as the trajectory goes.
    """

    def __init__(
        self,
        *,
        task: Task,
        tools: Sequence[ToolSchema],
        sink: EventSink,
        schedule: Schedule,
        reviewer: Reviewer | None,
        condition: Condition,
        deadline: Deadline | None = None,
        actions: RecordedActions | None = None,
        hook: TrajectoryHook | None = None,
    ) -> None:
        self.task = task
        self.deadline = deadline
        self.actions = actions
        self.hook = hook
        self.tools = tuple(tools)
        self.sink = sink
        self.schedule = schedule
        self.reviewer = reviewer
        self.condition = condition
        self.history: list[Message] = []
        self.reply_history_len = 0
        self.turn = 0
        self.reply_turn = 0
        self.reply_blocks: tuple[str, ...] = ()
        self.block_index: dict[str, int] = {}
        self.running_is_replacement = False
        self.reply_messages: list[str] = []
        self.replacement_code: dict[str, str] = {}
        self.block_calls: list[PrimitiveCall] = []
        self.decisions: list[DecisionRecord] = []
        self.calls_completed = 0
        self.natural_blocks = 0
        """The planner's blocks run so far (replacements not counted; paper A.2's cap)."""
        self.review_seconds = 0.0
        self.plan_error: str | None = None
        """Why the running plan ended in a plan error, if it did (reset at each reply)."""
        self.fork_point: ForkPoint | None = None
        """What a branch by fork replaces at a boundary (set by the trajectory once its
        worker and server run)."""

    # -- BoundaryHandler -------------------------------------------------------------------

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        """A block (or a replacement of block ``replaces``) starts."""
        self.running_is_replacement = replaces is not None
        if replaces is not None:
            self.replacement_code[block_id] = code
        self.block_calls = []
        self.sink(
            BlockStartEvent(block_id=block_id, code=code, replaces=replaces, turn=self.reply_turn)
        )

    def on_boundary(self, boundary: Boundary) -> Operation:
        """Ask the schedule, review if it says so, and return the operation to execute."""
        if self.hook is not None:
            self.hook.before_boundary(self, boundary)
        index, queued = self._position(boundary)
        ctx = ScheduleContext(
            code=boundary.code,
            block_index=index if index is not None else len(self.reply_blocks),
            is_replacement=self.running_is_replacement,
            queued_blocks=queued,
            calls_completed=self.calls_completed,
        )
        review = self.reviewer is not None and self.schedule.should_review(boundary, ctx)
        self.sink(BoundaryEvent(boundary=boundary, review=review))
        realized: Operation = Keep()
        if review and self.reviewer is not None:
            realized = self._review(self.reviewer, boundary)
        self.schedule.observe(boundary, realized)
        return realized

    def _position(self, boundary: Boundary) -> tuple[int | None, tuple[str, ...]]:
        """The running block's index in its reply (None for a replacement's own) and the
        blocks queued behind it."""
        index = self.block_index.get(boundary.block_id.split(".r", 1)[0])
        queued: tuple[str, ...] = ()
        if index is not None and (
            not self.running_is_replacement or self.condition.replace_boundary == "block"
        ):
            # Under a reply boundary a replacement has cancelled the blocks queued behind it.
            queued = self.reply_blocks[index + 1 :]
        return index, queued

    def on_call(self, call: PrimitiveCall) -> None:
        """A primitive call was made on the environment server.

        Raises:
            controlscope.record.ActionMismatch: a replay's call differs from the recording's
                (after the call is logged).
        """
        self.calls_completed += 1
        self.block_calls.append(call)
        self.sink(PrimitiveCallEvent(call=call))
        if self.actions is not None:
            self.actions.check(call)
        if self.hook is not None:
            self.hook.after_call(self, call)

    def on_block_end(self, result: BlockResult) -> None:
        """A block ended (cancellation receipts included)."""
        self.reply_messages.append(result.receipt())
        self.sink(BlockEndEvent(result=result))
        if self.hook is not None:
            self.hook.after_block(self, result)

    # -- reviews ---------------------------------------------------------------------------

    def public_state(self, boundary: Boundary) -> PublicState:
        """The public state ``h`` at ``boundary`` (paper 3.1, A.1), as a review would see it."""
        index, queued = self._position(boundary)
        before_reply = self.history[: self.reply_history_len]
        return PublicState(
            goal=self.task.instruction,
            history=tuple(m for m in before_reply if m.role != "system"),
            reply_blocks=self.reply_blocks,
            running_block=None if self.running_is_replacement else index,
            queued_blocks=queued,
            boundary=boundary,
            tools=self.tools,
            decisions=tuple(self.decisions),
            reply_messages=tuple(self.reply_messages),
            block_calls=tuple(self.block_calls),
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
        if self.deadline is not None:
            reviewer = CeilingReviewer(reviewer, self.deadline)
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
        self.plan_error = reason
        self.sink(
            PlanErrorEvent(
                call_index=boundary.call_index,
                block_id=boundary.block_id,
                fallback=fallback,
                detail=clip_text(detail, 2000),
            )
        )
        raise EndPlan(reason)

    # -- planning ----------------------------------------------------------------------------

    def plan(self, planner: ChatModel) -> ModelResponse:
        """One ordinary planning turn.

        Raises:
            ProviderError: a planner-stage error (recorded first).
            WallClockExceeded: no answer before the run's ceiling (recorded first as a
                ``timeout`` error of the request).
        """
        condition = self.condition
        rendered = ModelRequest(
            messages=tuple(self.history),
            tools=(EXECUTE_PYTHON_SPEC,) if condition.planner_format == "tools" else (),
            tool_choice="auto",
            temperature=condition.temperature_for("planner"),
            max_tokens=condition.max_tokens_for("planner"),
            provider_options=dict(condition.planner_options),
            draw=condition.source_program,
            purpose="planner",
        )
        request = seeded_request(planner, rendered)  # recorded with the seed it is sampled with
        self.sink(PlannerTurnEvent(turn=self.turn))
        try:
            response = call_within(self.deadline, planner.complete, request)
        except ProviderError as err:
            self.sink(model_call_event("planner", request, err, turn=self.turn))
            raise
        except WallClockExceeded as err:
            timeout = ProviderError(str(err), kind="timeout")
            self.sink(model_call_event("planner", request, timeout, turn=self.turn))
            raise
        self.sink(model_call_event("planner", request, response, turn=self.turn))
        return response

    def add_reply(self, message: Message) -> None:
        """Append the planner's reply to the history; what came before it is the public history
        "present when the current assistant reply was generated" (paper A.3)."""
        self.reply_history_len = len(self.history)
        self.history.append(message)

    def start_reply(self, blocks: Sequence[PlannedBlock]) -> list[tuple[str, str]]:
        """Name the reply's blocks and reset the per-reply public state."""
        self.reply_turn = self.turn - 1
        named = [(f"t{self.reply_turn}.b{i}", b.code) for i, b in enumerate(blocks)]
        self.reply_blocks = tuple(code for _, code in named)
        self.block_index = {block_id: i for i, (block_id, _) in enumerate(named)}
        self.reply_messages = []
        self.plan_error = None
        return named
