"""An agent's session as an environment: ``session:RUN_DIR``.

A session (:class:`controlscope.Executor`) is recorded as an ordinary run: its one task is the
session's goal, its tools are the session's (:mod:`._tools`), and :data:`SESSION_FILE` in the
run directory records the goal, the tools' schemas and the upstream servers' command lines
(never their environment variables). The environment is named with the run directory, so a
replay, a branch or the viewer builds it again from the log as they do any environment's.

Built again from a recording, the environment answers each primitive call from the recorded
observations in order (:class:`RecordedTools`): a replay re-runs the session's code and its
recorded review decisions in a fresh worker and checks that the same calls are made with the
same final arguments, without calling an upstream server or a Python tool again (a replay must
not repeat a session's writes on the user's machine). A session has no native verifier: its
verdict holds no check.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from controlscope.core import (
    MAX_CONFIG_BYTES,
    AnswerKey,
    ClusterBy,
    InputFileError,
    PlannerFormat,
    PrimitiveCall,
    Task,
    TaskError,
    ToolResult,
    ToolSchema,
    ToolServer,
    Verdict,
    read_json,
)
from controlscope.envs._base import Environment
from controlscope.envs.session._config import first_line
from controlscope.record import iter_events

__all__ = [
    "SESSION_FILE",
    "SESSION_KIND",
    "SESSION_TASK",
    "RecordedTools",
    "SessionEnvironment",
    "SessionRecord",
]

SESSION_FILE = "session.json"
"""The file in a session's run directory that records its goal, tools and servers."""

SESSION_KIND = "session"
"""The environment kind of sessions: ``session:RUN_DIR``."""

SESSION_TASK = "session/agent"
"""The id of a session's one task."""

_NOTE = (
    "The functions reach the agent's own tools (MCP servers and Python functions) and nothing else."
)


class SessionRecord(BaseModel):
    """What :data:`SESSION_FILE` holds.

    Attributes:
        goal: the session's goal (the task's instruction: what a reviewer is told).
        tools: the tools' schemas as agent code sees them.
        servers: each upstream server's command line, by name.
        problems: one line per upstream server that did not start.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    goal: str
    tools: tuple[ToolSchema, ...]
    servers: dict[str, str] = {}
    problems: tuple[str, ...] = ()

    def write(self, run_dir: Path) -> Path:
        """Write the record into ``run_dir`` (created if needed); its path."""
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / SESSION_FILE
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        return path


class SessionEnvironment(Environment):
    """The environment of one recorded session (module docstring).

    Args:
        run_dir: the session's run directory (holding :data:`SESSION_FILE`).
        tools: the session's live tools (the executor's); None: answer from the recording.

    Raises:
        TaskError: :data:`SESSION_FILE` is missing or cannot be read.
    """

    read_tools: frozenset[str] = frozenset()
    write_tools: frozenset[str] = frozenset()
    cluster_by: ClusterBy = "task"

    def __init__(self, run_dir: str | Path, *, tools: ToolServer | None = None) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.name = f"{SESSION_KIND}:{self.run_dir}"
        path = self.run_dir / SESSION_FILE
        try:
            raw = path.read_bytes()
            self.record = SessionRecord.model_validate(read_json(path, MAX_CONFIG_BYTES))
        except (OSError, InputFileError, ValidationError) as err:
            raise TaskError(f"{path}: not a session's record: {first_line(err)}") from None
        self._digest = hashlib.sha256(raw).hexdigest()
        self._live = tools

    def tasks(self) -> list[Task]:
        """The session's one task."""
        return [self.task(SESSION_TASK)]

    def task(self, task_id: str, **params: Any) -> Task:
        """The session's task: its goal as the instruction.

        Raises:
            TaskError: another id, or parameters (a session takes none).
        """
        if task_id != SESSION_TASK or params:
            raise TaskError(f"a session has one task, {SESSION_TASK}, without parameters")
        return Task(
            id=SESSION_TASK,
            env=self.name,
            category="session",
            template="session",
            instruction=self.record.goal,
            metadata={"data_hashes": {SESSION_FILE: self._digest}},
        )

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        """Nothing to set up: the session's state is its tools' own."""
        return {}

    def start_server(self, workspace: Path) -> ToolServer:
        """The live tools, or the recorded ones (:class:`RecordedTools`)."""
        if self._live is not None:
            return self._live
        return RecordedTools(self.run_dir, self.record.tools)

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        """A session has no native verifier: a verdict without checks."""
        return Verdict(task_id=task.id, checks=[])

    def normalise_observation(self, text: str, *, since: float | None = None) -> str:
        """Observations are compared as they are."""
        return text

    def state_hash(self, task: Task, workspace: Path, *, since: float | None = None) -> str:
        """The empty workspace's hash (a session's state is outside it)."""
        return hashlib.sha256(b"").hexdigest()

    def file_hashes(
        self, task: Task, workspace: Path, *, since: float | None = None
    ) -> dict[str, str]:
        """No files: a session's state is outside the workspace."""
        return {}

    def planner_example(self, fmt: PlannerFormat) -> str:
        """No worked example."""
        return ""

    def planner_note(self) -> str | None:
        """The tools reach the agent's own servers and functions."""
        return _NOTE

    def error_hint(self, error: str) -> str | None:
        """No hints."""
        return None


class RecordedTools:
    """A recorded session's tools (implements :class:`~controlscope.core.ToolServer`): each
    call is answered with the next recorded observation, whatever it asks (the replay's check
    of the calls, :class:`~controlscope.record.RecordedActions`, names a call that differs).

    Args:
        run_dir: the recorded run directory.
        tools: the recorded tools' schemas.
    """

    def __init__(self, run_dir: Path, tools: tuple[ToolSchema, ...]) -> None:
        self.agent_roots: tuple[str, ...] = ()
        self.server_info: dict[str, str] = {"name": "recorded session", "version": ""}
        self._tools = list(tools)
        self._calls: list[PrimitiveCall] = []
        try:
            for event in iter_events(run_dir):
                if event.type == "primitive_call":
                    self._calls.append(event.call)
        except (OSError, ValueError) as err:
            raise TaskError(f"{run_dir}: the session's log cannot be read: {err}") from None
        self._next = 0

    def list_tools(self) -> list[ToolSchema]:
        """The recorded tools."""
        return list(self._tools)

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        """The next recorded observation (a tool error past the recording's last call)."""
        if self._next >= len(self._calls):
            text = f"call {self._next} of {name!r} is not in the recording"
            return ToolResult(text=text, is_error=True)
        recorded = self._calls[self._next]
        self._next += 1
        return recorded.result

    def close(self) -> None:
        """Nothing to stop."""
