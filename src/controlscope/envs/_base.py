"""The environment interface shared by the filesystem, ALFWorld and app environments."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from controlscope.core import AnswerKey, Task, ToolServer, Verdict


@runtime_checkable
class Environment(Protocol):
    """An environment: tasks, their initial states, a tool server per workspace, verifiers."""

    name: str

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
