"""The agent: ordinary planning, the worker, scheduled reviews, budgets, and the trajectory log.

One call of :func:`run_task` runs one task under one granted scope and schedule on real parts and
records everything (design.md, "Execution contract"; paper sections 3, 4 and A.1):

1. the environment creates the task's initial state in a fresh workspace and starts its server;
2. the planner (ordinary planning) writes blocks; each reply's blocks run in the worker;
3. at every boundary the schedule decides whether the reviewer sees the public state ``h``; its
   proposal is validated against the granted scope and the realized operation is executed;
4. the run ends at a final answer, a budget, or a planner provider error (the workspace is then
   graded as it stands, paper A.4), and the verifier scores the workspace.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from controlscope.core import (
    DEFAULT_MAX_TOKENS,
    AnswerKey,
    BlockEndEvent,
    BlockResult,
    BlockStartEvent,
    Boundary,
    BoundaryEvent,
    BudgetEvent,
    ChatModel,
    Event,
    FinalVerdictEvent,
    Keep,
    Message,
    ModelCallEvent,
    ModelRequest,
    ModelResponse,
    Operation,
    PlannerTurnEvent,
    PrimitiveCall,
    PrimitiveCallEvent,
    ProviderError,
    ReplaceBoundary,
    RunEndEvent,
    RunStartEvent,
    Scope,
    Task,
    TaskBudgets,
    ToolSchema,
    ToolServer,
    ToolServerError,
    Verdict,
)
from controlscope.envs._base import Environment
from controlscope.models.replay import ReplayMismatch
from controlscope.planner import (
    EXECUTE_PYTHON_SPEC,
    PlannedBlock,
    PlannerFormat,
    assistant_message,
    first_user_message,
    parse_reply,
    render_system_prompt,
    results_message,
    tool_message,
)
from controlscope.record.store import TrajectoryWriter, read_events, write_summary
from controlscope.record.summary import RunSummary, summarize
from controlscope.review.reviewer import Reviewer, ReviewOutcome
from controlscope.review.state import DecisionRecord, PublicState
from controlscope.schedule import Schedule, ScheduleContext, parse_schedule
from controlscope.worker import Limits, WorkerSession

View = Literal["code_only", "with_feedback"]

EndReason = Literal[
    "final_answer",
    "budget:primitive_calls",
    "budget:planning_turns",
    "budget:execution_seconds",
    "planner_provider_error",
    "context_limit",
    "environment_error",
]


class RunConfig(BaseModel):
    """The condition a task runs under.

    Attributes:
        scope: the granted scope (paper section 3.1).
        schedule: the schedule spec (``never``, ``continuous``, ``per_block``, ``once``,
            ``once:K``, ``midpoint:N``, ``protect:n``, ``retain_first``, composable with ``+``).
        view: the reviewer's view of ``h`` (paper appendix A.3).
        replace_boundary: what a replacement replaces (paper section A.1).
        planner_format: ``tools`` (native ``execute_python``) or ``fenced`` code.
        review_mode: ``tools`` (operation tools) or ``json`` (schema-constrained decision).
        temperature: sampling temperature of both roles (paper: 0.7).
        max_tokens: per-request token cap (paper: 16,384).
        draw: the reviewer draw index (separately sampled reviews never share a cache entry).
        budgets: the task's budgets; None takes the task's defaults.
        block_wall_s: wall seconds one block may run.
    """

    model_config = ConfigDict(frozen=True)
    scope: Scope = Scope.FULL
    schedule: str = "continuous"
    view: View = "with_feedback"
    replace_boundary: ReplaceBoundary = "reply"
    planner_format: PlannerFormat = "tools"
    review_mode: Literal["tools", "json"] = "tools"
    temperature: float = 0.7
    max_tokens: int = DEFAULT_MAX_TOKENS
    draw: int = 0
    budgets: TaskBudgets | None = None
    block_wall_s: float = 300.0
    isolation: Literal["auto", "bwrap", "none"] = "auto"


class RunResult(BaseModel):
    """What :func:`run_task` returns: the summary, the verdict and where the log is."""

    summary: RunSummary
    verdict: Verdict
    run_dir: Path
    end_reason: str
    detail: str = ""
    """Why the run ended, in words (e.g. the provider's error message); empty for a final
    answer."""
    tree_hash: str = ""
    extra: dict[str, str] = Field(default_factory=dict)


class _EventSink:
    """The trajectory writer, plus an optional observer of every event (live progress)."""

    def __init__(self, writer: TrajectoryWriter, observer: Callable[[Event], None] | None) -> None:
        self._writer = writer
        self._observer = observer

    def write(self, event: Event) -> None:
        written = self._writer.write(event)
        if self._observer is not None:
            self._observer(written)


class _Controller:
    """Drives one trajectory: the boundary handler of the worker and the planner loop's state."""

    def __init__(
        self,
        *,
        task: Task,
        tools: Sequence[ToolSchema],
        writer: _EventSink,
        schedule: Schedule,
        reviewer: Reviewer | None,
        config: RunConfig,
        budgets: TaskBudgets,
    ) -> None:
        self.task = task
        self.tools = tuple(tools)
        self.writer = writer
        self.schedule = schedule
        self.reviewer = reviewer
        self.config = config
        self.budgets = budgets
        self.history: list[Message] = []
        self.turn = 0
        self.reply_turn = 0
        self.reply_blocks: tuple[str, ...] = ()
        self.block_index: dict[str, int] = {}
        self.running: str | None = None
        self.running_code = ""
        self.running_is_replacement = False
        self.reply_messages: list[str] = []
        self.replacement_code: dict[str, str] = {}
        self.block_calls: list[PrimitiveCall] = []
        self.decisions: list[DecisionRecord] = []
        self.calls_completed = 0
        self.review_seconds = 0.0

    # -- BoundaryHandler -------------------------------------------------------------------

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        self.running = block_id
        self.running_code = code
        self.running_is_replacement = replaces is not None
        if replaces is not None:
            self.replacement_code[block_id] = code
        self.block_calls = []
        self.writer.write(
            BlockStartEvent(block_id=block_id, code=code, replaces=replaces, turn=self.reply_turn)
        )

    def on_boundary(self, boundary: Boundary) -> Operation:
        root = boundary.block_id.split(".r", 1)[0]
        index = self.block_index.get(root)
        queued: tuple[str, ...] = ()
        if index is not None and (
            not self.running_is_replacement or self.config.replace_boundary == "block"
        ):
            # Under a reply boundary a replacement has cancelled the blocks queued behind it.
            queued = self.reply_blocks[index + 1 :]
        ctx = ScheduleContext(
            code=boundary.code,
            block_index=index if index is not None else len(self.reply_blocks),
            is_replacement=self.running_is_replacement,
            queued_blocks=queued,
            calls_completed=self.calls_completed,
        )
        review = self.reviewer is not None and self.schedule.should_review(boundary, ctx)
        self.writer.write(BoundaryEvent(boundary=boundary, review=review))
        realized: Operation = Keep()
        if review and self.reviewer is not None:
            realized = self._review(boundary, index, queued)
        self.schedule.observe(boundary, realized)
        return realized

    def on_call(self, call: PrimitiveCall) -> None:
        self.calls_completed += 1
        self.block_calls.append(call)
        self.writer.write(PrimitiveCallEvent(call=call))

    def on_block_end(self, result: BlockResult) -> None:
        self.reply_messages.append(result.receipt())
        self.writer.write(BlockEndEvent(result=result))

    # -- reviews ---------------------------------------------------------------------------

    def _review(self, boundary: Boundary, index: int | None, queued: tuple[str, ...]) -> Operation:
        assert self.reviewer is not None
        state = PublicState(
            goal=self.task.instruction,
            history=tuple(m for m in self.history if m.role != "system"),
            reply_blocks=self.reply_blocks,
            running_block=None if self.running_is_replacement else index,
            queued_blocks=queued,
            boundary=boundary,
            tools=self.tools,
            decisions=tuple(self.decisions),
            reply_messages=tuple(self.reply_messages),
            block_calls=tuple(self.block_calls),
            calls_used=self.calls_completed,
            call_budget=self.budgets.primitive_calls,
            replace_boundary=self.config.replace_boundary,
        )
        outcome: ReviewOutcome = self.reviewer.review(state, log=self.writer.write)
        self.review_seconds += outcome.latency_s
        realized = outcome.validation.realized
        self.decisions.append(
            DecisionRecord(
                call_index=boundary.call_index,
                block_id=boundary.block_id,
                tool=boundary.tool,
                granted=self.config.scope,
                operation=realized,
                fallback=outcome.fallback,
            )
        )
        return realized

    # -- planning ----------------------------------------------------------------------------

    def plan(self, planner: ChatModel) -> ModelResponse:
        """One ordinary planning turn; raises ProviderError on a planner-stage error."""
        request = ModelRequest(
            messages=tuple(self.history),
            tools=(EXECUTE_PYTHON_SPEC,) if self.config.planner_format == "tools" else (),
            tool_choice="auto",
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            purpose="planner",
        )
        self.writer.write(PlannerTurnEvent(turn=self.turn))
        try:
            response = planner.complete(request)
        except ProviderError as err:
            self.writer.write(
                ModelCallEvent(
                    role="planner",
                    request=request,
                    error=str(err),
                    error_kind=err.kind,
                    error_status=err.status,
                    turn=self.turn,
                )
            )
            raise
        self.writer.write(
            ModelCallEvent(role="planner", request=request, response=response, turn=self.turn)
        )
        return response

    def start_reply(self, blocks: Sequence[PlannedBlock]) -> list[tuple[str, str]]:
        """Name the reply's blocks and reset the per-reply public state."""
        self.reply_turn = self.turn - 1
        named = [(f"t{self.reply_turn}.b{i}", b.code) for i, b in enumerate(blocks)]
        self.reply_blocks = tuple(code for _, code in named)
        self.block_index = {block_id: i for i, (block_id, _) in enumerate(named)}
        self.reply_messages = []
        return named


REPLACEMENT_CODE_CHARS = 4000
"""How much of a replacement's code its receipt shows the planner."""

REPLAY_DIVERGED = "replay_diverged"
"""The end reason of a replay whose model received a request its recording does not hold."""

LOCAL_FILE_HINT = (
    "Note: the task's files are not on the machine that runs your code; open(), os and pathlib "
    "cannot see them. Read and write them with the tool functions (read_text_file, write_file...)."
)
"""Appended to the receipt of a block that failed looking for files locally."""

_LOCAL_FILE_ERROR = re.compile(r"^(FileNotFoundError|PermissionError|IsADirectoryError)\b", re.M)


def _receipts_by_block(
    named: Sequence[tuple[str, str]],
    results: Sequence[BlockResult],
    replacement_code: dict[str, str],
) -> dict[str, str]:
    """Join each planned block's receipt with the receipts of its replacements.

    A replacement's receipt starts with its code, so ordinary planning sees what ran in place
    of the planner's block (paper A.1: "cancellation receipts preserve the tool-call protocol").
    """
    out: dict[str, list[str]] = {block_id: [] for block_id, _ in named}
    for result in results:
        root = result.block_id.split(".r", 1)[0]
        code = replacement_code.get(result.block_id)
        if code is not None:
            shown = code if len(code) <= REPLACEMENT_CODE_CHARS else code[:REPLACEMENT_CODE_CHARS]
            cut = "" if shown is code else "\n# ... (cut)"
            out.setdefault(root, []).append(
                f"[a reviewer replaced the rest with block {result.block_id}:]\n{shown}{cut}"
            )
        out.setdefault(root, []).append(result.receipt())
        if result.status == "error" and _LOCAL_FILE_ERROR.search(result.error or ""):
            out[root].append(LOCAL_FILE_HINT)
    return {k: "\n".join(v) if v else f"[block {k}: not run]" for k, v in out.items()}


def _end_reason_from_results(
    results: Sequence[BlockResult], exec_seconds: float, budgets: TaskBudgets
) -> EndReason | None:
    for result in results:
        if result.status == "budget_exhausted":
            return "budget:primitive_calls"
    if exec_seconds >= budgets.execution_seconds:
        return "budget:execution_seconds"
    return None


def run_task(
    env: Environment,
    task: Task,
    *,
    seed: int,
    planner: ChatModel,
    reviewer_model: ChatModel | None,
    config: RunConfig,
    out_dir: Path,
    workspace_root: Path | None = None,
    observer: Callable[[Event], None] | None = None,
) -> RunResult:
    """Run ``task`` once under ``config`` and record it in ``out_dir``.

    Args:
        env: the task's environment.
        task: the task (with its generator parameters).
        seed: the task's data seed.
        planner: the ordinary planner (also writes the source program).
        reviewer_model: the reviewer; None or a ``never`` schedule means no reviews (Keep).
        config: scope, schedule, view, replacement boundary, formats, sampling, budgets.
        out_dir: the run directory; gets ``events.jsonl`` (flushed per event) and
            ``summary.json``.
        workspace_root: where the fresh workspace directory is made (a temporary dir when None).
        observer: called with every event after it is written (live progress).

    Returns:
        The run's summary, verdict and end reason.

    Raises:
        TaskError: when the task's state cannot be set up (before any model is called).
        ReplayMismatch: a replay model received a request that differs from its recording;
            the log then ends with a ``run_end`` of reason :data:`REPLAY_DIVERGED` (no
            verdict) and ``summary.json`` is written.
    """
    budgets = config.budgets or task.budgets
    out_dir.mkdir(parents=True, exist_ok=True)
    if workspace_root is not None:
        workspace_root.mkdir(parents=True, exist_ok=True)
    writer = TrajectoryWriter(out_dir)
    sink = _EventSink(writer, observer)
    try:
        with tempfile.TemporaryDirectory(prefix="cs-ws-", dir=workspace_root) as tmp:
            workspace = Path(tmp)
            answer_key: AnswerKey = env.setup(task, seed, workspace)
            server = env.start_server(workspace)
            try:
                result = _run_with_server(
                    env=env,
                    task=task,
                    seed=seed,
                    planner=planner,
                    reviewer_model=reviewer_model,
                    config=config,
                    budgets=budgets,
                    sink=sink,
                    server=server,
                    workspace=workspace,
                    answer_key=answer_key,
                    out_dir=out_dir,
                )
            finally:
                server.close()
            state_hash = getattr(env, "state_hash", None)
            if callable(state_hash):
                result.tree_hash = str(state_hash(task, workspace))
            return result
    except ReplayMismatch as err:
        # A replay that left its recording is no run to grade; its log ends saying so.
        sink.write(RunEndEvent(end_reason=REPLAY_DIVERGED, detail=str(err)))
        write_summary(out_dir, summarize(read_events(out_dir)))
        raise
    finally:
        writer.close()


def _run_with_server(
    *,
    env: Environment,
    task: Task,
    seed: int,
    planner: ChatModel,
    reviewer_model: ChatModel | None,
    config: RunConfig,
    budgets: TaskBudgets,
    sink: _EventSink,
    server: ToolServer,
    workspace: Path,
    answer_key: AnswerKey,
    out_dir: Path,
) -> RunResult:
    tools = server.list_tools()
    schedule = parse_schedule(config.schedule)
    reviewer = (
        Reviewer(
            reviewer_model,
            config.scope,
            view=config.view,
            mode=config.review_mode,
            draw=config.draw,
            temperature=config.temperature,
            max_tokens=config.max_tokens,
        )
        if reviewer_model is not None and config.schedule != "never"
        else None
    )
    limits = Limits(
        block_exec_s=config.block_wall_s,
        task_exec_s=budgets.execution_seconds,
        primitive_calls=budgets.primitive_calls,
    )
    controller = _Controller(
        task=task,
        tools=tools,
        writer=sink,
        schedule=schedule,
        reviewer=reviewer,
        config=config,
        budgets=budgets,
    )
    # How agent code names the workspace: a fixed root where the environment confines its
    # server (same paths in every branch), else the host path.
    roots = list(getattr(server, "agent_roots", ()) or (str(workspace),))
    controller.history = [
        Message(
            role="system",
            content=render_system_prompt(
                tools, fmt=config.planner_format, python_allowed=task.python_allowed
            ),
        ),
        first_user_message(task.instruction, roots),
    ]
    end_reason: str = "final_answer"
    detail = ""
    exec_seconds = 0.0
    with WorkerSession(server, limits, isolation=config.isolation) as session:
        session.start()
        sink.write(
            RunStartEvent(
                task=task,
                seed=seed,
                scope=config.scope,
                schedule=config.schedule,
                view=config.view,
                replace_boundary=config.replace_boundary,
                models={
                    "planner": planner.model_id,
                    "reviewer": reviewer_model.model_id if reviewer_model else "",
                },
                isolation=session.isolation,
                budgets=budgets,
                config=config.model_dump(mode="json"),
            )
        )
        while True:
            if controller.turn >= budgets.planning_turns:
                sink.write(
                    BudgetEvent(
                        budget="planning_turns",
                        limit=budgets.planning_turns,
                        value=controller.turn,
                    )
                )
                end_reason = "budget:planning_turns"
                break
            try:
                response = controller.plan(planner)
            except ProviderError as err:
                # Paper A.4: a planner-stage error ends the trajectory; the workspace is graded.
                end_reason = (
                    "context_limit" if err.kind == "context_length" else "planner_provider_error"
                )
                detail = str(err)
                break
            controller.turn += 1
            parsed = parse_reply(response, fmt=config.planner_format)
            controller.history.append(assistant_message(response, parsed))
            if parsed.final:
                end_reason = "final_answer"
                break
            for call_id, why in parsed.malformed:
                controller.history.append(tool_message(call_id, why))
            if not parsed.blocks:
                continue
            named = controller.start_reply(parsed.blocks)
            t0, reviewed0 = time.monotonic(), controller.review_seconds
            try:
                results = session.run_reply(
                    named, controller, replace_boundary=config.replace_boundary
                )
            except ToolServerError as err:
                # The environment server died or broke the protocol: the block was reported
                # killed; end the run, grade the workspace as it stands, keep the reason.
                end_reason, detail = "environment_error", str(err)
                break
            exec_seconds += time.monotonic() - t0 - (controller.review_seconds - reviewed0)
            receipts = _receipts_by_block(named, results, controller.replacement_code)
            fenced_parts: list[str] = []
            for (block_id, _), block in zip(named, parsed.blocks, strict=True):
                if block.tool_call_id is not None:
                    controller.history.append(tool_message(block.tool_call_id, receipts[block_id]))
                else:
                    fenced_parts.append(receipts[block_id])
            if fenced_parts:
                controller.history.append(results_message(fenced_parts))
            reason = _end_reason_from_results(results, exec_seconds, budgets)
            if reason is not None:
                limit, value = (
                    (budgets.primitive_calls, session.calls_made)
                    if reason == "budget:primitive_calls"
                    else (budgets.execution_seconds, exec_seconds)
                )
                sink.write(BudgetEvent(budget=reason.split(":", 1)[1], limit=limit, value=value))
                end_reason = reason
                break
    verdict = env.verify(task, workspace, answer_key)
    sink.write(FinalVerdictEvent(verdict=verdict, success=verdict.success, end_reason=end_reason))
    sink.write(RunEndEvent(end_reason=end_reason, detail=detail))
    summary = summarize(read_events(out_dir))
    write_summary(out_dir, summary)
    return RunResult(
        summary=summary, verdict=verdict, run_dir=out_dir, end_reason=end_reason, detail=detail
    )
