"""Processes as Linux's ``/proc`` shows them: who descends from whom, who is still alive.

Used to measure a worker (its processes' memory) and to check that a run leaves no process
behind (the tests' session check, ``benchmarks/fault_matrix.py``). This module imports nothing
from controlscope.
"""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["alive", "children", "cmdline", "descendants", "gone", "ns_pid", "status_kib"]


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
