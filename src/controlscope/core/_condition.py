"""The condition one trajectory runs under: what the paper compares across branches and panels.

A condition fixes the granted scope, the schedule, the reviewer's view, the replacement boundary,
how the planner and the reviewer answer, the sampling settings both roles use and the budgets
(paper sections 3.1, 3.2, 4 and A.1-A.3). It is written whole into the log's ``run_start`` event,
so a recorded run says exactly what it was; :class:`controlscope.run.RunSpec` resolves one from
user options.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from controlscope.core._execution import ReplaceBoundary, View
from controlscope.core._models import DEFAULT_MAX_TOKENS
from controlscope.core._operations import Scope, ScopeName
from controlscope.core._tasks import TaskBudgets

PlannerFormat = Literal["tools", "fenced"]
"""How the planner emits a block: a native ``execute_python`` tool call (several in one reply
are queued blocks), or one fenced ```python block per reply (for models without tool calling)."""

PLANNER_FORMATS: tuple[PlannerFormat, ...] = get_args(PlannerFormat)
"""Every planner format."""

DecisionMode = Literal["tools", "json"]
"""How the reviewer answers: one call of a native operation tool, or one JSON decision object
decoded under a schema (paper A.3: both carry the same operation schema)."""

DECISION_MODES: tuple[DecisionMode, ...] = get_args(DecisionMode)
"""Every decision mode."""

IsolationRequest = Literal["auto", "bwrap", "none"]
"""The worker isolation asked for: ``auto`` (bubblewrap when it works, else none, loudly),
``bwrap`` (required) or ``none``."""


class Condition(BaseModel):
    """The condition a task runs under (recorded in ``run_start``).

    Attributes:
        scope: the granted scope (paper section 3.1).
        schedule: the schedule's canonical spec (``never``, ``continuous``, ``per_block``,
            ``once``, ``once:K``, ``midpoint:N``, ``protect:n``, ``retain_first``; see
            :func:`controlscope.schedule.parse_schedule`).
        view: the reviewer's view of the public state (paper A.3).
        replace_boundary: what a replacement replaces: the rest of the block or of the reply
            (paper A.1).
        planner_format: how the planner emits blocks.
        review_mode: how the reviewer answers.
        temperature: sampling temperature of both roles (paper section 4: 0.7).
        max_tokens: per-request output cap in tokens (paper section 4: 16,384).
        draw: the reviewer draw index (separately sampled reviews never share a cache entry).
        budgets: primitive calls, planning turns and execution seconds (paper section 4).
        block_exec_s: execution seconds one block may run before its worker is killed.
        isolation: the worker isolation asked for.
        worker_memory_mb: the worker's whole memory in MiB (address space, ``/tmp`` and
            ``/dev/shm``; see ``controlscope.worker.Limits``).

    Raises:
        pydantic.ValidationError: a value out of range (negative temperature, draw or budget, a
            token cap below 1, a non-finite number).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    scope: ScopeName = Scope.FULL
    schedule: str = "continuous"
    view: View = "with_feedback"
    replace_boundary: ReplaceBoundary = "reply"
    planner_format: PlannerFormat = "tools"
    review_mode: DecisionMode = "tools"
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    draw: int = Field(default=0, ge=0)
    budgets: TaskBudgets = Field(default_factory=TaskBudgets)
    block_exec_s: float = Field(default=300.0, gt=0.0)
    isolation: IsolationRequest = "auto"
    worker_memory_mb: int = Field(default=2048, ge=128)

    @field_validator("temperature", "block_exec_s")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value
