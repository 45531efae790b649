"""The pausable worker: agent blocks run isolated and stop at every primitive call.

Public API: :class:`WorkerSession` (the controller side), the agent-facing exceptions
:class:`ToolError` and :class:`BudgetExhausted` (the same classes exist in the agent namespace),
and the isolation helpers. The fixed records live in :mod:`controlscope.worker.types`.
"""

from controlscope.core import Isolation
from controlscope.worker._proxies import ProxySet, generate_proxies
from controlscope.worker._runtime import BudgetExhausted, ToolError
from controlscope.worker._sandbox import isolation_available, resolve_isolation
from controlscope.worker.session import WorkerSession, WorkerStartError, replacement_id

__all__ = [
    "BudgetExhausted",
    "Isolation",
    "ProxySet",
    "ToolError",
    "WorkerSession",
    "WorkerStartError",
    "generate_proxies",
    "isolation_available",
    "replacement_id",
    "resolve_isolation",
]
