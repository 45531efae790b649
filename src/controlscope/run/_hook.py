"""A hook that steers one trajectory from outside the run package.

Prefix replays and branches (:mod:`controlscope.replay`, paper sections 3.1 and 3.3) run an
ordinary trajectory whose first part answers from a recording: at every boundary a hook checks
what the trajectory did against the recording and, at the branch's boundary, hands the
controller the branch's condition, schedule and reviewer. The hook sees the
:class:`~controlscope.run._controller.Controller` at four points; it may end the trajectory
there by raising :class:`StopRun`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from controlscope.core import BlockResult, Boundary, EndReason, PrimitiveCall

if TYPE_CHECKING:
    from controlscope.run._controller import Controller


class StopRun(Exception):
    """Raised by a hook to end the trajectory where it is; the workspace is graded as it
    stands and the run ends with ``reason``.

    Args:
        reason: the run's end reason.
        detail: the reason in words.

    Attributes:
        reason: the run's end reason.
        detail: the reason in words.
    """

    def __init__(self, reason: EndReason, detail: str) -> None:
        super().__init__(detail)
        self.reason: EndReason = reason
        self.detail = detail


class TrajectoryHook(Protocol):
    """Called by the controller at fixed points of one trajectory.

    Any method may raise :class:`StopRun` (the run ends graded) or a
    :class:`~controlscope.record.ReplayMismatch` (the run ends ``replay_diverged``).
    """

    def attach(self, controller: Controller, workspace: Path) -> None:
        """Called once, after ``run_start`` is written and before the first planning turn.

        Args:
            controller: the trajectory's controller (its condition, schedule and reviewer may
                be replaced).
            workspace: the task's workspace (the tool server's directory).
        """
        ...

    def before_boundary(self, controller: Controller, boundary: Boundary) -> None:
        """Called at every boundary before the schedule is asked.

        Args:
            controller: the trajectory's controller.
            boundary: the pending call.
        """
        ...

    def after_call(self, controller: Controller, call: PrimitiveCall) -> None:
        """Called after every primitive call is logged.

        Args:
            controller: the trajectory's controller.
            call: the call as made, with its observation.
        """
        ...

    def after_block(self, controller: Controller, result: BlockResult) -> None:
        """Called after every block's end is logged (cancellation receipts included).

        Args:
            controller: the trajectory's controller.
            result: how the block ended.
        """
        ...

    def finish(self, controller: Controller) -> None:
        """Called when the planner loop has ended (not after :class:`StopRun`).

        Args:
            controller: the trajectory's controller.
        """
        ...
