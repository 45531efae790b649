"""Fixtures shared by the executor's and the framework adapters' tests: a folder of two files
for the filesystem server, and a check that no process a test started outlives it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlscope._proc import cmdline, descendants


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A folder holding ``a.txt`` ("alpha") and ``b.txt`` ("beta")."""
    root = tmp_path / "files"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "b.txt").write_text("beta\n")
    return root


def running() -> set[int]:
    """This process's descendants that still run (zombies are the session's check,
    ``conftest.py``: an orphaned sandbox init handed to this subreaper is one)."""
    return {pid for pid in descendants(os.getpid()) if state(pid) not in ("Z", "X", "gone")}


def state(pid: int) -> str:
    """The process's state letter from ``/proc`` (``gone`` when it has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """Fail when a process this test started outlives it (10 s to end)."""
    before = running()
    yield
    deadline = time.monotonic() + 10
    left = running() - before
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = running() - before
    shown = {pid: (state(pid), cmdline(pid)) for pid in sorted(left)}
    assert not left, f"processes left behind: {shown}"
