"""Which processes this test process started itself, and which of its children are zombies.

The test session is a child subreaper (see ``conftest.py``), so a zombie child of it is one of
two things: a child it started itself and never waited for (the library's fault: in a
long-lived process such zombies fill the process table), or an orphan, a process started
further down whose parent died first and which the kernel handed to the subreaper (outside the
tests ``init`` would reap it; here nobody but the session can). :func:`track_spawns` wraps
every way this interpreter starts a process so the two can be told apart, and records each
child's command line (a zombie's own ``/proc`` entry no longer has one).
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

_SPAWNED: dict[int, tuple[str, str]] = {}
"""pid -> (its start time as ``/proc/PID/stat`` gives it, its command line)."""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _note(pid: int, argv: Iterable[Any] | None) -> None:
    fields = _stat_fields(pid)
    if fields is None:
        return
    words = [a.decode("utf-8", "replace") if isinstance(a, bytes) else str(a) for a in argv or ()]
    _SPAWNED[pid] = (fields[19], " ".join(words)[:300] or "(a fork of the test process)")


def track_spawns() -> None:
    """Record every child this process starts from now on (``subprocess``, ``multiprocessing``,
    ``os.fork``, ``os.posix_spawn``)."""
    fork_exec = _posixsubprocess.fork_exec

    def noted_fork_exec(args: Sequence[Any], *rest: Any) -> int:
        pid: int = fork_exec(args, *rest)
        _note(pid, args)
        return pid

    _posixsubprocess.fork_exec = noted_fork_exec
    subprocess._fork_exec = noted_fork_exec  # type: ignore[attr-defined]
    _wrap_pid_returning("fork", lambda args: None)
    _wrap_pid_returning("posix_spawn", lambda args: args[1])
    _wrap_pid_returning("posix_spawnp", lambda args: args[1])


def _wrap_pid_returning(name: str, argv_of: Callable[[tuple[Any, ...]], Any]) -> None:
    real = getattr(os, name)

    def noted(*args: Any, **kwargs: Any) -> int:
        pid: int = real(*args, **kwargs)
        if pid > 0:
            _note(pid, argv_of(args))
        return pid

    setattr(os, name, noted)


def zombie_children() -> list[tuple[int, str, str | None]]:
    """This process's zombie children: (pid, start time, the command line it was started with
    when this process started it, else None: an orphan handed to the subreaper)."""
    me = os.getpid()
    found: list[tuple[int, str, str | None]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or fields[0] != "Z" or int(fields[1]) != me:
            continue
        pid = int(entry.name)
        spawned = _SPAWNED.get(pid)
        own = spawned is not None and spawned[0] == fields[19]
        found.append((pid, fields[19], spawned[1] if own and spawned is not None else None))
    return found


def reap(pid: int) -> None:
    """Wait for the zombie child ``pid`` (gone already is fine)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
