"""Tasks, their budgets and verdicts: what every environment defines and every run records."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
