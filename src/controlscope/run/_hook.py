"""A hook that steers one trajectory from outside the run package.

Prefix replays and branches (:mod:`controlscope.replay`, paper sections 3.1 and 3.3) run an
ordinary trajectory whose first part answers from a recording: at every boundary a hook checks
what the trajectory did against the recording and, at the branch's boundary, hands the
trajectory the branch's condition, schedule and reviewer. The hook sees the trajectory at four
points through :class:`TrajectoryControl` (what the controller lets it read and do); it may end
the trajectory there by raising :class:`StopRun`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from controlscope.core import BlockResult, Boundary, Condition, EndReason, Event, PrimitiveCall
from controlscope.review import PublicState, Reviewer
from controlscope.run._fork import ForkPoint
from controlscope.schedule import Schedule


class TrajectoryControl(Protocol):
    """What a hook may read and do of the trajectory it steers (the
    :class:`~controlscope.run.Controller` is one)."""

    @property
    def condition(self) -> Condition:
        """The condition the trajectory is reviewed under now."""
        ...

    @property
    def fork_point(self) -> ForkPoint | None:
        """What a branch by fork replaces at a boundary; None where the trajectory has none."""
        ...

    def steer(
        self,
        *,
        condition: Condition | None = None,
        schedule: Schedule | None = None,
        reviewer: Reviewer | None = None,
    ) -> None:
        """Change the trajectory's condition, schedule or reviewer from now on (what is
        given replaces what was)."""
        ...

    def public_state(self, boundary: Boundary) -> PublicState:
        """The public state ``h`` at ``boundary`` (paper 3.1, A.1), as a review would see it."""
        ...

    def sink(self, event: Event) -> None:
        """Record ``event`` in the trajectory's log."""
        ...


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
    """Called by the trajectory's controller at fixed points of it.

    Any method may raise :class:`StopRun` (the run ends graded) or a
    :class:`~controlscope.record.ReplayMismatch` (the run ends ``replay_diverged``).
    """

    def attach(self, control: TrajectoryControl, workspace: Path) -> None:
        """Called once, after ``run_start`` is written and before the first planning turn.

        Args:
            control: the trajectory (its condition, schedule and reviewer may be steered).
            workspace: the task's workspace (the tool server's directory).
        """
        ...

    def before_boundary(self, control: TrajectoryControl, boundary: Boundary) -> None:
        """Called at every boundary before the schedule is asked.

        Args:
            control: the trajectory.
            boundary: the pending call.
        """
        ...

    def after_call(self, control: TrajectoryControl, call: PrimitiveCall) -> None:
        """Called after every primitive call is logged.

        Args:
            control: the trajectory.
            call: the call as made, with its observation.
        """
        ...

    def after_block(self, control: TrajectoryControl, result: BlockResult) -> None:
        """Called after every block's end is logged (cancellation receipts included).

        Args:
            control: the trajectory.
            result: how the block ended.
        """
        ...

    def finish(self, control: TrajectoryControl) -> None:
        """Called when the planner loop has ended (not after :class:`StopRun`).

        Args:
            control: the trajectory.
        """
        ...
