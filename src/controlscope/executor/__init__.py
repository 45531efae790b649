"""The reviewed executor: another agent framework's code blocks run under review.

Public API: :class:`Executor` (one isolated worker and the session's tools for an agent's
session; :meth:`Executor.execute` / :meth:`Executor.aexecute` run one block), what a block
returns (:class:`Execution`, :class:`Decision`), its errors (:class:`ExecutorError`,
:class:`ExecutorClosed`), and :func:`render_signatures` (the tools as the planner's prompt
shows them, for another framework's system prompt).
"""

from controlscope.executor._execution import Decision, Execution
from controlscope.executor._executor import (
    CLOSE_GRACE_S,
    DEFAULT_GOAL,
    Executor,
    ExecutorClosed,
    ExecutorError,
)
from controlscope.planner import render_signatures

__all__ = [
    "CLOSE_GRACE_S",
    "DEFAULT_GOAL",
    "Decision",
    "Execution",
    "Executor",
    "ExecutorClosed",
    "ExecutorError",
    "render_signatures",
]
