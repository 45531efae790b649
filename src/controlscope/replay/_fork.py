"""Branches by fork from one replayed prefix (paper sections 3.1, 3.2 and A.4).

The prefix is replayed once, every request and call checked, in a trajectory of its own (the
trunk, recorded in ``OUT/prefix``); at the branches' boundary the trunk forks once per branch
(:class:`controlscope.run.ForkPoint`): each child goes on as one branch, recorded in its own run
directory exactly as a branch started by prefix replay is (``run_start`` under the branch's
condition, the prefix's events, the ``branch_point``, then the branch), with ``fork`` as its
origin's mechanism. The trunk waits for each child in turn and puts the boundary's workspace
back before the next.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from controlscope.core import BranchOrigin, BranchPurpose, ChatModel, ToolServerError
from controlscope.record import SUMMARY_FILE, iter_events, summarize, write_summary
from controlscope.replay._hook import Plan, PrefixHook
from controlscope.replay._recording import Recording
from controlscope.replay._run import Outcome, run_from_prefix
from controlscope.review import Reviewer
from controlscope.run import (
    BRANCH_INTERRUPT,
    CHILD_GRACE_S,
    ForkPoint,
    StopRun,
    TrajectoryControl,
    env_unforkable,
)
from controlscope.worker import ForkError, WorkerProcess

_PR_SET_PDEATHSIG = 1

PREFIX_DIR = "prefix"
"""The run directory, under a branch set's directory, of the trunk: the prefix replayed once."""


@dataclass
class ForkedBranch:
    """One branch the trunk forks.

    Attributes:
        plan: the branch's plan (its condition, and its schedule after the boundary).
        reviewer: the branch's reviewer (None for Keep).
        out: the branch's run directory.
        origin: where it comes from (``run_start``'s ``branch``).
        forked: whether a process was forked for it.
        problem: why its process ended abnormally (killed, a signal, a non-zero status).
    """

    plan: Plan
    reviewer: Reviewer | None
    out: Path
    origin: BranchOrigin
    forked: bool = False
    problem: str | None = None


class Fanout:
    """The branches a trunk forks at its plan's boundary (:meth:`split`, called by the
    :class:`PrefixHook` there).

    Args:
        branches: the branches, in order.

    Attributes:
        branches: the branches.
        child: the branch this process is (set in a forked child; None in the trunk).
        failure: why forking stopped early (the worker could not be forked), if it did.
    """

    def __init__(self, branches: list[ForkedBranch]) -> None:
        self.branches = branches
        self.child: ForkedBranch | None = None
        self.failure: str | None = None
        self._trunk = os.getpid()
        self._point: ForkPoint | None = None

    def split(self, hook: PrefixHook, control: TrajectoryControl) -> None:
        """Fork every branch at this boundary, one after the other; return in a child (as its
        branch), end the trunk (``StopRun``) once every child has ended.

        Raises:
            StopRun: in the trunk, always.
        """
        point = control.fork_point
        self.failure = "the trajectory has no fork point" if point is None else point.unavailable()
        if point is None or self.failure is not None:
            raise StopRun("prefix_end", f"no branch forked: {self.failure}")
        try:
            point.save()
        except (OSError, ForkError) as err:
            self.failure = f"the state at the boundary could not be copied: {err}"
            raise StopRun("prefix_end", f"no branch forked: {self.failure}") from err
        self._trunk, self._point = os.getpid(), point
        try:
            for branch in self.branches:
                try:
                    pid, worker = point.fork()
                except ForkError as err:
                    self.failure = str(err)
                    break
                if pid == 0:  # the branch's process: it ends in run_from_prefix, whatever
                    self.child = branch  # happens from here on
                    hook.become(branch.plan, branch.reviewer)
                    _take_over(point, worker, branch)
                    die_with(self._trunk)
                    return
                _wait_for(point, branch, pid, worker)
        finally:
            if self.child is None:
                point.discard()
        forked = sum(b.forked for b in self.branches)
        raise StopRun(
            "prefix_end",
            f"the prefix replay reached boundary {hook.position} with {hook.verified_calls} "
            f"call(s) checked against the recording; {forked} branch(es) forked from it",
        )

    def exit_child(self, failed: bool) -> None:
        """End a forked child, once its branch is recorded (never returns; nothing of the
        trunk's exit handlers runs twice). A child whose trunk died first removes the
        boundary's copies (the trunk would have)."""
        if os.getppid() != self._trunk and self._point is not None:
            with contextlib.suppress(OSError):
                self._point.discard()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(1 if failed else 0)


def _take_over(point: ForkPoint, worker: WorkerProcess, branch: ForkedBranch) -> None:
    """The child's side of a fork: go on as ``branch``.

    Raises:
        StopRun: the branch's server did not start (``environment_error``, recorded in the
            branch's log).
    """
    condition = branch.plan.condition
    try:
        point.take_over(worker, branch.out, condition, branch.reviewer, branch.origin)
    except ToolServerError as err:
        raise StopRun("environment_error", f"the tool server did not start: {err}") from err


def _wait_for(point: ForkPoint, branch: ForkedBranch, pid: int, worker: WorkerProcess) -> None:
    """The trunk's side of a fork: wait for the branch's process ``pid`` to end, within the
    branch's wall-clock budget plus :data:`CHILD_GRACE_S`; a branch whose process ended
    abnormally, or was interrupted with the trunk, is recorded as far as its log goes."""
    branch.forked = True
    wall = branch.plan.condition.budgets.wall_seconds
    try:
        branch.problem = point.wait(pid, worker, wall + CHILD_GRACE_S)
    except BaseException:  # interrupted: the branch is recorded as it ended
        if not (branch.out / SUMMARY_FILE).is_file():
            close_record(branch.out)
        raise
    if branch.problem is not None:
        close_record(branch.out)


def die_with(trunk: int) -> None:
    """Make this forked process interrupted (:data:`BRANCH_INTERRUPT`: it records its end)
    when the trunk ``trunk`` dies, and at once if it has died already (a trunk killed outright
    records nothing more and cannot end its branch)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, BRANCH_INTERRUPT, 0, 0, 0)
    if os.getppid() != trunk:
        raise KeyboardInterrupt("the trunk died")


def close_record(out: Path) -> None:
    """A branch whose process died: its summary from its log as far as it goes (it says the
    log has no ``run_end``), so that the branch is counted, not lost."""
    if (out / "events.jsonl").is_file():
        write_summary(out, summarize(iter_events(out)))


def fork_branches(
    recording: Recording,
    targets: list[tuple[Path, Plan]],
    *,
    position: int,
    out: Path,
    planner: ChatModel | None,
    reviewer: Reviewer | None,
    workspace_root: Path | None,
    trunk: Plan | None = None,
    purpose: BranchPurpose = "branch",
) -> tuple[Outcome | None, Fanout]:
    """Replay the prefix to ``position`` once (the trunk, in ``out/prefix``) and fork each
    target there: its run directory and its plan.

    ``trunk`` is the trunk's plan (default: the recording's condition to ``position``); a
    second schedule branched at its divergence point gives its own plan (``decides``), so
    that its schedule decides, and is checked, at every prefix boundary in the trunk and
    goes on in the branch as it stands there. ``purpose`` is the branches' origin's
    (``branch``; ``divergence`` for a second schedule).

    Returns:
        The trunk's outcome (None when the environment cannot be forked: nothing ran) and the
        fanout: which branches were forked, how their processes ended, why forking stopped.
        In a forked child this function does not return (its process ends).
    """
    origin = BranchOrigin(
        source_run=str(recording.run_dir),
        call_index=recording.boundaries[position][0].call_index,
        boundary=position,
        prefix_hash=recording.prefix_hash(position),
        mechanism="fork",
        purpose=purpose,
    )
    fanout = Fanout([ForkedBranch(plan, reviewer, path, origin) for path, plan in targets])
    fanout.failure = env_unforkable(recording.env)
    if fanout.failure is not None:
        return None, fanout
    outcome = run_from_prefix(
        recording,
        trunk or Plan(position=position, condition=recording.condition),
        out=out / PREFIX_DIR,
        purpose="prefix",
        planner=planner,
        workspace_root=workspace_root,
        fanout=fanout,
    )
    return outcome, fanout
