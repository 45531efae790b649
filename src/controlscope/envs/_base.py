"""The environment interface shared by the filesystem, ALFWorld and app environments."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from controlscope.core import AnswerKey, PlannerFormat, Task, ToolServer, Verdict


@runtime_checkable
class Environment(Protocol):
    """An environment: tasks, their initial states, a tool server per workspace, verifiers.

    Attributes:
        name: the environment's name (``filesystem``...), as ``controlscope run --env`` takes it.
        read_tools: the names of its information-returning tools (a "read block" of the
            paper's local rule, appendix B).
        write_tools: the names of its tools that change the environment's state (a "writer
            block" of the local rule).
    """

    name: str
    read_tools: frozenset[str]
    write_tools: frozenset[str]

    def tasks(self) -> list[Task]:
        """All tasks with default parameters, sorted by id."""
        ...

    def task(self, task_id: str, **params: Any) -> Task:
        """One task, with generator parameters (e.g. ``students=75``).

        Raises:
            TaskError: unknown id or bad parameters.
        """
        ...

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        """Create the task's initial state in ``workspace`` (an existing, empty directory).

        Raises:
            TaskError: bad seed, or the workspace cannot be written.
        """
        ...

    def start_server(self, workspace: Path) -> ToolServer:
        """Start the environment's tool server confined to ``workspace``."""
        ...

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        """Check the workspace's terminal state; never raises on bad agent output."""
        ...

    def normalise_observation(self, text: str) -> str:
        """``text`` with the parts that differ between two identical runs masked.

        Tool observations can carry readings of the machine's clock (a file's creation or
        access time) that no seed controls; replays compare requests after passing every
        string through this, so such readings do not count as a divergence. Return ``text``
        unchanged when the environment's observations are deterministic.
        """
        ...

    def state_hash(self, task: Task, workspace: Path) -> str:
        """A hash of the workspace's state, to compare terminal states across branches and
        replays (paper section 3.3 and A.4).

        Raises:
            TaskError: unknown task or an unreadable workspace.
        """
        ...

    def planner_example(self, fmt: PlannerFormat) -> str:
        """A short worked example for the planner's system prompt, written for ``fmt`` (empty
        for none). Small models need one: without it they tend to redefine the tools."""
        ...

    def error_hint(self, error: str) -> str | None:
        """A hint for the planner after a block failed with ``error`` (its traceback text), or
        None. For example, code that looked for the task's files with ``open()``."""
        ...
