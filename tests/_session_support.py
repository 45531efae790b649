"""Fixtures shared by the executor's, ``serve``'s and the framework adapters' tests: a folder of
two files for the filesystem server, its ``mcpServers`` file, a session replayed by the CLI, and
a check that no process a test started outlives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from controlscope._proc import cmdline, descendants
from controlscope.envs.filesystem.server import find_server_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A folder holding ``a.txt`` ("alpha") and ``b.txt`` ("beta")."""
    root = tmp_path / "files"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "b.txt").write_text("beta\n")
    return root


def fs_config(files: Path, path: Path) -> Path:
    """Write ``path``: an ``mcpServers`` file naming the npm filesystem server on ``files``."""
    server = {"command": "node", "args": [str(find_server_script()), str(files)]}
    path.write_text(json.dumps({"mcpServers": {"fs": server}}))
    return path


def replays_verified(session: Path, calls: int) -> None:
    """``controlscope replay`` of a recorded session, in a subprocess, verifies its ``calls``."""
    command = ["replay", str(session), "--out", f"{session}-replayed"]
    replayed = subprocess.run(
        [sys.executable, "-m", "controlscope.cli", *command],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=300,
    )
    assert replayed.returncode == 0, replayed.stderr
    assert f"{calls} calls verified" in replayed.stdout


def running() -> set[int]:
    """This process's descendants that still run (zombies are the session's check,
    ``conftest.py``: an orphaned sandbox init handed to this subreaper is one)."""
    return {pid for pid in descendants(os.getpid()) if state(pid) not in ("Z", "X", "gone")}


def outliving(pids: Iterable[int], seconds: float) -> list[int]:
    """Those of ``pids`` still running (not zombies) after waiting up to ``seconds`` for
    them to end."""
    deadline = time.monotonic() + seconds
    alive = [pid for pid in pids if state(pid) not in ("Z", "X", "gone")]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in alive if state(pid) not in ("Z", "X", "gone")]
    return alive


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
