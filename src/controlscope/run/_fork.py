"""Branches by fork: a trajectory paused at a boundary goes on in forked copies of itself.

Every branch of a prefix starts from the same public state and environment state ``(h, s)``
(paper sections 3.1 and A.4). Re-running the prefix for every branch reconstructs them; a fork
copies them instead. At the boundary, with the worker paused waiting for the answer to the
pending call, the controller process (the trunk) takes, for each branch in turn:

1. a fork of the worker (:meth:`~controlscope.worker.WorkerSession.fork`: the fork supervisor
   lets exactly this one through; agent code still cannot create a process), waiting for the
   same answer in the same sandbox with the same namespace;
2. a fork of itself (``os.fork``): the child controller holds the trajectory's whole state as
   it stands (planner history, schedule, decisions, counts, the driver of the paused block)
   and goes on as the branch: its log is the branch's run directory (``run_start`` under the
   branch's condition, then the prefix's events as they were recorded), its worker the fork
   of step 1, its tool server a new one on the workspace;
3. the workspace as it was at the boundary: the child works in it; when the child has ended,
   the trunk puts the boundary's copy back for the next branch, and so for the worker's
   ``/tmp`` and ``/dev/shm``, which the worker's forks share (its sandbox's).

Branches run one after the other (each child is waited for, within the branch's wall-clock
budget plus :data:`CHILD_GRACE_S`). A fork is only possible where the worker's forks are
supervised (bwrap with the fork supervisor, Linux 5.9+) and where the environment's whole
state is its workspace directory (``state_in_workspace``): a server that keeps state in memory
would start afresh. :meth:`ForkPoint.unavailable` says why not; callers then replay the prefix.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlscope._proc import kill_below, reap_orphans
from controlscope._tree import copy_tree, refill_tree, remove_tree
from controlscope.core import (
    BranchOrigin,
    Condition,
    Deadline,
    ToolResult,
    ToolSchema,
    ToolServer,
    ToolServerError,
)
from controlscope.envs import Environment
from controlscope.review import Reviewer
from controlscope.worker import ForkError, OpenFiles, WorkerProcess, WorkerSession

CHILD_GRACE_S = 60.0
"""Seconds a branch's process may outlive its wall-clock budget before it is killed."""

INTERRUPT_GRACE_S = 5.0
"""Seconds an interrupted trunk gives a branch's process to record its end."""

INTERRUPT_SETTLE_S = 1.0
"""Seconds an interrupted trunk waits for a branch's process to end by itself (an interrupt
of the whole process group reached it too) before interrupting it (a branch already
interrupted takes no second interrupt, so this only saves a signal)."""

BRANCH_INTERRUPT = signal.SIGTERM
"""The signal a trunk interrupts its branch's process with (an interrupt the branch did not
get, the trunk's death). Not ``SIGINT``: a process started with ``SIGINT`` ignored (a
background job of a script) passes that on to its forks, and the branch would never end
recorded; a forked branch always takes this signal as an interrupt."""

INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM})
"""The signals that interrupt a run (the CLI turns ``SIGTERM`` into an interrupt)."""


class ServerSlot:
    """The trajectory's tool server, which a branch by fork replaces (a
    :class:`~controlscope.core.ToolServer` that forwards to the one it holds).

    Args:
        server: the server the trajectory starts with.
    """

    def __init__(self, server: ToolServer) -> None:
        self.held = server
        self.agent_roots = server.agent_roots
        self.server_info = server.server_info

    def hold(self, server: ToolServer) -> None:
        """Forward to ``server`` from now on; the one held before is forgotten, not closed
        (in a forked controller it is the trunk's)."""
        self.held = server
        self.agent_roots, self.server_info = server.agent_roots, server.server_info

    def list_tools(self) -> list[ToolSchema]:
        """The held server's tools."""
        return self.held.list_tools()

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        """One call on the held server (see :meth:`ToolServer.call`)."""
        return self.held.call(name, arguments, timeout_s=timeout_s)

    def close(self) -> None:
        """Stop the held server."""
        self.held.close()


class _Forgotten:
    """The trunk's tool server as a forked child holds it until its own has started: never
    spoken to and never closed (its session lives on a thread of the trunk's, absent here)."""

    def __init__(self, server: ToolServer) -> None:
        self.agent_roots, self.server_info = server.agent_roots, server.server_info

    def list_tools(self) -> list[ToolSchema]:
        raise ToolServerError("the branch's tool server did not start")

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        raise ToolServerError("the branch's tool server did not start")

    def close(self) -> None:
        """Nothing: the server is the trunk's."""


Relog = Callable[[Path, Condition, Reviewer | None, BranchOrigin], None]
"""Switches the trajectory's log to a branch's run directory: ``run_start`` under the
branch's condition, reviewer and origin, then the events recorded so far."""


@dataclass
class ForkPoint:
    """What a branch by fork replaces in a trajectory paused at a boundary (module docstring).

    Attributes:
        env: the environment (it starts each branch's server).
        session: the trajectory's worker session.
        slot: the trajectory's tool server.
        workspace: the task's workspace (the same path in every branch).
        relog: switches the log to a branch's run directory.
        deadline: the trajectory's wall-clock ceiling (each branch gets what was left of it
            at the boundary, as a branch that replays its prefix has its own).
    """

    env: Environment
    session: WorkerSession
    slot: ServerSlot
    workspace: Path
    relog: Relog
    deadline: Deadline | None = None
    _saved: Path | None = None
    _left_s: float = 0.0
    _scratch: list[str] = field(default_factory=list)
    _files: OpenFiles = field(default_factory=dict)
    _mask: set[int | signal.Signals] = field(default_factory=set)

    def unavailable(self) -> str | None:
        """Why branches cannot be forked from this trajectory (None when they can)."""
        reason = env_unforkable(self.env)
        if reason is not None:
            return reason
        if not self.session.forks:
            return (
                f"the worker's forks are not supervised here (isolation "
                f"{self.session.isolation}; bwrap and Linux 5.9+ are needed)"
            )
        return None

    def save(self) -> None:
        """Copy the workspace and the worker's scratch directories (its ``/tmp`` and
        ``/dev/shm``, which its forks share) as they stand at the boundary (once, before the
        first branch).

        Raises:
            OSError: a copy failed (nothing of it is left).
            ForkError: the worker's scratch directories cannot be found.
        """
        if self._saved is not None:
            return
        saved = self.workspace.with_name(self.workspace.name + ".at-boundary")
        self._scratch = self.session.scratch_dirs()
        self._files = self.session.open_files()
        saved.mkdir()
        try:
            copy_tree(self.workspace, saved / "workspace")
            for i, scratch in enumerate(self._scratch):
                copy_tree(scratch, saved / f"scratch-{i}")
        except OSError:
            remove_tree(saved)
            raise
        self._saved = saved
        if self.deadline is not None:
            self._left_s = self.deadline.remaining()

    def restore(self) -> None:
        """Put the boundary's workspace and scratch directories back (after a branch changed
        or removed them)."""
        assert self._saved is not None, "save() first"
        remove_tree(self.workspace)
        copy_tree(self._saved / "workspace", self.workspace)
        for i, scratch in enumerate(self._scratch):
            refill_tree(self._saved / f"scratch-{i}", scratch)

    def discard(self) -> None:
        """Remove the boundary's copies."""
        saved, self._saved = self._saved, None
        if saved is not None:
            remove_tree(saved)

    def fork(self) -> tuple[int, WorkerProcess]:
        """Fork the worker and this process at the boundary.

        Returns:
            In the trunk, the child process's pid and the forked worker (the trunk kills it
            once the child has ended); in the child, 0 and the forked worker, which the child
            must then :meth:`take_over` with (and nothing else of the trunk's).

        Raises:
            ForkError: the worker or this process could not be forked.
        """
        worker = self.session.fork(files=self._files)  # each fork: the boundary's positions
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # what the trunk printed is not printed again by the child
        # An interrupt must not reach the child while it still holds the trunk's log, worker
        # and server: the child takes it once it is the branch (take_over).
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
        try:
            pid = os.fork()
        except OSError as err:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            worker.kill()
            raise ForkError(f"the controller could not fork: {err}") from err
        if pid != 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        else:  # interrupts stay blocked until take_over
            interruptible_branch()
        return pid, worker

    def take_over(
        self,
        worker: WorkerProcess,
        out_dir: Path,
        condition: Condition,
        reviewer: Reviewer | None,
        origin: BranchOrigin,
    ) -> None:
        """In a forked child, go on as the branch: its log is ``out_dir`` (``run_start`` under
        ``condition``, ``reviewer`` and ``origin``, then the prefix's events), its worker the
        fork, its server a new one on the workspace, its wall-clock ceiling what the trunk
        had left at the boundary; the trajectory then goes on from the boundary.

        Raises:
            FileExistsError: ``out_dir`` holds a log.
            ToolServerError: the branch's server did not start (the branch ends recorded).
        """
        try:
            if self.deadline is not None:  # the branches before ran on the trunk's clock
                self.deadline.at = time.monotonic() + self._left_s
            self.slot.hold(_Forgotten(self.slot.held))  # the trunk's: never closed here
            self.session.take_over(worker, self.slot)
            self.relog(out_dir, condition, reviewer, origin)
        finally:  # an interrupt that came since the fork is taken here, as the branch
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        self.slot.hold(self.env.start_server(self.workspace))

    def wait(self, pid: int, worker: WorkerProcess, timeout_s: float) -> str | None:
        """Wait for the branch's process ``pid`` (at most ``timeout_s``, then kill it), kill
        its worker, and put the boundary's workspace back.

        Returns:
            Why the branch's process ended abnormally (killed, a signal, a non-zero status),
            or None when it exited normally.
        """
        try:
            problem = reap(pid, timeout_s)
        finally:
            worker.kill()
        self.restore()
        return problem


def env_unforkable(env: Environment) -> str | None:
    """Why no trajectory of ``env`` can be forked (its state is more than its workspace
    directory: ``Environment.state_in_workspace`` is not set), or None."""
    if env.state_in_workspace:
        return None
    return (
        f"the {env.name} environment's state is not only its workspace directory (its server "
        "would start afresh in a fork)"
    )


def reap(pid: int, timeout_s: float) -> str | None:
    """Wait for the branch's process ``pid`` (a child of this one); kill it after
    ``timeout_s`` (or when this wait is interrupted, once it has been interrupted too and had
    :data:`INTERRUPT_GRACE_S` to record its end).

    Returns:
        What went wrong (killed, a signal, a non-zero status), or None.

    Raises:
        KeyboardInterrupt: this wait was interrupted (the child has ended by then).
    """
    fd = os.pidfd_open(pid)
    try:
        try:
            ended = bool(select.select([fd], [], [], max(timeout_s, 0.0))[0])
        except BaseException:
            below = _interrupt(pid, fd)
            os.waitpid(pid, 0)
            reap_orphans(below)
            raise
        if not ended:
            below = _kill(pid, fd)
            os.waitpid(pid, 0)
            reap_orphans(below)
            return f"the branch's process was killed after {timeout_s:g} s"
        _, status = os.waitpid(pid, 0)
        reap_orphans()  # its servers' sandbox inits, when they were handed to this process
    finally:
        os.close(fd)
    if os.WIFSIGNALED(status):
        return f"the branch's process was killed by signal {os.WTERMSIG(status)}"
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"the branch's process exited with status {code}"


def interruptible_branch() -> None:
    """In a branch's process (forked at the boundary, or to replay its prefix apart), with
    interrupts still blocked: :data:`BRANCH_INTERRUPT` interrupts it whatever the trunk does
    with that signal, ``SIGINT`` (a Ctrl-C) too unless the trunk ignores it, and the first
    interrupt is the only one (:func:`_interrupted`)."""
    signal.signal(BRANCH_INTERRUPT, _interrupted)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _interrupted)


def _interrupted(signum: int, frame: object) -> None:
    """A branch's process is interrupted: it records its end (``KeyboardInterrupt``) and
    takes no further interrupt while it does (its trunk may forward one a Ctrl-C already
    delivered; the trunk kills it after :data:`INTERRUPT_GRACE_S`)."""
    for sig in INTERRUPTS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def _interrupt(pid: int, fd: int) -> list[tuple[int, str]]:
    """Interrupt the child ``pid`` (pidfd ``fd``) as this process was (a Ctrl-C reaches both; a
    SIGTERM sent to this process alone does not reach it) with :data:`BRANCH_INTERRUPT`: it
    records its end, or is killed after :data:`INTERRUPT_GRACE_S`. Returns the processes below
    it that were killed."""
    if select.select([fd], [], [], INTERRUPT_SETTLE_S)[0]:
        return []  # the interrupt reached it too, and it has ended
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(fd, BRANCH_INTERRUPT)
    if not select.select([fd], [], [], INTERRUPT_GRACE_S)[0]:
        return _kill(pid, fd)
    return []


def _kill(pid: int, fd: int) -> list[tuple[int, str]]:
    """SIGKILL the child ``pid`` (pidfd ``fd``) after the processes below it (its server's
    sandbox first, so that none is orphaned); returns those, for :func:`reap_orphans`."""
    below = kill_below(pid)
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    return below
