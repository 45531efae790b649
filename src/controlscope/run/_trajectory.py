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

import itertools
import math
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from controlscope._leftovers import make_dir, sweep_quietly
from controlscope._tree import remove_tree
from controlscope.core import (
    AnswerKey,
    BranchOrigin,
    ChatModel,
    Check,
    ClockDifferencesEvent,
    Condition,
    Deadline,
    EndReason,
    Event,
    FinalVerdictEvent,
    Isolation,
    Message,
    RunEndEvent,
    RunStartEvent,
    SourceFile,
    Task,
    TaskError,
    ToolSchema,
    ToolServerError,
    Verdict,
    WallClockExceeded,
    clip_text,
    data_problem,
    running_until,
    shadowing_warning,
)
from controlscope.envs import Environment
from controlscope.models import ReplayMismatch, ReplayModel
from controlscope.planner import first_user_message, render_system_prompt
from controlscope.record import (
    LogError,
    RecordedActions,
    RunSummary,
    TrajectoryWriter,
    iter_events,
    summarize,
    write_summary,
)
from controlscope.review import ModelReviewer, Reviewer, reviewer_id
from controlscope.run._controller import Controller, Review, RunContext
from controlscope.run._fork import ForkPoint, ServerSlot
from controlscope.run._hook import StopRun, TrajectoryHook
from controlscope.run._loop import Ending, run_loop, wall_budget
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
        warnings: what ``run_start`` warns of (e.g. tools named like Python builtins).
    """

    summary: RunSummary
    verdict: Verdict
    run_dir: Path
    end_reason: EndReason
    detail: str = ""
    warnings: tuple[str, ...] = ()


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
    hook: TrajectoryHook | None = None,
    origin: BranchOrigin | None = None,
    since: float | None = None,
    source_file: SourceFile | None = None,
) -> RunResult:
    """Run ``task`` once under ``condition`` and record it in ``out_dir``.

    Args:
        env: the task's environment.
        task: the task (with its generator parameters).
        seed: the task's data seed.
        planner: the ordinary planner (it also writes the source program).
        reviewer: who proposes at reviewed boundaries (None, or a ``never`` schedule: none).
        condition: scope, schedule, view, replacement boundary, formats, sampling, budgets (the
            wall-clock ceiling ``budgets.wall_seconds`` included: nothing of the run outlives it).
        out_dir: the run directory (``events.jsonl``, flushed per event, and ``summary.json``).
        workspace_root: where the fresh workspace is made (None: a temporary directory), removed
            when the run ends whatever agent code did, and killed runs' leftovers first.
        observer: called with every event after it is written.
        actions: a replay's recorded primitive calls, checked against the calls made (A.4).
        hook: steers a prefix replay or branch (:mod:`controlscope.replay`; ``StopRun`` ends it).
        origin: where a run that starts from a recorded prefix comes from (in ``run_start``).
        since: when the run whose state the workspace holds started (a replay: its recording's
            start; None: now): the workspace's hashes date file times from it.
        source_file: the frozen source program of the first reply (in ``run_start``), if any.

    Returns:
        The run's summary, verdict and end reason.

    Raises:
        TaskError: the task's state cannot be set up (before any model is called).
        FileExistsError: ``out_dir`` already holds a log.
        ReplayMismatch: a replay's request or primitive call (``ActionMismatch``) differs
            from the recording; the log then ends with ``run_end`` ``replay_diverged`` (no
            verdict) and ``summary.json`` is written.
        KeyboardInterrupt: interrupted (``run_end`` ``interrupted``, no verdict; a summary).

    Any other failure of a part during the run ends it recorded and graded as it stands: a
    tool server that does not start or breaks (``environment_error``), the wall-clock ceiling
    (``budget:wall_seconds``), anything else (a model raising something other than a provider
    error, an event the log cannot hold, a bug: ``error``, the failure in the detail).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    if workspace_root is not None:
        workspace_root.mkdir(parents=True, exist_ok=True)
    writer = TrajectoryWriter(out_dir)
    parts = _Parts(env, task, seed, planner, reviewer, condition, writer, observer, actions)
    parts.hook, parts.origin, parts.since = hook, origin, since or parts.since
    parts.source_file = source_file
    try:
        return _record(parts, workspace_root)
    except ReplayMismatch as err:
        # A replay that left its recording is no run to grade; its log ends saying so.
        _report_clock_differences(parts)
        _end_ungraded(parts, "replay_diverged", str(err))
        raise
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM (the CLI turns it into an interrupt): recorded, not graded.
        _end_ungraded(parts, "interrupted", "the run was interrupted")
        raise
    except TaskError:
        # The task cannot be set up (bad input, nothing ran): no empty log blocks a retry.
        if writer.next_seq == 0:
            writer.close()
            writer.path.unlink(missing_ok=True)
        raise
    finally:
        parts.close_log()


def _record(parts: _Parts, workspace_root: Path | None) -> RunResult:
    """Run and grade the task, record its end and its summary (in the run directory the log
    is in when the run ends: a branch by fork changes it, :mod:`controlscope.run._fork`)."""
    sweep_quietly(workspace_root)  # what killed runs left there and in the temporary folder
    with running_until(parts.deadline, call_s=parts.condition.request_timeout_s):
        verdict, ending, hashes = _graded_run(parts, workspace_root)
    _report_clock_differences(parts)
    ending = _finish(parts, verdict, ending, hashes)
    out_dir = parts.out_dir
    summary = summarize(iter_events(out_dir))
    write_summary(out_dir, summary)
    return RunResult(
        summary=summary,
        verdict=verdict,
        run_dir=out_dir,
        end_reason=ending.reason,
        detail=ending.detail,
        warnings=parts.warnings,
    )


class _Parts:
    """What one trajectory runs with (the arguments of :func:`run_trajectory`), its log and
    its wall-clock ceiling; :meth:`start` writes ``run_start`` once, with what is known."""

    def __init__(
        self,
        env: Environment,
        task: Task,
        seed: int,
        planner: ChatModel,
        reviewer: Reviewer | None,
        condition: Condition,
        writer: TrajectoryWriter,
        observer: Observer | None,
        actions: RecordedActions | None = None,
    ) -> None:
        self.env, self.task, self.seed, self.condition = env, task, seed, condition
        self.planner, self.reviewer, self.actions = planner, reviewer, actions
        self.reviews = reviewer is not None and condition.schedule != "never"
        self.deadline = Deadline(condition.budgets.wall_seconds)
        self.isolation: Isolation = "none"
        self.server_info: dict[str, str] = {}
        self.hook: TrajectoryHook | None = None
        self.origin: BranchOrigin | None = None
        self.task_data_hash: str | None = None
        self.source_file: SourceFile | None = None
        self.warnings: tuple[str, ...] = ()
        self.since = time.time()
        """When the run whose state the workspace holds started (the hashes' reference)."""
        self._writer, self._observer = writer, observer
        self._started = False

    @property
    def out_dir(self) -> Path:
        """The run directory the log is written to."""
        return self._writer.run_dir

    def sink(self, event: Event) -> None:
        """Write ``event`` to the log and show it to the observer."""
        written = self._writer.write(event)
        if self._observer is not None:
            self._observer(written)

    def close_log(self) -> None:
        """Close the log (idempotent)."""
        self._writer.close()

    def relog(
        self,
        out_dir: Path,
        condition: Condition,
        reviewer: Reviewer | None,
        origin: BranchOrigin,
    ) -> None:
        """Go on as a branch recorded in ``out_dir`` (in a controller forked at a boundary,
        :mod:`controlscope.run._fork`): ``run_start`` under the branch's condition, reviewer
        and origin, then the events recorded so far after ``run_start``, in order.

        Raises:
            FileExistsError: ``out_dir`` already holds a log.
        """
        trunk = self.out_dir
        self._writer.close()  # this process's copy, first: nothing more of it reaches the
        self._writer = TrajectoryWriter(out_dir)  # trunk's log, whatever fails from here on
        self.condition, self.reviewer, self.origin = condition, reviewer, origin
        self.reviews = reviewer is not None and condition.schedule != "never"
        self._started = False
        self.start()
        for event in itertools.islice(iter_events(trunk), 1, None):
            self.sink(event)

    def start(self) -> None:
        """Write ``run_start`` (once): the condition, the isolation and the server."""
        if self._started:
            return
        self._started = True
        self.sink(
            RunStartEvent(
                task=self.task,
                seed=self.seed,
                scope=self.condition.scope,
                lattice=self.condition.lattice,
                operations=self.condition.operations.operations,
                schedule=self.condition.schedule,
                view=self.condition.view,
                replace_boundary=self.condition.replace_boundary,
                models={
                    "planner": self.planner.model_id,
                    "reviewer": _reviewer_id(self.reviewer) if self.reviews else "",
                },
                isolation=self.isolation,
                server=self.server_info,
                budgets=self.condition.budgets,
                config=self.condition.model_dump(mode="json"),
                worker_seed=self.seed,
                task_data_hash=self.task_data_hash,
                branch=self.origin,
                source_file=self.source_file,
                warnings=self.warnings,
            )
        )


Hashes = tuple[str | None, dict[str, str]]
"""A terminal workspace's hash and per-file hashes (None and empty when they failed)."""


def _finish(parts: _Parts, verdict: Verdict, ending: Ending, hashes: Hashes) -> Ending:
    """Record the verdict with the terminal hashes, and the end (``run_start`` first if nothing
    opened the log yet). A verdict the log cannot hold ends the run ``error`` instead of losing
    its end."""
    parts.start()
    try:
        parts.sink(
            FinalVerdictEvent(
                verdict=verdict,
                success=verdict.success,
                end_reason=ending.reason,
                state_hash=hashes[0],
                file_hashes=hashes[1],
            )
        )
    except LogError as err:
        ending = Ending("error", f"the verdict cannot be recorded: {err}")
    ending = Ending(ending.reason, _recordable(ending.detail))
    parts.sink(RunEndEvent(end_reason=ending.reason, detail=ending.detail))
    return ending


def _recordable(text: str) -> str:
    """``text`` as the log can hold it: Unicode text (lone surrogates escaped), bounded."""
    if data_problem(text) is not None:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return clip_text(text, 8000)


def _graded_run(parts: _Parts, workspace_root: Path | None) -> tuple[Verdict, Ending, Hashes]:
    """Set the task up in a fresh workspace, run it, grade the workspace as it stands and hash
    it; the workspace is removed on every path (without recursion: agent code shaped it)."""
    workspace = make_dir("cs-ws-", workspace_root)
    try:
        answer_key: AnswerKey = parts.env.setup(parts.task, parts.seed, workspace)
        parts.task_data_hash = parts.env.state_hash(parts.task, workspace, since=parts.since)
        ending = _serve(parts, workspace, answer_key)
        return _verify(parts, workspace, answer_key), ending, _hashes(parts, workspace)
    finally:
        remove_tree(workspace)


def _hashes(parts: _Parts, workspace: Path) -> Hashes:
    """The terminal workspace's hash and per-file hashes (None and empty if it is unreadable:
    the verdict already says what could be read)."""
    try:
        return (
            parts.env.state_hash(parts.task, workspace, since=parts.since),
            parts.env.file_hashes(parts.task, workspace, since=parts.since),
        )
    except TaskError:
        return None, {}


def _report_clock_differences(parts: _Parts) -> None:
    """Record the differences a replay's masking hid, apart (paper A.4), if there were any."""
    models = [parts.planner]
    if isinstance(parts.reviewer, ModelReviewer):
        models.append(parts.reviewer.model)
    differences = [d for m in models if isinstance(m, ReplayModel) for d in m.masked]
    if differences:
        parts.sink(ClockDifferencesEvent(differences=differences))


def _serve(parts: _Parts, workspace: Path, answer_key: AnswerKey) -> Ending:
    """Start the environment's server and run the session; why the run ended."""
    try:
        server = ServerSlot(parts.env.start_server(workspace))
    except ToolServerError as err:
        return Ending("environment_error", f"the tool server did not start: {err}")
    try:
        parts.server_info = dict(server.held.server_info)
        return _run_session(parts, server, workspace, answer_key)
    except (ReplayMismatch, KeyboardInterrupt):
        raise
    except StopRun as stop:
        return Ending(stop.reason, stop.detail)
    except WallClockExceeded as err:
        return _wall_clock(parts, str(err))
    except ToolServerError as err:
        return Ending("environment_error", str(err))
    except Exception as err:  # a failing part ends the run, recorded and graded
        return Ending("error", _describe(err))
    finally:
        server.close()


def _wall_clock(parts: _Parts, why: str) -> Ending:
    """The ceiling passed while a model request or a review was waited for: recorded."""
    parts.start()
    parts.sink(wall_budget(parts.condition, parts.deadline))
    return Ending("budget:wall_seconds", why)


def _verify(parts: _Parts, workspace: Path, answer_key: AnswerKey) -> Verdict:
    """The environment's verdict; a verifier that raises gives one failed check."""
    try:
        return parts.env.verify(parts.task, workspace, answer_key)
    except Exception as err:
        why = f"verifier error: {type(err).__name__}: {err}"[:2000]
        return Verdict(
            task_id=parts.task.id, checks=[Check(name="verifier", passed=False, reason=why)]
        )


def _end_ungraded(parts: _Parts, reason: EndReason, why: str) -> None:
    """End a run that has no verdict: its ``run_end`` and its summary."""
    parts.start()
    parts.sink(RunEndEvent(end_reason=reason, detail=_recordable(why)))
    write_summary(parts.out_dir, summarize(iter_events(parts.out_dir)))


def _describe(err: BaseException) -> str:
    """An unexpected failure in words: its type, message and where it was raised (the last
    frames of its traceback), for the ``run_end`` event's detail."""
    frames = traceback.format_exception(type(err), err, err.__traceback__, limit=-6)
    text = "".join(frames).strip()
    return clip_text(text, 4000)


def _run_session(
    parts: _Parts, server: ServerSlot, workspace: Path, answer_key: AnswerKey
) -> Ending:
    """Start the worker, record ``run_start``, run the planner loop; return why it ended.
    Ordinary recovery asks the verifier whether the goal is reached after each plan."""
    env, condition = parts.env, parts.condition
    memory = condition.worker_memory_mb
    limits = Limits(
        # No per-block limit unless one is set: the task's execution budget governs.
        block_exec_s=math.inf if condition.block_exec_s is None else condition.block_exec_s,
        task_exec_s=condition.budgets.execution_seconds,
        primitive_calls=condition.budgets.primitive_calls,
        memory_mb=memory,
        tmp_mb=max(16, memory // 8),  # /tmp is part of the worker's memory
        block_requests=condition.budgets.block_requests,
        renew_allowance=condition.block_allowance == "renew",
        runtime_guard=condition.runtime_guard,
    )
    with WorkerSession(
        server, limits, isolation=condition.isolation, deadline=parts.deadline, seed=parts.seed
    ) as session:
        parts.isolation = session.isolation
        tools = server.list_tools()
        shadowing = shadowing_warning(tools)
        parts.warnings = (shadowing,) if shadowing is not None else ()
        parts.start()
        controller = _controller(parts, session, server, workspace, tools)
        opening = _opening(parts, tools, server.agent_roots or (str(workspace),))
        if parts.hook is not None:
            parts.hook.attach(controller, workspace)
        session.start()
        ending = run_loop(
            controller,
            session,
            parts.planner,
            env.error_hint,
            opening=opening,
            goal=lambda: _verify(parts, workspace, answer_key).success,
        )
        if parts.actions is not None:
            parts.actions.finish()
        if parts.hook is not None:
            parts.hook.finish(controller)
        return ending


def _controller(
    parts: _Parts,
    session: WorkerSession,
    server: ServerSlot,
    workspace: Path,
    tools: list[ToolSchema],
) -> Controller:
    """The trajectory's boundary handler: its context (with the fork point a branch by fork
    replaces at a boundary) and who reviews it."""
    condition = parts.condition
    fork_point = ForkPoint(parts.env, session, server, workspace, parts.relog, parts.deadline)
    context = RunContext(
        task=parts.task,
        tools=tuple(tools),
        sink=parts.sink,
        deadline=parts.deadline,
        actions=parts.actions,
        hook=parts.hook,
        fork_point=fork_point,
    )
    schedule = parse_schedule(
        condition.schedule,
        write_tools=parts.env.write_tools,
        read_tools=parts.env.read_tools,
        annotations={tool.name: tool.annotations for tool in tools},
    )
    reviewer = parts.reviewer if parts.reviews else None
    return Controller(context, Review(condition, schedule, reviewer))


def _opening(parts: _Parts, tools: list[ToolSchema], roots: tuple[str, ...]) -> list[Message]:
    """The planner's first messages: the system prompt and the task (paper A.1). Agent code
    names the workspace by the fixed root where the environment confines its server (the
    same paths in every branch), else by its host path; an environment without files (its own
    planner note) names none."""
    condition = parts.condition
    note = parts.env.planner_note()
    system = render_system_prompt(
        parts.env.prompt_tools(tools),  # the apps list some and document the rest (paper A.2)
        fmt=condition.planner_format,
        python_allowed=parts.task.python_allowed,
        example=parts.env.planner_example(condition.planner_format),
        note=note,
    )
    return [
        Message(role="system", content=system),
        first_user_message(parts.task.instruction, roots, directories=note is None),
    ]


def _reviewer_id(reviewer: Reviewer | None) -> str:
    """Who reviews (:func:`~controlscope.review.reviewer_id`); empty without a reviewer."""
    return "" if reviewer is None else reviewer_id(reviewer)
