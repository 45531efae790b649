"""The planner loop of one trajectory: ordinary planning, running replies, receipts, budgets,
and ordinary recovery.

Every condition keeps ordinary planning (paper section 3.2): after a block or reply ends, the
planner sees each block's receipt and writes the next reply, until it answers without code, a
budget is reached, or a planner-stage provider error ends the trajectory (paper A.4). Where the
task's budgets allow repairs (ALFWorld: five, paper section 4) every condition also keeps the
same ordinary recovery: each reply is a plan, the verifier is asked after it, and a plan that
ends without the goal is followed by a new one until the goal is reached or the repairs are
spent (``plan_end`` and ``recovery`` events record each step).

The loop owns the planner's state (:class:`PlannerState`: its history, turns and blocks run) and
advances on typed steps (:data:`Step`: a reply to run, a reply that ran, or the ending); the
controller owns the boundary handler's (:mod:`controlscope.run._controller`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from controlscope.core import (
    BlockId,
    BlockResult,
    BudgetEvent,
    ChatModel,
    Condition,
    Deadline,
    EndReason,
    Message,
    ModelRequest,
    ModelResponse,
    PlanCause,
    PlanEndEvent,
    PlannerTurnEvent,
    ProviderError,
    RecoveryEvent,
    TaskBudgets,
    ToolServerError,
    WallClockExceeded,
    model_call_event,
    seeded_request,
)
from controlscope.planner import (
    EXECUTE_PYTHON_SPEC,
    ParsedReply,
    assistant_message,
    parse_reply,
    results_message,
    tool_message,
)
from controlscope.run._ceiling import call_within
from controlscope.run._controller import Controller
from controlscope.worker import WorkerSession

REPLACEMENT_CODE_CHARS = 4000
"""How much of a replacement's code its receipt shows the planner."""

ErrorHint = Callable[[str], "str | None"]
"""The environment's hint for a failed block's traceback (``Environment.error_hint``)."""


@dataclass(frozen=True)
class Ending:
    """Why the loop stopped.

    Attributes:
        reason: the run's end reason.
        detail: the reason in words (e.g. the provider's error message); empty for a final
            answer.
    """

    reason: EndReason
    detail: str = ""


Goal = Callable[[], bool]
"""Whether the verifier sees the task's goal reached now (ordinary recovery asks after each
plan)."""


@dataclass
class PlannerState:
    """The planner's state, owned by :func:`run_loop` (a branch forked at a boundary goes on
    with a copy of it).

    Attributes:
        history: the planner's messages: the opening (system prompt, task), then each reply
            with its blocks' receipts (and the recovery messages).
        turn: the planning turns requested so far.
        natural_blocks: the planner's blocks run so far (replacements not counted; paper
            A.2's cap).
    """

    history: list[Message]
    turn: int = 0
    natural_blocks: int = 0


@dataclass(frozen=True)
class Replied:
    """A step: the planner answered (recorded) and its reply is in the history.

    Attributes:
        parsed: the reply, parsed into blocks.
        before: the history before the reply (the public history of paper A.3).
    """

    parsed: ParsedReply
    before: tuple[Message, ...]


@dataclass(frozen=True)
class RanReply:
    """A step: the reply's blocks ran (none for a reply without code); their receipts are in
    the history.

    Attributes:
        results: every block result of the reply (replacements and receipts included).
    """

    results: tuple[BlockResult, ...]


Step = Replied | RanReply | Ending
"""What the loop does next: run a reply, plan after one, or end."""


def run_loop(
    controller: Controller,
    session: WorkerSession,
    planner: ChatModel,
    hint: ErrorHint,
    *,
    opening: Sequence[Message],
    goal: Goal | None = None,
) -> Ending:
    """Plan and run replies until the trajectory ends; return why it ended.

    The loop advances on typed steps: planning gives a :class:`Replied` (or an ending),
    running it a :class:`RanReply` (or an ending), and after a reply the planner is asked
    again. Under ordinary recovery (the budgets set ``repairs`` and ``goal`` is given; paper
    section 4, ALFWorld) each reply is a plan: after it ends the goal is checked, and a plan
    that ends without it is followed by a repair (a new plan), at most ``repairs`` times.

    Args:
        controller: the trajectory's boundary handler.
        session: the worker session the blocks run in.
        planner: the planner.
        hint: the environment's hint for a failed block's error.
        opening: the planner's first messages (the system prompt and the task).
        goal: whether the task's goal is reached now (ordinary recovery).
    """
    budgets = controller.condition.budgets  # as the run starts (a replay's: the recording's)
    recovery = _Recovery(controller, goal) if budgets.repairs is not None and goal else None
    loop = _Loop(controller, session, planner, hint, budgets.planning_turns, recovery)
    state = PlannerState(history=list(opening))
    step: Step = _plan(state, loop)
    while not isinstance(step, Ending):
        match step:
            case Replied():
                step = _run(step, state, loop)
            case RanReply():
                step = _after_reply(step, state, loop)
    return step


@dataclass(frozen=True)
class _Loop:
    """What the loop runs with: the trajectory's parts, the planning-turn budget as the run
    started, and ordinary recovery where the budgets allow repairs."""

    controller: Controller
    session: WorkerSession
    planner: ChatModel
    hint: ErrorHint
    planning_turns: int
    recovery: _Recovery | None


def _plan(state: PlannerState, loop: _Loop) -> Replied | Ending:
    """One ordinary planning turn: the reply recorded and added to the history, or why the
    run ends (the ceiling, the turn budget, a planner-stage error, a final answer)."""
    controller = loop.controller
    deadline = controller.context.deadline
    if deadline is not None and deadline.passed:
        return wall_ending(controller)
    if state.turn >= loop.planning_turns:
        limit = loop.planning_turns
        controller.sink(BudgetEvent(budget="planning_turns", limit=limit, value=state.turn))
        return Ending("budget:planning_turns")
    try:
        response = _request(state, controller, loop.planner)
    except ProviderError as err:
        # Paper A.4: a planner-stage error ends the trajectory; the workspace is graded.
        reason: EndReason = (
            "context_limit" if err.kind == "context_length" else "planner_provider_error"
        )
        return Ending(reason, str(err))
    state.turn += 1
    parsed = parse_reply(response, fmt=controller.condition.planner_format)
    before = tuple(state.history)
    state.history.append(assistant_message(response, parsed))
    if parsed.final and loop.recovery is None:
        return Ending("final_answer")
    for call_id, why in parsed.malformed:
        state.history.append(tool_message(call_id, why))
    if parsed.notice is not None:
        state.history.append(Message(role="user", content=parsed.notice))
    return Replied(parsed, before)


def _request(state: PlannerState, controller: Controller, planner: ChatModel) -> ModelResponse:
    """Ask the planner for its next reply (recorded).

    Raises:
        ProviderError: a planner-stage error (recorded first).
        WallClockExceeded: no answer before the run's ceiling (recorded first as a
            ``timeout`` error of the request).
    """
    condition = controller.condition
    rendered = ModelRequest(
        messages=tuple(state.history),
        tools=(EXECUTE_PYTHON_SPEC,) if condition.planner_format == "tools" else (),
        tool_choice="auto",
        temperature=condition.temperature_for("planner"),
        max_tokens=condition.max_tokens_for("planner"),
        provider_options=dict(condition.planner_options),
        draw=condition.source_program,
        purpose="planner",
    )
    request = seeded_request(planner, rendered)  # recorded with the seed it is sampled with
    controller.sink(PlannerTurnEvent(turn=state.turn))
    try:
        response = call_within(controller.context.deadline, planner.complete, request)
    except ProviderError as err:
        controller.sink(model_call_event("planner", request, err, turn=state.turn))
        raise
    except WallClockExceeded as err:
        timeout = ProviderError(str(err), kind="timeout")
        controller.sink(model_call_event("planner", request, timeout, turn=state.turn))
        raise
    controller.sink(model_call_event("planner", request, response, turn=state.turn))
    return response


def _run(step: Replied, state: PlannerState, loop: _Loop) -> RanReply | Ending:
    """Run the reply's blocks (if it has any): their results, or why the run ends (a budget,
    the environment; under recovery the plan's end is recorded first)."""
    results: list[BlockResult] = []
    if step.parsed.blocks:
        results, ending = _run_reply(step, state, loop)
        if ending is not None:
            if loop.recovery is not None:  # a budget ended the plan: its end is recorded too
                loop.recovery.plan_ended(results)
            return ending
    return RanReply(tuple(results))


def _after_reply(step: RanReply, state: PlannerState, loop: _Loop) -> Replied | Ending:
    """After a reply: under recovery the plan's end (the goal reached, the repairs spent, or
    a repair asked for); then the next planning turn."""
    if loop.recovery is not None:
        ending = loop.recovery.after_plan(step.results, state.history)
        if ending is not None:
            return ending
    return _plan(state, loop)


class _Recovery:
    """Ordinary recovery (paper sections 3.2 and 4): the same in every scope."""

    def __init__(self, controller: Controller, goal: Goal) -> None:
        self.controller = controller
        self.goal = goal
        self.plans = 0

    def plan_ended(self, results: Sequence[BlockResult]) -> tuple[PlanCause, bool]:
        """Record the end of a plan whose block results are ``results``: how it ended and
        whether the goal is reached now."""
        controller = self.controller
        cause = _cause(controller, results)
        reached = self.goal()
        controller.sink(
            PlanEndEvent(
                plan=self.plans, cause=cause, goal_reached=reached, calls=controller.calls_completed
            )
        )
        self.plans += 1
        return cause, reached

    def after_plan(self, results: Sequence[BlockResult], history: list[Message]) -> Ending | None:
        """Record the plan's end; the run's ending when the goal is reached or the repairs
        are spent, else ask for a repair (a message added to ``history``) and return None."""
        controller = self.controller
        cause, reached = self.plan_ended(results)
        if reached:
            return Ending("goal_reached")
        limit = controller.condition.budgets.repairs or 0
        repair = self.plans
        if repair > limit:
            controller.sink(BudgetEvent(budget="repairs", limit=limit, value=repair - 1))
            return Ending("budget:repairs", f"the plan failed after {limit} ordinary repairs")
        detail = _recovery_message(cause, repair, limit, controller.reply.plan_error)
        controller.sink(RecoveryEvent(repair=repair, cause=cause, detail=detail))
        history.append(Message(role="user", content=detail))
        return None


def _cause(controller: Controller, results: Sequence[BlockResult]) -> PlanCause:
    """How the plan whose block results are ``results`` ended."""
    if controller.reply.plan_error is not None:
        return "plan_error"
    if not results:
        return "no_program"
    # A block a replacement cancelled is judged by its replacement, which is among the results.
    if all(r.status == "completed" for r in results if r.replaced_by is None):
        return "completed"
    return "error"


def _recovery_message(cause: PlanCause, repair: int, limit: int, plan_error: str | None) -> str:
    """What the planner is told when it is asked for a repair."""
    why = {
        "completed": "The plan ran to its end but the task is not done yet.",
        "error": "The plan stopped with an error and the task is not done yet.",
        "plan_error": f"The plan was stopped ({plan_error}) and the task is not done yet.",
        "no_program": "The reply held no program and the task is not done yet.",
    }[cause]
    return (
        f"[recovery {repair} of {limit}] {why} Look at the observations above and write a new "
        "program that completes the task from the current state."
    )


def _run_reply(
    step: Replied, state: PlannerState, loop: _Loop
) -> tuple[list[BlockResult], Ending | None]:
    """Run one reply's blocks, hand their receipts to the planner; the block results, and an
    Ending if the run ends."""
    controller, session, parsed = loop.controller, loop.session, step.parsed
    named = controller.start_reply(parsed.blocks, turn=state.turn - 1, history=step.before)
    runnable, capped = _within_block_cap(state, controller, named)
    try:
        results = session.run_reply(
            runnable, controller, replace_boundary=controller.condition.replace_boundary
        )
    except ToolServerError as err:
        # The environment server died or broke the protocol: the block was reported killed;
        # the run ends and the workspace is graded as it stands.
        return [], Ending("environment_error", str(err))
    for receipt in capped:
        controller.on_block_end(receipt)
    results += capped
    receipts = receipts_by_block(named, results, controller.reply.replacement_code, loop.hint)
    fenced: list[str] = []
    for (block_id, _), block in zip(named, parsed.blocks, strict=True):
        if block.tool_call_id is not None:
            state.history.append(tool_message(block.tool_call_id, receipts[block_id]))
        else:
            fenced.append(receipts[block_id])
    if fenced:
        state.history.append(results_message(fenced))
    if capped:
        return results, _block_cap_ending(controller, state)
    return results, _budget_ending(controller, session, results)


def _within_block_cap(
    state: PlannerState, controller: Controller, named: list[tuple[str, str]]
) -> tuple[list[tuple[str, str]], list[BlockResult]]:
    """The reply's blocks that fit in the task's cap of natural blocks (paper A.2: 40), and a
    receipt for each one beyond it."""
    cap = controller.condition.budgets.blocks
    room = len(named) if cap is None else max(0, cap - state.natural_blocks)
    state.natural_blocks += min(room, len(named))
    receipts = [
        BlockResult(
            block_id=block_id,
            status="cancelled",
            error=f"not run: the task's cap of {cap} blocks is reached",
        )
        for block_id, _ in named[room:]
    ]
    return named[:room], receipts


def _block_cap_ending(controller: Controller, state: PlannerState) -> Ending:
    """The run ends: the planner asked for a block beyond the task's cap (recorded)."""
    cap = controller.condition.budgets.blocks or 0
    controller.sink(BudgetEvent(budget="blocks", limit=cap, value=state.natural_blocks))
    return Ending("budget:blocks", f"the task's cap of {cap} blocks is reached")


def _budget_ending(
    controller: Controller, session: WorkerSession, results: Sequence[BlockResult]
) -> Ending | None:
    """The call or execution-seconds budget that ended the reply, recorded; None if neither."""
    budgets: TaskBudgets = controller.condition.budgets
    deadline = controller.context.deadline
    if deadline is not None and deadline.passed:
        return wall_ending(controller)
    if any(result.status == "budget_exhausted" for result in results):
        controller.sink(
            BudgetEvent(
                budget="primitive_calls", limit=budgets.primitive_calls, value=session.calls_made
            )
        )
        return Ending("budget:primitive_calls")
    if session.clock.task_spent:
        controller.sink(
            BudgetEvent(
                budget="execution_seconds",
                limit=budgets.execution_seconds,
                value=session.clock.task_s,
            )
        )
        return Ending("budget:execution_seconds")
    return None


def wall_ending(controller: Controller) -> Ending:
    """The run reached its wall-clock ceiling between steps: the budget recorded, the ending."""
    controller.sink(wall_budget(controller.condition, controller.context.deadline))
    limit = controller.condition.budgets.wall_seconds
    return Ending("budget:wall_seconds", f"the run's wall-clock ceiling of {limit:g} s was reached")


def wall_budget(condition: Condition, deadline: Deadline | None) -> BudgetEvent:
    """The ``budget`` event of the run's wall-clock ceiling (seconds spent as its value)."""
    limit = condition.budgets.wall_seconds
    spent = limit - deadline.remaining() if deadline is not None else limit
    return BudgetEvent(budget="wall_seconds", limit=limit, value=spent)


def receipts_by_block(
    named: Sequence[tuple[str, str]],
    results: Sequence[BlockResult],
    replacement_code: dict[str, str],
    hint: ErrorHint,
) -> dict[str, str]:
    """Join each planned block's receipt with the receipts of its replacements.

    A replacement's receipt starts with its code, so ordinary planning sees what ran in place
    of the planner's block (paper A.1: "cancellation receipts preserve the tool-call protocol").
    A block that failed gets the environment's hint for its error, if any.

    Args:
        named: the reply's ``(block_id, code)`` pairs.
        results: every block result of the reply (replacements and receipts included).
        replacement_code: the code of each replacement block, by block id.
        hint: the environment's error hint.

    Returns:
        The receipt text by planned block id.
    """
    out: dict[str, list[str]] = {block_id: [] for block_id, _ in named}
    for result in results:
        root = BlockId.parse(result.block_id).root
        code = replacement_code.get(result.block_id)
        if code is not None:
            shown = code[:REPLACEMENT_CODE_CHARS]
            cut = "" if len(shown) == len(code) else "\n# ... (cut)"
            out.setdefault(root, []).append(
                f"[a reviewer replaced the rest with block {result.block_id}:]\n{shown}{cut}"
            )
        out.setdefault(root, []).append(result.receipt())
        note = hint(result.error or "") if result.status == "error" else None
        if note:
            out[root].append(note)
    return {k: "\n".join(v) if v else f"[block {k}: not run]" for k, v in out.items()}
