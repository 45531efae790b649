"""One trajectory on real parts: workspace, server, worker, planner loop, verdict, log.

:func:`run_trajectory` is the lower-level entry point under :func:`controlscope.run_task`: it
takes ready objects (environment, task, models or reviewer, condition) instead of a
:class:`~controlscope.run.RunSpec` (design notes, "Execution contract"; paper sections 3, 4 and
A.1):

1. the environment creates the task's initial state in a fresh workspace and starts its server;
2. the planner writes blocks; each reply's blocks run in the worker;
3. at every boundary the schedule decides whether the reviewer sees the public state ``h``; its
   proposal is validated against the granted scope and the realized operation is executed;
4. the run ends at a final answer, a budget, or a planner provider error (the workspace is then
   graded as it stands, paper A.4), and the verifier scores the workspace.
"""

from __future__ import annotations

import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from controlscope.core import (
    AnswerKey,
    ChatModel,
    Condition,
    EndReason,
    Event,
    FinalVerdictEvent,
    Message,
    RunEndEvent,
    RunStartEvent,
    Task,
    ToolServer,
    Verdict,
)
from controlscope.envs import Environment
from controlscope.models import ReplayMismatch
from controlscope.planner import first_user_message, render_system_prompt
from controlscope.record import (
    RecordedActions,
    RunSummary,
    TrajectoryWriter,
    read_events,
    summarize,
    write_summary,
)
from controlscope.review import ModelReviewer, Reviewer
from controlscope.run._controller import Controller
from controlscope.run._loop import Ending, run_loop
from controlscope.schedule import parse_schedule
from controlscope.worker import Limits, WorkerSession


class RunResult(BaseModel):
    """What a run returns: its summary, the verifier's verdict, why it ended, where its log is.

    Attributes:
        summary: the run's summary (also in ``summary.json``).
        verdict: the native verifier's verdict on the terminal workspace.
        run_dir: the run directory (``events.jsonl``, ``summary.json``).
        end_reason: why the run ended.
        detail: why it ended, in words (e.g. the provider's error); empty for a final answer.
    """

    summary: RunSummary
    verdict: Verdict
    run_dir: Path
    end_reason: EndReason
    detail: str = ""


Observer = Callable[[Event], None]
"""Called with every event after it is written (e.g. live progress)."""


def run_trajectory(
    env: Environment,
    task: Task,
    *,
    seed: int,
    planner: ChatModel,
    reviewer: Reviewer | None,
    condition: Condition,
    out_dir: Path,
    workspace_root: Path | None = None,
    observer: Observer | None = None,
    actions: RecordedActions | None = None,
) -> RunResult:
    """Run ``task`` once under ``condition`` and record it in ``out_dir``.

    Args:
        env: the task's environment.
        task: the task (with its generator parameters).
        seed: the task's data seed.
        planner: the ordinary planner (it also writes the source program).
        reviewer: who proposes at reviewed boundaries; None (or a ``never`` schedule) means no
            reviews.
        condition: scope, schedule, view, replacement boundary, formats, sampling, budgets.
        out_dir: the run directory; gets ``events.jsonl`` (flushed per event) and
            ``summary.json``.
        workspace_root: where the fresh workspace directory is made (a temporary directory
            when None); the workspace is removed when the run ends.
        observer: called with every event after it is written.
        actions: a replay's recorded primitive calls, checked against the calls made (A.4).

    Returns:
        The run's summary, verdict and end reason.

    Raises:
        TaskError: the task's state cannot be set up (before any model is called).
        FileExistsError: ``out_dir`` already holds a log.
        ReplayMismatch: a replay's request or primitive call (``ActionMismatch``) differs
            from the recording; the log then ends with ``run_end`` ``replay_diverged`` (no
            verdict) and ``summary.json`` is written.
        KeyboardInterrupt: the run was interrupted; the log ends with ``run_end``
            ``interrupted`` (no verdict) and ``summary.json`` is written.

    Any other failure of a part during the run (a model raising something other than a
    provider error, a bug) ends the run with end reason ``error`` (the failure in the detail),
    graded as it stands.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    if workspace_root is not None:
        workspace_root.mkdir(parents=True, exist_ok=True)
    writer = TrajectoryWriter(out_dir)

    def sink(event: Event) -> None:
        written = writer.write(event)
        if observer is not None:
            observer(written)

    parts = _Parts(env, task, seed, planner, reviewer, condition, sink, actions)
    try:
        verdict, ending = _graded_run(parts, workspace_root)
        sink(FinalVerdictEvent(verdict=verdict, success=verdict.success, end_reason=ending.reason))
        sink(RunEndEvent(end_reason=ending.reason, detail=ending.detail))
        summary = summarize(read_events(out_dir))
        write_summary(out_dir, summary)
        return RunResult(
            summary=summary,
            verdict=verdict,
            run_dir=out_dir,
            end_reason=ending.reason,
            detail=ending.detail,
        )
    except ReplayMismatch as err:
        # A replay that left its recording is no run to grade; its log ends saying so.
        _end_ungraded(sink, out_dir, "replay_diverged", str(err))
        raise
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM (the CLI turns it into an interrupt): recorded, not graded.
        _end_ungraded(sink, out_dir, "interrupted", "the run was interrupted")
        raise
    finally:
        writer.close()


@dataclass(frozen=True)
class _Parts:
    """What one trajectory runs with (the arguments of :func:`run_trajectory`)."""

    env: Environment
    task: Task
    seed: int
    planner: ChatModel
    reviewer: Reviewer | None
    condition: Condition
    sink: Callable[[Event], None]
    actions: RecordedActions | None = None


def _graded_run(parts: _Parts, workspace_root: Path | None) -> tuple[Verdict, Ending]:
    """Set the task up in a fresh workspace, run it, and grade the workspace as it stands."""
    with tempfile.TemporaryDirectory(prefix="cs-ws-", dir=workspace_root) as tmp:
        workspace = Path(tmp)
        answer_key: AnswerKey = parts.env.setup(parts.task, parts.seed, workspace)
        server = parts.env.start_server(workspace)
        try:
            ending = _run_session(parts, server, workspace)
        except (ReplayMismatch, KeyboardInterrupt):
            raise
        except Exception as err:  # a failing part ends the run, recorded and graded
            ending = Ending("error", _describe(err))
        finally:
            server.close()
        return parts.env.verify(parts.task, workspace, answer_key), ending


def _end_ungraded(
    sink: Callable[[Event], None], out_dir: Path, reason: EndReason, why: str
) -> None:
    """End a run that has no verdict: its ``run_end`` and its summary."""
    sink(RunEndEvent(end_reason=reason, detail=why))
    write_summary(out_dir, summarize(read_events(out_dir)))


def _describe(err: BaseException) -> str:
    """An unexpected failure in words: its type, message and where it was raised (the last
    frames of its traceback), for the ``run_end`` event's detail."""
    frames = traceback.format_exception(type(err), err, err.__traceback__, limit=-6)
    text = "".join(frames).strip()
    return text[-4000:]


def _run_session(parts: _Parts, server: ToolServer, workspace: Path) -> Ending:
    """Start the worker, record ``run_start``, run the planner loop; return why it ended."""
    env, task, condition, sink = parts.env, parts.task, parts.condition, parts.sink
    planner, reviewer = parts.planner, parts.reviewer
    tools = server.list_tools()
    reviews = reviewer is not None and condition.schedule != "never"
    controller = Controller(
        task=task,
        tools=tools,
        sink=sink,
        schedule=parse_schedule(
            condition.schedule, write_tools=env.write_tools, read_tools=env.read_tools
        ),
        reviewer=reviewer if reviews else None,
        condition=condition,
        actions=parts.actions,
    )
    system = render_system_prompt(
        tools,
        fmt=condition.planner_format,
        python_allowed=task.python_allowed,
        example=env.planner_example(condition.planner_format),
    )
    # How agent code names the workspace: a fixed root where the environment confines its
    # server (the same paths in every branch), else the host path.
    roots = server.agent_roots or (str(workspace),)
    controller.history = [
        Message(role="system", content=system),
        first_user_message(task.instruction, roots),
    ]
    limits = Limits(
        block_exec_s=condition.block_exec_s,
        task_exec_s=condition.budgets.execution_seconds,
        primitive_calls=condition.budgets.primitive_calls,
    )
    with WorkerSession(server, limits, isolation=condition.isolation, seed=parts.seed) as session:
        session.start()
        sink(
            RunStartEvent(
                task=task,
                seed=parts.seed,
                scope=condition.scope,
                schedule=condition.schedule,
                view=condition.view,
                replace_boundary=condition.replace_boundary,
                models={
                    "planner": planner.model_id,
                    "reviewer": _reviewer_id(reviewer) if reviews else "",
                },
                isolation=session.isolation,
                budgets=condition.budgets,
                config=condition.model_dump(mode="json"),
                worker_seed=parts.seed,
            )
        )
        ending = run_loop(controller, session, planner, env.error_hint)
        if parts.actions is not None:
            parts.actions.finish()
        return ending


def _reviewer_id(reviewer: Reviewer | None) -> str:
    """The reviewer's model id, or its class name for a reviewer without a model."""
    if reviewer is None:
        return ""
    if isinstance(reviewer, ModelReviewer):
        return reviewer.model.model_id
    return type(reviewer).__name__
