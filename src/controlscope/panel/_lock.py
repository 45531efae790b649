"""One panel command at a time on a panel folder: an advisory lock on ``PANEL/panel.lock``.

:func:`lock_panel` takes an exclusive ``flock`` on the lock file for as long as the command
runs; the kernel releases it when the process ends, however it ends (a ``kill -9`` leaves no
stale lock behind). The holder writes its pid, host and start time into the file, so a second
command is refused naming them (:class:`PanelBusy`). Readers (the report, the viewer) never
take the lock: they read a locked folder as it stands.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

from controlscope.panel._folder import LOCK_FILE, PanelError

MAX_HOLDER_BYTES = 4096
"""The most of the lock file read to name its holder."""

MAX_NAME_CHARS = 100
"""The most of a holder's host name or start time shown (the lock file is anyone's to edit)."""


class PanelBusy(PanelError):
    """Another panel command holds the panel folder (it runs the same runs).

    The message is one line naming the holder: its pid, host and since when.

    Attributes:
        pid: the holder's process id (None when the lock file does not say).
        host: the holder's host name ("" when the lock file does not say).
        since: when the holder took the lock, as ISO 8601 ("" when the lock file does not say).
    """

    def __init__(self, panel: Path, holder: dict[str, object]) -> None:
        pid, host, since = holder.get("pid"), holder.get("host"), holder.get("since")
        self.pid = pid if isinstance(pid, int) else None
        self.host = host[:MAX_NAME_CHARS] if isinstance(host, str) else ""
        self.since = since[:MAX_NAME_CHARS] if isinstance(since, str) else ""
        who = (
            f"pid {self.pid} on {self.host or 'an unknown host'} since {self.since or '?'}"
            if self.pid is not None
            else "a process that has not said who it is yet"
        )
        super().__init__(
            f"{panel} is in use by another panel command ({who}); wait for it to end, "
            "or choose another --out"
        )


@contextlib.contextmanager
def lock_panel(panel: Path) -> Iterator[None]:
    """Hold the panel folder ``panel`` (created if missing) for the ``with`` block.

    Args:
        panel: the panel folder.

    Raises:
        PanelBusy: another process holds it (its pid, host and since when named).
        PanelError: the lock file cannot be made or is not a regular file (a link, a FIFO).
    """
    fd = _open(panel)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise PanelError(f"{panel / LOCK_FILE} cannot be locked: {err}") from None
            raise PanelBusy(panel, _holder(fd)) from None
        _write_holder(fd)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # the next holder writes itself; nobody reads a stale one
    finally:
        os.close(fd)  # releases the lock


def _open(panel: Path) -> int:
    """The lock file, opened for writing without truncating (its holder's details stay) and
    without following a link or waiting on a FIFO.

    Raises:
        PanelError: the folder or the lock file cannot be made or opened, or the lock file
            is not a regular file.
    """
    path = panel / LOCK_FILE
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        panel.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        raise PanelError(f"{path} cannot be opened: {err.strerror or err}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PanelError(f"{path} is not a regular file")
    return fd


def _write_holder(fd: int) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    with contextlib.suppress(OSError):  # the lock holds without them
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)


def _holder(fd: int) -> dict[str, object]:
    """What the holder wrote into the lock file (empty when it has not written yet)."""
    try:
        data = json.loads(os.pread(fd, MAX_HOLDER_BYTES, 0) or b"{}")
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
