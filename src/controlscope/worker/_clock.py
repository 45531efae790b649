"""The one execution clock of a task: what the time budgets count (paper section 4).

Execution time is the time the worker runs or is waited for and the time the tool server takes
to answer a primitive call; review time (the handler deciding at a boundary), planning and
logging are never charged. The session charges the clock around every channel wait and every
tool call, and nowhere else, so the clock is the single account of the task's execution budget:
the run loop asks it whether the budget is spent instead of timing itself.

The run's wall-clock ceiling (:class:`~controlscope.core.Deadline`) counts everything, review
time included; when it is nearer than the execution budgets, it is what the clock's remainder
says, so no wait of the worker or the tool server outlives the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from controlscope.core import Deadline
from controlscope.worker._types import Limits

BudgetKind = Literal["cancel", "block", "task", "wall"]
"""Which budget binds: the cancellation grace of a replaced block, the block's, the task's, or
the run's wall-clock ceiling."""


class ExecutionClock:
    """Execution seconds of one task and of its running block, against their budgets.

    Three budgets are counted, all in execution seconds: the task's (all blocks), the running
    block's, and, once the running block is being cancelled (``replace_workflow``), the grace it
    has to unwind. Wall time and review time are not this clock's business
    (``BlockResult.wall_s`` is wall time).

    Args:
        block_s: execution seconds one block may take (``Limits.block_exec_s``).
        task_s: execution seconds of the whole task (``Limits.task_exec_s``).
        cancel_grace_s: execution seconds a cancelled block may take to unwind, counted from
            its cancellation (``Limits.cancel_grace_s``).
        deadline: the run's wall-clock ceiling, if any.
    """

    def __init__(
        self,
        *,
        block_s: float,
        task_s: float,
        cancel_grace_s: float,
        deadline: Deadline | None = None,
    ) -> None:
        self.deadline = deadline
        self.block_budget_s = block_s
        self.task_budget_s = task_s
        self.cancel_grace_s = cancel_grace_s
        self._task_s = 0.0
        self._block_s = 0.0
        self._cancel_s: float | None = None

    @classmethod
    def from_limits(cls, limits: Limits, deadline: Deadline | None = None) -> ExecutionClock:
        """The clock for a session's :class:`Limits` (and the run's ceiling, if any)."""
        return cls(
            block_s=limits.block_exec_s,
            task_s=limits.task_exec_s,
            cancel_grace_s=limits.cancel_grace_s,
            deadline=deadline,
        )

    @property
    def task_s(self) -> float:
        """Execution seconds spent so far in the task (all blocks)."""
        return self._task_s

    @property
    def block_s(self) -> float:
        """Execution seconds spent so far by the running (or last) block."""
        return self._block_s

    @property
    def cancelling(self) -> bool:
        """Whether the running block is being cancelled (its grace is counting)."""
        return self._cancel_s is not None

    @property
    def task_spent(self) -> bool:
        """Whether the task's execution budget is spent: no further block may run."""
        return self._task_s >= self.task_budget_s

    def start_block(self) -> None:
        """A block starts: its own count restarts at zero (the task's goes on)."""
        self._block_s = 0.0
        self._cancel_s = None

    def start_cancel(self) -> None:
        """The running block is being cancelled: its grace starts counting now."""
        if self._cancel_s is None:
            self._cancel_s = 0.0

    def charge(self, seconds: float) -> None:
        """Add execution seconds to the task, the block and (when cancelling) the grace."""
        self._task_s += seconds
        self._block_s += seconds
        if self._cancel_s is not None:
            self._cancel_s += seconds

    @contextmanager
    def running(self) -> Iterator[None]:
        """Charge the time spent in the ``with`` body (also when it raises)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.charge(time.perf_counter() - t0)

    def remaining(self) -> tuple[float, BudgetKind]:
        """Execution seconds the running block has left, and which budget binds.

        Returns:
            ``(seconds, kind)``: while cancelling, what is left of the grace (``"cancel"``);
            otherwise the smaller of the block's and the task's remainders, ``"block"`` on a
            tie; the run's wall-clock ceiling (``"wall"``) when it is nearer. ``seconds`` may
            be negative once a budget is overrun.
        """
        left: tuple[float, BudgetKind]
        if self._cancel_s is not None:
            left = self.cancel_grace_s - self._cancel_s, "cancel"
        else:
            block_left = self.block_budget_s - self._block_s
            task_left = self.task_budget_s - self._task_s
            left = min(block_left, task_left), ("block" if block_left <= task_left else "task")
        if self.deadline is not None:
            wall_left = self.deadline.remaining()
            if wall_left < left[0]:
                return wall_left, "wall"
        return left
