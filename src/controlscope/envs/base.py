"""The environment interface shared by the filesystem, ALFWorld and app environments.

INTERFACE CONTRACT (fixed): the agent loop, panels and the CLI rely on these names and fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from controlscope.tools import ToolServer


class TaskBudgets(BaseModel):
    """Default budgets of a task (paper section 4: 100 calls, 100 turns, 1,800 s)."""

    primitive_calls: int = 100
    planning_turns: int = 100
    execution_seconds: float = 1800.0


class Task(BaseModel):
    """One task of an environment.

    Attributes:
        id: ``category/name``.
        env: the environment's name (``filesystem``...).
        category: the task's category.
        instruction: what the agent is asked to do, in our own words.
        python_allowed: False for tasks whose instruction restricts Python (paper appendix B).
        template: the scenario template id (tasks from one template are grouped in analysis).
        budgets: default budgets.
        params: generator parameters (e.g. ``{"students": 75}``), part of the task's identity.
    """

    model_config = ConfigDict(frozen=True)
    id: str
    env: str
    category: str
    instruction: str
    python_allowed: bool = True
    template: str
    budgets: TaskBudgets = Field(default_factory=TaskBudgets)
    params: dict[str, Any] = Field(default_factory=dict)


class Check(BaseModel):
    """One verifier check: pass or fail, and why."""

    name: str
    passed: bool
    reason: str = ""


class Verdict(BaseModel):
    """A verifier's verdict: success iff every check passed."""

    task_id: str
    checks: list[Check]

    @property
    def success(self) -> bool:
        """True when there is at least one check and every check passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)


AnswerKey = dict[str, Any]
"""What ``setup`` returns and ``verify`` checks against (JSON-serialisable)."""


class TaskError(ValueError):
    """Unknown task id, bad seed or size, or a workspace that cannot be created."""


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
