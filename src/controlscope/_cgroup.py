"""A cap on how many processes a confined third-party command may run: a pids cgroup of its own.

bubblewrap gives a command a process namespace, not a bound on its processes, and the
process-count rlimit (``RLIMIT_NPROC``) does not bind root, whose processes the kernel never
counts against it. A verifier or server that forks without end would then take every process
id of the machine. A pids cgroup binds any user: each command started through a
:class:`ProcessCap` joins a cgroup of its own whose ``pids.max`` is the cap (threads count), so
a fork beyond it fails with ``EAGAIN``, for the command and everything it starts.

A cgroup can be made where this process may write a pids controller's hierarchy: cgroup v1's
``pids`` hierarchy, or a cgroup v2 hierarchy whose root delegates the ``pids`` controller
(``cgroup.subtree_control``); both as mounted (``/proc/mounts``). Elsewhere commands run
without the cap, and :func:`cap_problem` says why (logged once).

This module imports nothing from controlscope: it sits beside :mod:`controlscope._bwrap`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PREFIX", "ProcessCap", "cap_problem", "pids_hierarchy"]

log = logging.getLogger(__name__)

PREFIX = "controlscope-"
"""The start of the name of every cgroup made here: ``controlscope-<pid>-<n>``."""

#: The command that moves itself into the cgroup (``$0``: its ``cgroup.procs``), then becomes
#: the confined command; a failed move stops it before the command runs.
_JOIN = 'echo $$ > "$0" && exec "$@"'
_counter = itertools.count()


@functools.cache
def pids_hierarchy() -> Path | None:
    """The pids controller's hierarchy this process may make cgroups in (checked once), or
    None."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) < 4 or not os.access(fields[1], os.W_OK):
            continue
        root = Path(fields[1])
        if fields[2] == "cgroup" and "pids" in fields[3].split(","):
            return root
        if fields[2] == "cgroup2" and _delegates_pids(root):
            return root
    return None


def _delegates_pids(root: Path) -> bool:
    try:
        return "pids" in (root / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


@functools.cache
def cap_problem() -> str | None:
    """Why commands cannot be given a process cap here (checked once, logged as a warning), or
    None."""
    cap = ProcessCap(1)
    problem = cap.problem
    cap.close()
    if problem is not None:
        log.warning("third-party commands run without a cap on their processes: %s", problem)
    return problem


class ProcessCap:
    """A pids cgroup for one command (or none, where :func:`cap_problem` says why).

    Use :meth:`command` to start the command inside it, and :meth:`close` once the command and
    everything it started are gone (the cgroup is then removed).

    Attributes:
        path: the cgroup's folder, or None when there is no cap here.
        max_processes: the cap (processes and threads together).
        problem: why there is no cap, or None.
    """

    def __init__(self, max_processes: int) -> None:
        """Make the cgroup, when the machine allows one (never raises: without one, ``path``
        is None and ``problem`` says why).

        Args:
            max_processes: the most processes and threads the command may run at once.
        """
        self.max_processes = max_processes
        self.path: Path | None = None
        self.problem: str | None = (
            "no pids cgroup hierarchy this process may write (cgroup v1's pids, or v2 with pids)"
        )
        hierarchy = pids_hierarchy()
        if hierarchy is None:
            return
        _sweep(hierarchy)
        path = hierarchy / f"{PREFIX}{os.getpid()}-{next(_counter)}"
        try:
            path.mkdir()
        except OSError as err:
            self.problem = f"cannot make a pids cgroup: {err}"
            return
        try:
            (path / "pids.max").write_text(str(max_processes))
        except OSError as err:
            self.problem = f"cannot set {path}/pids.max: {err}"
            path.rmdir()
            return
        self.path, self.problem = path, None

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` made to join the cgroup before it starts (unchanged without a cap)."""
        if self.path is None:
            return list(argv)
        return ["/bin/sh", "-c", _JOIN, str(self.path / "cgroup.procs"), *argv]

    def close(self, wait_s: float = 2.0) -> None:
        """Remove the cgroup once its processes are gone (they may take a moment to die after
        a kill); one still busy after ``wait_s`` is left for a later sweep."""
        if self.path is None:
            return
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    log.debug("the pids cgroup %s is still busy; left for a sweep", self.path)
                    break
                time.sleep(0.02)
        self.path = None


def _sweep(hierarchy: Path) -> None:
    """Remove the empty cgroups that controllers now gone left behind (never a live one's: it
    may have made one its command has not joined yet)."""
    for path in hierarchy.glob(f"{PREFIX}*-*"):
        owner = path.name.removeprefix(PREFIX).split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(OSError):
                path.rmdir()
