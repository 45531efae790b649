"""Tasks, their budgets and verdicts: what every environment defines and every run records."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from controlscope.core._ceilings import (
    BlockBudget,
    BlockRequests,
    CallBudget,
    Repairs,
    Seconds,
    TurnBudget,
)

DEFAULT_WALL_SECONDS = 10_800.0
"""The default wall-clock ceiling of a run (three hours: the execution budget, a hundred planning
turns and a review at each of a hundred calls, on a slow local model)."""


MAX_NAME_CHARS = 200
"""The longest task id (a panel folder's path below it)."""

ClusterBy = Literal["category", "template", "task"]
"""What a bootstrap resamples: the task category (the paper's filesystem intervals), the
scenario template (apps), or the task."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a task's id (or one segment of a path a task names), or None.

    A task id is a ``/``-separated path (``category/name``) that panels use as folders below
    their own (``runs/<task id>/...``), and that is printed: each segment must be a name
    (neither empty, ``.`` nor ``..``), without backslashes or characters that are not
    printable (newlines, terminal escapes), at most :data:`MAX_NAME_CHARS` in all.

    Args:
        name: the id (or segment) to check.

    Returns:
        None, or the problem in words (``'..' is no name``).
    """
    if len(name) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    bad = next((ch for ch in name if not ch.isprintable() or ch == "\\"), None)
    if bad is not None:
        return f"holds {bad!r}"
    for segment in name.split("/"):
        if segment in ("", ".", ".."):
            return f"{segment!r} is no name" if segment else "an empty name (or a stray /)"
    return None


class TaskBudgets(BaseModel):
    """The budgets of a task (paper section 4: 100 primitive calls, 100 planning turns, 1,800
    execution seconds; review time is recorded apart and never counts), and the run's
    wall-clock ceiling, which counts everything (planning, reviews, execution, waits).

    Attributes:
        primitive_calls: primitive calls per task (1 to :data:`MAX_CALLS`).
        planning_turns: ordinary planning turns per task (1 to :data:`MAX_TURNS`).
        execution_seconds: execution seconds per task (above 0, at most :data:`MAX_SECONDS`).
        wall_seconds: wall-clock seconds the whole run may take (above 0, at most
            :data:`MAX_SECONDS`); nothing of the run outlives it.
        repairs: ordinary repairs after a failed plan (paper section 4: ALFWorld allows five);
            None: no recovery protocol, ordinary planning alone (the MCP environments). With a
            number, each planner reply is a plan: when it ends and the verifier does not yet
            see the goal, the planner writes a new plan, at most this many times.
        blocks: natural blocks (the planner's, not replacements) per task; None: no cap
            (the app protocols cap a task at 40, paper section 4 and A.2).
        block_requests: primitive calls (API requests) one natural block may make; a
            request beyond it is refused as a quota rejection and stops the block; None: no
            cap (the app protocols allow 250, paper A.2).

    Raises:
        pydantic.ValidationError: a value out of range.
    """

    model_config = ConfigDict(frozen=True)
    primitive_calls: CallBudget = 100
    planning_turns: TurnBudget = 100
    execution_seconds: Seconds = 1800.0
    wall_seconds: Seconds = DEFAULT_WALL_SECONDS
    repairs: Repairs | None = None
    blocks: BlockBudget | None = None
    block_requests: BlockRequests | None = None


class Task(BaseModel):
    """One task of an environment.

    Attributes:
        id: ``category/name``: a path of names (:func:`name_problem`), since panels keep a
            task's runs in folders named by it.
        env: the environment's name (``filesystem``...).
        category: the task's category.
        instruction: what the agent is asked to do, in our own words.
        python_allowed: False for tasks whose instruction restricts Python (paper appendix B).
        template: the scenario template id (tasks from one template are grouped in analysis).
        budgets: default budgets.
        params: generator parameters (e.g. ``{"students": 75}``), part of the task's identity.
        metadata: what the environment records about the task beyond its identity, as plain
            JSON data (ALFWorld: cohort, task type, scene, game path, the excluded scenes in
            force, receptacles that share a place; users' own tasks: ``data_hashes``, the
            SHA-256 of each of the task's files, see :func:`changed_data`); empty for most
            environments.
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
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _a_name(cls, value: str) -> str:
        problem = name_problem(value)
        if problem is not None:
            raise ValueError(f"task id {value!r}: {problem}")
        return value


class Check(BaseModel):
    """One verifier check: pass or fail, and why."""

    name: str
    passed: bool
    reason: str = ""


class Verdict(BaseModel):
    """A verifier's verdict: success iff every check passed.

    Attributes:
        task_id: the task that was verified.
        checks: one check per requirement of the task, in the verifier's order.
        goal_actions: the actions the environment itself counted until its goal was first
            reached (ALFWorld: every action, invalid ones included, up to the game's win;
            paper Figure 2's thresholds); None when it keeps no such count or the goal was
            not reached.
        success: True when there is at least one check and every check passed.
    """

    task_id: str
    checks: list[Check]
    goal_actions: int | None = None

    @property
    def success(self) -> bool:
        """True when there is at least one check and every check passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)


def changed_data(recorded: Task, today: Task) -> list[str]:
    """The task files whose hashes differ between a recorded task and the same task today.

    Users' own tasks (MCPMark folders, task specs) record the SHA-256 of each of their files in
    ``metadata["data_hashes"]`` (the instruction, the verifier, the spec), so a replay sees that
    the task changed (paper A.4); the initial state is compared by ``task_data_hash``.

    Args:
        recorded: the task as its recording's ``run_start`` holds it.
        today: the same task built again.

    Returns:
        The files added, removed or changed, sorted; empty when the recording has no hashes.
    """
    before = recorded.metadata.get("data_hashes")
    after = today.metadata.get("data_hashes")
    if not isinstance(before, dict):
        return []
    now = after if isinstance(after, dict) else {}
    return sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))


AnswerKey = dict[str, Any]
"""What ``setup`` returns and ``verify`` checks against (JSON-serialisable)."""


class TaskError(ValueError):
    """Unknown task id, bad seed or size, or a workspace that cannot be created."""
