"""The pausable worker: agent blocks run isolated and stop at every primitive call.

Public API: :class:`WorkerSession` (the controller side: one worker process, one namespace per
trajectory), its settings :class:`Limits` and callbacks :class:`BoundaryHandler`, the task's
:class:`ExecutionClock`, the agent-facing exceptions :class:`ToolError` and
:class:`BudgetExhausted` (the same classes exist in the agent namespace), the tool proxies
(:func:`generate_proxies`) and the isolation helpers. The records the worker exchanges with
the other layers (boundaries, primitive calls, block results, operations) live in
:mod:`controlscope.core`.

Inside, each private module has one job: ``_process`` owns the worker process, ``_clock`` the
execution clock, ``_driver`` drives one block's messages, ``_site`` derives where a call is made
from the block sources the controller sent (checking the worker's claims), ``_apply`` applies an
operation at a boundary, ``_guard`` checks a block's code under the V2 app protocol,
``_session`` composes them; ``_runtime`` (with ``_snapshot``, ``_hardening`` and the
block-data constant walk of :mod:`controlscope.core`, ``core/_block_data.py``) is the program
that runs inside the sandbox, ``_channel`` the controller's end of its pipes, ``_sandbox`` the
launch command and the runtime's bundle, ``_fork`` the fork supervisor (the one way a paused
worker is forked; agent code cannot create a process; :data:`OpenFiles` is what a fork
reopens) and ``_proxies`` the proxy generator.
"""

from controlscope.core import Isolation
from controlscope.worker._clock import ExecutionClock
from controlscope.worker._fork import OpenFiles
from controlscope.worker._process import (
    CONTROLLER_SPIN_S,
    WORKER_SPIN_S,
    ForkError,
    WorkerProcess,
    WorkerStartError,
)
from controlscope.worker._proxies import ProxySet, generate_proxies
from controlscope.worker._runtime import BudgetExhausted, ToolError
from controlscope.worker._sandbox import isolation_available, resolve_isolation
from controlscope.worker._session import WorkerSession, replacement_id
from controlscope.worker._types import BoundaryHandler, EndPlan, Limits

__all__ = [
    "CONTROLLER_SPIN_S",
    "WORKER_SPIN_S",
    "BoundaryHandler",
    "BudgetExhausted",
    "EndPlan",
    "ExecutionClock",
    "ForkError",
    "Isolation",
    "Limits",
    "OpenFiles",
    "ProxySet",
    "ToolError",
    "WorkerProcess",
    "WorkerSession",
    "WorkerStartError",
    "generate_proxies",
    "isolation_available",
    "replacement_id",
    "resolve_isolation",
]
