"""The planner loop of one trajectory: ordinary planning, running replies, receipts, budgets,
and ordinary recovery.

Every condition keeps ordinary planning (paper section 3.2): after a block or reply ends, the
planner sees each block's receipt and writes the next reply, until it answers without code, a
budget is reached, or a planner-stage provider error ends the trajectory (paper A.4). Where the
task's budgets allow repairs (ALFWorld: five, paper section 4) every condition also keeps the
same ordinary recovery: each reply is a plan, the verifier is asked after it, and a plan that
ends without the goal is followed by a new one until the goal is reached or the repairs are
spent (``plan_end`` and ``recovery`` events record each step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from controlscope.core import (
    BlockResult,
    BudgetEvent,
    ChatModel,
    Condition,
    Deadline,
    EndReason,
    Message,
    PlanCause,
    PlanEndEvent,
    ProviderError,
    RecoveryEvent,
    TaskBudgets,
    ToolServerError,
)
from controlscope.planner import (
    ParsedReply,
    assistant_message,
    parse_reply,
    results_message,
    tool_message,
)
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


def run_loop(
    controller: Controller,
    session: WorkerSession,
    planner: ChatModel,
    hint: ErrorHint,
    goal: Goal | None = None,
) -> Ending:
    """Plan and run replies until the trajectory ends; return why it ended.

    Under ordinary recovery (the budgets set ``repairs`` and ``goal`` is given; paper section
    4, ALFWorld) each reply is a plan: after it ends the goal is checked, and a plan that ends
    without it is followed by a repair (a new plan), at most ``repairs`` times.
    """
    budgets = controller.condition.budgets
    recovery = _Recovery(controller, goal) if budgets.repairs is not None and goal else None
    while True:
        if controller.deadline is not None and controller.deadline.passed:
            return wall_ending(controller)
        if controller.turn >= budgets.planning_turns:
            controller.sink(
                BudgetEvent(
                    budget="planning_turns", limit=budgets.planning_turns, value=controller.turn
                )
            )
            return Ending("budget:planning_turns")
        try:
            response = controller.plan(planner)
        except ProviderError as err:
            # Paper A.4: a planner-stage error ends the trajectory; the workspace is graded.
            reason: EndReason = (
                "context_limit" if err.kind == "context_length" else "planner_provider_error"
            )
            return Ending(reason, str(err))
        controller.turn += 1
        parsed = parse_reply(response, fmt=controller.condition.planner_format)
        controller.add_reply(assistant_message(response, parsed))
        if parsed.final and recovery is None:
            return Ending("final_answer")
        for call_id, why in parsed.malformed:
            controller.history.append(tool_message(call_id, why))
        if parsed.notice is not None:
            controller.history.append(Message(role="user", content=parsed.notice))
        results: list[BlockResult] = []
        if parsed.blocks:
            results, ending = _run_reply(controller, session, parsed, hint)
            if ending is not None:
                if recovery is not None:  # a budget ended the plan: its end is recorded too
                    recovery.plan_ended(results)
                return ending
        if recovery is not None:
            ending = recovery.after_plan(results)
            if ending is not None:
                return ending


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

    def after_plan(self, results: Sequence[BlockResult]) -> Ending | None:
        """Record the plan's end; the run's ending when the goal is reached or the repairs
        are spent, else ask for a repair and return None."""
        controller = self.controller
        cause, reached = self.plan_ended(results)
        if reached:
            return Ending("goal_reached")
        limit = controller.condition.budgets.repairs or 0
        repair = self.plans
        if repair > limit:
            controller.sink(BudgetEvent(budget="repairs", limit=limit, value=repair - 1))
            return Ending("budget:repairs", f"the plan failed after {limit} ordinary repairs")
        detail = _recovery_message(cause, repair, limit, controller.plan_error)
        controller.sink(RecoveryEvent(repair=repair, cause=cause, detail=detail))
        controller.history.append(Message(role="user", content=detail))
        return None


def _cause(controller: Controller, results: Sequence[BlockResult]) -> PlanCause:
    """How the plan whose block results are ``results`` ended."""
    if controller.plan_error is not None:
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
    controller: Controller, session: WorkerSession, parsed: ParsedReply, hint: ErrorHint
) -> tuple[list[BlockResult], Ending | None]:
    """Run one reply's blocks, hand their receipts to the planner; the block results, and an
    Ending if the run ends."""
    named = controller.start_reply(parsed.blocks)
    runnable, capped = _within_block_cap(controller, named)
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
    receipts = receipts_by_block(named, results, controller.replacement_code, hint)
    fenced: list[str] = []
    for (block_id, _), block in zip(named, parsed.blocks, strict=True):
        if block.tool_call_id is not None:
            controller.history.append(tool_message(block.tool_call_id, receipts[block_id]))
        else:
            fenced.append(receipts[block_id])
    if fenced:
        controller.history.append(results_message(fenced))
    if capped:
        return results, _block_cap_ending(controller)
    return results, _budget_ending(controller, session, results)


def _within_block_cap(
    controller: Controller, named: list[tuple[str, str]]
) -> tuple[list[tuple[str, str]], list[BlockResult]]:
    """The reply's blocks that fit in the task's cap of natural blocks (paper A.2: 40), and a
    receipt for each one beyond it."""
    cap = controller.condition.budgets.blocks
    room = len(named) if cap is None else max(0, cap - controller.natural_blocks)
    controller.natural_blocks += min(room, len(named))
    receipts = [
        BlockResult(
            block_id=block_id,
            status="cancelled",
            error=f"not run: the task's cap of {cap} blocks is reached",
        )
        for block_id, _ in named[room:]
    ]
    return named[:room], receipts


def _block_cap_ending(controller: Controller) -> Ending:
    """The run ends: the planner asked for a block beyond the task's cap (recorded)."""
    cap = controller.condition.budgets.blocks or 0
    controller.sink(BudgetEvent(budget="blocks", limit=cap, value=controller.natural_blocks))
    return Ending("budget:blocks", f"the task's cap of {cap} blocks is reached")


def _budget_ending(
    controller: Controller, session: WorkerSession, results: Sequence[BlockResult]
) -> Ending | None:
    """The call or execution-seconds budget that ended the reply, recorded; None if neither."""
    budgets: TaskBudgets = controller.condition.budgets
    if controller.deadline is not None and controller.deadline.passed:
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
    controller.sink(wall_budget(controller.condition, controller.deadline))
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
        root = result.block_id.split(".r", 1)[0]
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
