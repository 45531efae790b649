"""Processes as Linux's ``/proc`` shows them: who descends from whom, who is still alive.

Used to measure a worker (its processes' memory) and to check that a run leaves no process
behind (the tests' session check, ``benchmarks/fault_matrix.py``). This module imports nothing
from controlscope.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = [
    "alive",
    "children",
    "cmdline",
    "descendants",
    "die_with_parent",
    "gone",
    "kill_below",
    "kill_working_in",
    "ns_pid",
    "reap_orphans",
    "status_kib",
]

#: How deep :func:`kill_below` descends (process trees we start are a few levels deep).
_MAX_KILL_DEPTH = 16

#: ``prctl`` option: the signal a process gets when the thread that started it ends.
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets SIGKILL when the thread
    that started it ends, its process killed with SIGKILL included (``PR_SET_PDEATHSIG``,
    kept across ``exec``); a child whose parent died before the signal was set exits at once.
    Start the child from a thread that outlives it (the main thread of a command).

    Returns:
        The function to run in the child before it executes its program.
    """
    parent = os.getpid()
    # Looked up here, not in the child: a child forked from a process with other threads must
    # not take the dynamic loader's locks (another thread may have held them at the fork).
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was set
            os._exit(1)

    return preexec


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren...), parents before children."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop(0)
        children = sorted(child for child, parent in parents.items() if parent == current)
        found += children
        frontier += children
    return found


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (empty when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return [p for p in descendants(pid) if _parent(p) == pid]
    return [int(child) for child in text.split()]


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def kill_below(pid: int, wait_s: float = 1.0) -> list[tuple[int, str]]:
    """SIGKILL every process below ``pid``, each after the processes below it, before the
    caller ends ``pid`` itself.

    The first process of a pid namespace (a bubblewrap sandbox's init) is killed without
    descending (its death ends every process in the sandbox, reaped by the kernel), and
    ``pid`` (bwrap) is given up to ``wait_s`` to reap it, which bwrap does at once: killed
    after its parent instead, it would be orphaned, handed to ``init`` or to the nearest child
    subreaper. Other processes are not waited for (their parent may not reap them before it
    dies); pass what this returns to :func:`reap_orphans` once ``pid`` is gone.

    Args:
        pid: a process this one started (the processes below it, if it is gone).
        wait_s: the longest wait for bwrap to reap its sandbox's init.

    Returns:
        The processes killed: (pid, start time), so that a pid the kernel gave again to
        another process is not taken for one of them.
    """
    return _kill_below(pid, time.monotonic() + wait_s, 0)


def _kill_below(pid: int, deadline: float, depth: int) -> list[tuple[int, str]]:
    killed: list[tuple[int, str]] = []
    for child in _all_children(pid):  # a thread's children are its own (an event loop's)
        sandbox = ns_pid(child) == 1
        if not sandbox and depth < _MAX_KILL_DEPTH:
            killed += _kill_below(child, deadline, depth + 1)
        try:
            fd = os.pidfd_open(child)
        except OSError:  # gone already
            continue
        try:
            if _parent(child) != pid:  # reaped, and its pid given to another process
                continue
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            killed.append((child, _start(child)))
            while sandbox and _parent(child) == pid and time.monotonic() < deadline:
                time.sleep(0.002)  # until bwrap has reaped it
        finally:
            os.close(fd)
    return killed


def reap_orphans(killed: Iterable[tuple[int, str]] = (), wait_s: float = 1.0) -> int:
    """Reap the processes handed to this process because their parent died first: those
    :func:`kill_below` killed below a child this process ended, and any bubblewrap sandbox's
    init.

    bwrap exits as soon as its command's exit status is in, before it has reaped the
    sandbox's init (pid 1 of the sandbox's pid namespace), so that process is orphaned on
    every exit. Orphans go to ``init`` or to the nearest child subreaper; when that is this
    process (a subreaper, or pid 1 of a container: a long-lived server or executor), nobody
    else reaps them, and they would stay zombies. Call this once a child that may leave
    orphans (bwrap, a worker with forks) has been waited for. Only processes this one never
    started itself are reaped (a sandbox's init, a grandchild), so no exit status anybody
    waits for is taken.

    Args:
        killed: what :func:`kill_below` returned, (pid, start time) each.
        wait_s: the longest wait, in all, for those still exiting.

    Returns:
        How many were reaped.
    """
    me = os.getpid()
    wanted = set(killed)
    deadline = time.monotonic() + wait_s
    reaped = 0
    for pid in _all_children(me):
        if (pid, _start(pid)) not in wanted and (ns_pid(pid) != 1 or _comm(pid) != "bwrap"):
            continue
        while not _waited(pid):
            if time.monotonic() > deadline or _parent(pid) != me:
                break
            time.sleep(0.002)
        else:
            reaped += 1
    return reaped


def _all_children(pid: int) -> list[int]:
    """The children of every thread of ``pid``."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
    return found


def _start(pid: int) -> str:
    """The start time of ``pid`` (``/proc/PID/stat`` field 22; a zombie keeps it), or ``""``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _comm(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return text[text.find("(") + 1 : text.rfind(")")]


def _waited(pid: int) -> bool:
    """Reap the child ``pid`` if it has exited; whether it is gone."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True


def ns_pid(pid: int) -> int | None:
    """The id ``pid`` has in its own (innermost) pid namespace, or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone(pid: int, wait_s: float = 5.0) -> bool:
    """Whether ``pid`` is dead (or a zombie) within ``wait_s`` seconds (a kill takes a moment)."""
    deadline = time.monotonic() + wait_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def kill_working_in(folder: Path) -> list[int]:
    """SIGKILL every process of this user whose working directory is ``folder`` or below it
    (what a killed command's children left running in its scratch folder, before the folder
    is removed).

    Args:
        folder: the folder (absolute).

    Returns:
        The pids signalled.
    """
    root = os.path.realpath(folder)
    killed: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


def cmdline(pid: int) -> str:
    """The command line of ``pid``, arguments joined by spaces (empty when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, UnicodeDecodeError):
        return ""


def status_kib(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` field in KiB, e.g. ``VmHWM`` (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
