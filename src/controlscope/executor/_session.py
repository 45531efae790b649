"""The thread an executor's run lives on, and the planner that hands it the agent's blocks.

An agent session is an ordinary run (:func:`controlscope.run.run_trajectory`) whose planner is
the agent: :class:`SessionPlanner` answers each planning turn with the next block the agent
gives :meth:`Executor.execute <controlscope.Executor.execute>` (an ``execute_python`` call),
and with a final answer once the executor is closed. The run lives on a thread of its own
(:class:`SessionThread`): the worker is started from it, so under bubblewrap the worker dies
with it (``--die-with-parent`` follows the spawning thread). Every event the run writes is
also kept here, so an execution is built from the events its block wrote.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from controlscope.core import (
    BlockResult,
    Boundary,
    Condition,
    EndReason,
    Event,
    ModelRequest,
    ModelResponse,
    PrimitiveCall,
    Task,
    ToolServer,
)
from controlscope.envs import Environment
from controlscope.models import ScriptedModel
from controlscope.planner import EXECUTE_PYTHON
from controlscope.review import Reviewer
from controlscope.run import RunResult, TrajectoryControl, run_trajectory
from controlscope.worker import WorkerSession

SESSION_MODEL = "executor"
"""The planner's model id in a session's ``run_start``: the agent that called the executor."""

CLOSED_ANSWER = "The session was closed."
"""The planner's final answer when the executor is closed."""

KEPT_EVENTS = frozenset(
    {
        "block_end",
        "primitive_call",
        "review_request",
        "proposal",
        "validation",
        "realized_operation",
    }
)
"""The events an execution is built from (:func:`~controlscope.executor._execution.execution_of`);
the others are in the log alone."""

Signal = Literal["ready", "ended"]
"""What the run thread tells the executor: the planner waits for a block, or the run ended."""


class SessionPlanner:
    """The planner of a session: each answer is the next block the agent sent (module
    docstring); implements :class:`~controlscope.core.ChatModel`.

    Args:
        inbox: the agent's blocks, in order; None closes the session.
        signals: told ``ready`` each time a planning turn waits for a block.
    """

    def __init__(self, inbox: queue.Queue[str | None], signals: queue.Queue[Signal]) -> None:
        self._inbox, self._signals = inbox, signals
        self._blocks = 0
        self._closed = False

    @property
    def model_id(self) -> str:
        """The agent's id in the log."""
        return SESSION_MODEL

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Wait for the agent's next block: an ``execute_python`` call of it, or the final
        answer once the session is closed."""
        if not self._closed:
            self._signals.put("ready")
            code = self._inbox.get()
            self._closed = code is None
        if self._closed or code is None:
            return ModelResponse(text=CLOSED_ANSWER, model=SESSION_MODEL)
        self._blocks += 1
        answer = ScriptedModel.tool_call(
            EXECUTE_PYTHON, {"code": code}, call_id=f"block_{self._blocks}"
        )
        return answer.model_copy(update={"model": SESSION_MODEL})


class WorkerHandle:
    """A trajectory hook that only keeps the run's worker session, so that closing a stuck
    session can kill its worker (implements :class:`~controlscope.run.TrajectoryHook`)."""

    def __init__(self) -> None:
        self.session: WorkerSession | None = None

    def attach(self, control: TrajectoryControl, workspace: Path) -> None:
        """Keep the worker session."""
        point = control.fork_point
        self.session = point.session if point is not None else None

    def before_boundary(self, control: TrajectoryControl, boundary: Boundary) -> None:
        """Nothing."""

    def after_call(self, control: TrajectoryControl, call: PrimitiveCall) -> None:
        """Nothing."""

    def after_block(self, control: TrajectoryControl, result: BlockResult) -> None:
        """Nothing."""

    def finish(self, control: TrajectoryControl) -> None:
        """Nothing."""


class SessionThread:
    """One session's run on its own thread, with the events it wrote.

    Args:
        tools: the session's tools (closed when the run ends, and by :meth:`kill`).

    Attributes:
        planner: the session's planner (the agent's blocks).
        inbox: the agent's blocks for the planner; None closes the session.
        signals: ``ready`` when the planner waits for a block, ``ended`` when the run ended.
        events: the events of :data:`KEPT_EVENTS` the run wrote since the last :meth:`take`.
        result: the run's result once it ended.
        failure: what the run raised, if it did.
        finished: set once the run ended (its end recorded, its tools stopped).
    """

    def __init__(self, tools: ToolServer) -> None:
        self.inbox: queue.Queue[str | None] = queue.Queue()
        self.signals: queue.Queue[Signal] = queue.Queue()
        self.planner = SessionPlanner(self.inbox, self.signals)
        self.events: list[Event] = []
        self.result: RunResult | None = None
        self.failure: BaseException | None = None
        self.tools = tools
        self.handle = WorkerHandle()
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def start(
        self,
        env: Environment,
        task: Task,
        *,
        reviewer: Reviewer | None,
        condition: Condition,
        out_dir: Path,
        seed: int,
    ) -> None:
        """Start the run on its thread.

        Args:
            env: the session's environment.
            task: its task.
            reviewer: who reviews (None: no reviews).
            condition: the resolved condition.
            out_dir: the run directory.
            seed: the worker's seed.
        """
        run: Callable[[], RunResult] = lambda: run_trajectory(  # noqa: E731
            env,
            task,
            seed=seed,
            planner=self.planner,
            reviewer=reviewer,
            condition=condition,
            out_dir=out_dir,
            observer=self._observe,
            hook=self.handle,
        )
        self.thread = threading.Thread(
            target=self._main, args=(run,), name="controlscope-session", daemon=True
        )
        self.thread.start()

    def _observe(self, event: Event) -> None:
        if event.type in KEPT_EVENTS:
            with self._lock:
                self.events.append(event)

    def _main(self, run: Callable[[], RunResult]) -> None:
        try:
            self.result = run()
        except BaseException as err:  # kept for the executor, never lost
            self.failure = err
        finally:
            with contextlib.suppress(Exception):
                self.tools.close()
            self.finished.set()
            self.signals.put("ended")

    def take(self) -> list[Event]:
        """The kept events written since the last :meth:`take` (they are dropped here, so a
        long session's memory does not grow with its log)."""
        with self._lock:
            taken, self.events = self.events, []
            return taken

    def wait(self, timeout_s: float | None = None) -> Signal | None:
        """The next signal (None when none came within ``timeout_s``)."""
        try:
            return self.signals.get(timeout=timeout_s)
        except queue.Empty:
            return None

    @property
    def ended(self) -> bool:
        """Whether the run has ended (its end recorded, its tools stopped)."""
        return self.finished.is_set()

    def end_reason(self) -> tuple[EndReason, str]:
        """Why the run ended, and the detail."""
        if self.result is not None:
            return self.result.end_reason, self.result.detail
        failure = self.failure
        why = f"{type(failure).__name__}: {failure}" if failure is not None else "unknown"
        return "error", why

    def kill(self) -> None:
        """Kill the worker and stop the tools (a session that does not end when asked)."""
        session = self.handle.session
        if session is not None:
            with contextlib.suppress(Exception):
                session.close()
        with contextlib.suppress(Exception):
            self.tools.close()
