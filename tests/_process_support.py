"""Helpers for tests of real processes: find a process's children, watch its CPU, signal it
while it computes, start it with SIGINT as a terminal or a script would."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

MODEL_CHILD = "controlscope.models._local_child"
"""The module the local model's processes run (their command line names it)."""

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields after the command name (which may hold spaces)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (0 when it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def model_children(parent: int) -> list[int]:
    """Process ids of the local model's processes whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or int(fields[1]) != parent:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if MODEL_CHILD.encode() in cmdline:
            found.append(int(entry.name))
    return sorted(found)


def all_model_processes() -> list[int]:
    """Process ids of every live local-model process on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if MODEL_CHILD.encode() in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``predicate()`` every 50 ms until it is true; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def wait_until_busy(pid: int, cpu_s: float = 0.3, timeout_s: float = 120.0) -> None:
    """Wait until ``pid`` has used ``cpu_s`` more CPU seconds than now (it is computing)."""
    start = cpu_seconds(pid)
    wait_for(lambda: cpu_seconds(pid) - start >= cpu_s, timeout_s, f"process {pid} to compute")


@contextmanager
def sigint_as(how: Literal["terminal", "ignored"]) -> Iterator[None]:
    """SIGINT in this process, and so in the processes it starts or forks meanwhile, as a
    command has it in a terminal (``terminal``: Python's handler, so a process it starts gets
    SIGINT at its default and raises KeyboardInterrupt) or in a background job of a script
    (``ignored``: a shell without job control starts it ignored, and Python keeps it ignored),
    whichever way this test session was started.

    A test that sends Ctrl-C must not depend on that: a session started in the background by
    a script (as CI does) passes SIGINT on ignored to every process it starts.
    """
    handler = signal.default_int_handler if how == "terminal" else signal.SIG_IGN
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class SignalWhenBusy(threading.Thread):
    """Send ``sig`` to ``pid`` once it has computed for ``cpu_s`` CPU seconds (from start()).

    Attributes:
        sent: True once the signal was sent while the process was computing.
        error: what went wrong in the thread, if anything.
    """

    def __init__(self, pid: int, sig: int, cpu_s: float = 0.3) -> None:
        super().__init__(daemon=True)
        self.pid, self.sig, self.cpu_s = pid, sig, cpu_s
        self.sent = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            wait_until_busy(self.pid, self.cpu_s)
            os.kill(self.pid, self.sig)
            self.sent = True
        except BaseException as err:  # reported by the test through .error
            self.error = err


class _TornDown:
    """Writes ``path`` when the interpreter's teardown collects it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __del__(self) -> None:
        Path(self.path).write_text("torn down")


_KEPT: list[_TornDown] = []


def leave_for_teardown(marker: str) -> int:
    """In a pool process: keep an object the interpreter's teardown would collect (writing
    ``marker``), print a line left unflushed, and return the process's id."""
    _KEPT.append(_TornDown(marker))
    print("unflushed line from the pool", end="")
    return os.getpid()
