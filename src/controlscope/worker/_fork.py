"""The fork supervisor: the controller's side of the worker's user-notification seccomp filter.

A worker whose forks are supervised (``_hardening.fork_notify_program``) hands every ``clone``
that would create a process (not a thread) to this supervisor, which answers from a thread of
the controller. It refuses every such call with ``EPERM`` (what the allow-list alone answers),
except exactly one while the controller has armed it: the controller forks a worker paused at a
boundary by sending it a ``fork`` command, the worker announces the two descriptor numbers the
child's channel is to have, and the supervisor, seeing the announced process make a plain fork
(``SIGCHLD``, no namespace, thread or shared-memory flag), puts the two ends of the new channel
at those numbers in the worker (``SECCOMP_IOCTL_NOTIF_ADDFD``, inherited by the child) and lets
the call go on (``SECCOMP_USER_NOTIF_FLAG_CONTINUE``). Agent code thus cannot create a process:
the only process ever created is the one the controller asked for, a copy of the worker under
the same sandbox and the same filters, which the controller then owns. Linux 5.9 or later.

The listener reaches the controller over a unix socket before agent code runs; the worker
closes its copy. All forks of one worker share its listener and so this supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import stat
import threading
from collections.abc import Sequence

log = logging.getLogger(__name__)

_RECV, _SEND, _ADDFD = 0xC0502100, 0xC0182101, 0x40182103
_FLAG_CONTINUE, _ADDFD_FLAG_SETFD = 1, 1
#: ``clone`` flags a plain fork may carry besides the exit signal (glibc's ``fork`` passes
#: ``CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD``).
_FORK_FLAGS = 0x00100000 | 0x01000000 | 0x00200000  # PARENT_SETTID, CHILD_SETTID, CLEARTID
_CSIGNAL, _SIGCHLD = 0xFF, 17
#: Seconds the supervisor thread sleeps in ``poll`` before it checks whether it should stop.
_POLL_S = 1.0


class _Notif(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("nr", ctypes.c_int32),
        ("arch", ctypes.c_uint32),
        ("ip", ctypes.c_uint64),
        ("args", ctypes.c_uint64 * 6),
    ]


class _Resp(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("val", ctypes.c_int64),
        ("error", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class _AddFd(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("srcfd", ctypes.c_uint32),
        ("newfd", ctypes.c_uint32),
        ("newfd_flags", ctypes.c_uint32),
    ]


OpenFiles = dict[int, tuple[int, int]]
"""A worker's open regular files: descriptor number -> (open flags, position)."""

#: Open flags not to pass on when a file is opened again through ``/proc`` (creation flags,
#: ``O_TMPFILE``'s, and ``O_NOFOLLOW``: the ``/proc`` entry is a link).
_REOPEN_DROP = (
    os.O_CREAT
    | os.O_EXCL
    | os.O_TRUNC
    | os.O_NOCTTY
    | os.O_CLOEXEC
    | os.O_TMPFILE
    | os.O_DIRECTORY
    | os.O_NOFOLLOW
)


def open_files(pid: int) -> OpenFiles:
    """The regular files process ``pid`` holds open at descriptor 3 and above, each one's open
    flags and position, as ``/proc`` shows them (files it cannot read are left out)."""
    found: OpenFiles = {}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for name in names:
        number = int(name)
        try:
            if number < 3 or not stat.S_ISREG(os.stat(f"/proc/{pid}/fd/{number}").st_mode):
                continue
            with open(f"/proc/{pid}/fdinfo/{number}", encoding="ascii") as info:
                fields = dict(line.split(":", 1) for line in info if ":" in line)
            found[number] = (int(fields["flags"].strip(), 8), int(fields["pos"].strip()))
        except (OSError, KeyError, ValueError):
            continue
    return found


def fresh_descriptions(pid: int, files: OpenFiles) -> list[tuple[int, int, int]]:
    """New open file descriptions of process ``pid``'s open ``files`` (the same files, flags
    and the positions ``files`` gives), for a forked worker not to share its parent's
    positions (a fork shares them): ``(descriptor here, number there, descriptor flags)``
    each, to install with :meth:`ForkSupervisor.allow` (the caller closes the descriptors).
    A file that cannot be opened again is left shared."""
    fresh: list[tuple[int, int, int]] = []
    for number, (flags, pos) in sorted(files.items()):
        try:
            fd = os.open(f"/proc/{pid}/fd/{number}", (flags & ~_REOPEN_DROP) | os.O_CLOEXEC)
        except OSError as exc:
            log.debug("descriptor %d of %d stays shared: %s", number, pid, exc)
            continue
        try:
            os.lseek(fd, pos, os.SEEK_SET)
        except OSError:
            os.close(fd)
            continue
        fresh.append((fd, number, flags & os.O_CLOEXEC))
    return fresh


def plain_fork(flags: int) -> bool:
    """Whether ``clone`` ``flags`` make a plain fork: exit signal ``SIGCHLD`` and nothing but
    the thread-id bookkeeping flags (no shared memory, files, namespaces, thread, ``vfork``)."""
    return flags & _CSIGNAL == _SIGCHLD and flags & ~(_CSIGNAL | _FORK_FLAGS) == 0


class ForkSupervisor:
    """Answers a worker family's fork-like ``clone`` calls (see the module docstring).

    The controller arms it for one process (:meth:`arm`), takes that process's fork call
    (:meth:`take`) and lets it go on with the child's channel installed (:meth:`allow`);
    every other call, and any call while nothing is armed, is refused with ``EPERM`` by the
    supervisor's thread.

    Args:
        listener: the user-notification listener fd (owned, closed by :meth:`close`).
    """

    def __init__(self, listener: int) -> None:
        self._listener = listener
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._lock = threading.Lock()
        self._armed: int | None = None
        self._taken: int | None = None
        self._arrived = threading.Event()
        self._stop_r, self._stop_w = os.pipe()
        self.refused = 0
        """How many process-creating calls were refused (agent code's attempts)."""
        self._thread = threading.Thread(target=self._serve, name="fork-supervisor", daemon=True)
        self._thread.start()

    def arm(self, pid: int) -> None:
        """Hold the next plain fork call of process ``pid`` (host pid) for :meth:`take`.

        Raises:
            RuntimeError: the supervisor is closed or already armed.
        """
        with self._lock:
            if self._armed is not None or self._taken is not None or self._listener < 0:
                raise RuntimeError("the fork supervisor is closed or busy")
            self._arrived.clear()
            self._armed = pid

    def take(self, timeout_s: float) -> int:
        """The armed process's held fork call (its notification id), within ``timeout_s``.

        Raises:
            TimeoutError: it made no such call in time (the arming is withdrawn).
        """
        self._arrived.wait(timeout_s)
        with self._lock:
            taken, self._taken, self._armed = self._taken, None, None
        if taken is None:
            raise TimeoutError("the worker made no fork call in time")
        return taken

    def disarm(self) -> None:
        """Withdraw an arming; a call already held is refused."""
        with self._lock:
            taken, self._taken, self._armed = self._taken, None, None
        if taken is not None:
            self.refuse(taken)

    def allow(
        self,
        notif_id: int,
        numbers: tuple[int, int],
        ends: tuple[int, int],
        files: Sequence[tuple[int, int, int]] = (),
    ) -> None:
        """Put ``ends[i]`` at descriptor ``numbers[i]`` in the calling worker (inherited by
        the child), and each of ``files`` (``(descriptor here, number there, descriptor
        flags)``, see :func:`fresh_descriptions`) in place of what it has there, and let the
        held call go on.

        Raises:
            OSError: the descriptors could not be installed (the call is then refused).
        """
        installs = [(end, number, 0) for end, number in zip(ends, numbers, strict=True)]
        for end, number, fd_flags in [*installs, *files]:
            add = _AddFd(notif_id, _ADDFD_FLAG_SETFD, end, number, fd_flags)
            if self._libc.ioctl(self._listener, _ADDFD, ctypes.byref(add)) < 0:
                code = ctypes.get_errno()
                self.refuse(notif_id)
                raise OSError(code, f"cannot give the child its channel: {os.strerror(code)}")
        self._send(_Resp(notif_id, 0, 0, _FLAG_CONTINUE))

    def refuse(self, notif_id: int) -> None:
        """Answer a held call with ``EPERM``."""
        self._send(_Resp(notif_id, 0, -errno.EPERM, 0))

    def close(self) -> None:
        """Stop the thread and close the listener (pending calls then fail); idempotent."""
        if self._listener < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")
        self._thread.join(5.0)
        for fd in (self._listener, self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._listener = -1

    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self._listener, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            events = dict(poller.poll(_POLL_S * 1000))
            if self._stop_r in events:
                return
            mask = events.get(self._listener, 0)
            if mask & select.POLLIN:
                self._answer_one()
            elif mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                return  # every process of the family is gone

    def _answer_one(self) -> None:
        notif = _Notif()
        if self._libc.ioctl(self._listener, _RECV, ctypes.byref(notif)) != 0:
            return  # the caller died meanwhile (ENOENT) or was interrupted
        with self._lock:
            held = self._armed == notif.pid and self._taken is None and plain_fork(notif.args[0])
            if held:
                self._taken = notif.id
        if held:
            self._arrived.set()
            return
        self.refused += 1
        self.refuse(notif.id)

    def _send(self, resp: _Resp) -> None:
        if self._libc.ioctl(self._listener, _SEND, ctypes.byref(resp)) != 0:
            log.debug("fork supervisor: answer not delivered (errno %d)", ctypes.get_errno())
