"""Ending a sandbox leaves no zombie, even in a process that orphans are handed to (a child
subreaper, as this test process is: ``conftest.py``; or a container's pid 1): bwrap exits
before it reaps its sandbox's first process, so the library reaps it, and it stops a sandbox
from the inside out so that nothing is orphaned."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from _process_support import wait_for
from controlscope import _bwrap, _proc
from controlscope.envs._confine import CommandLimits, run_confined
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.worker import WorkerSession
from controlscope.worker._sandbox import bwrap_self_test
from test_worker import FakeServer, Recorder


def handed_over() -> set[int]:
    """This process's children that it did not start: sandbox inits handed to it."""
    me = os.getpid()
    return {p for p in _proc.descendants(me) if _proc.ns_pid(p) == 1 and _parent(p) == me}


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def _worker_closed() -> None:
    with WorkerSession(FakeServer()) as session:
        session.start()
        assert session.isolation == "bwrap"


def _worker_exits_by_itself() -> None:
    with WorkerSession(FakeServer()) as session:
        results = session.run_reply([("exit", "import os\nos._exit(0)\n")], Recorder())
        assert results[0].status == "killed"


def _timed_out_command(tmp_path: Path) -> None:
    limits = CommandLimits(timeout_s=1)
    outcome = run_confined(["/bin/sleep", "30"], workspace=tmp_path, writable=False, limits=limits)
    assert outcome.confined and outcome.timed_out


def _server_closed(tmp_path: Path) -> None:
    env = FilesystemEnvironment()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with env.start_server(workspace) as server:
        assert server.list_tools()


def _command_run(tmp_path: Path) -> None:
    outcome = run_confined(
        ["/bin/sh", "-c", "echo ok"], workspace=tmp_path, writable=False, limits=CommandLimits()
    )
    assert outcome.confined and outcome.output.strip() == "ok"


def _self_test() -> None:
    bwrap_self_test.cache_clear()
    assert bwrap_self_test() is None


ENDINGS: dict[str, Callable[[Path], None]] = {
    "worker killed": lambda _: _worker_closed(),
    "worker exits by itself": lambda _: _worker_exits_by_itself(),
    "MCP server closed": _server_closed,
    "confined command ended": _command_run,
    "confined command killed": _timed_out_command,
    "bwrap self-test": lambda _: _self_test(),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_ending_a_sandbox_leaves_no_zombie_in_a_subreaper(ending: str, tmp_path: Path) -> None:
    """bwrap exits before it reaps its sandbox's init, which is then handed to this process (a
    subreaper): the library reaps it, so none is left (a zombie would stay for good)."""
    before = handed_over()
    ENDINGS[ending](tmp_path)
    time.sleep(0.2)  # anything handed over late would show by now
    assert handed_over() - before == set()


SPAWNS_FROM_A_THREAD = """
import subprocess, sys, threading, time
bwrap = [sys.argv[1], "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "sleep", "60"]
threading.Thread(target=lambda: subprocess.Popen(bwrap).wait(), daemon=True).start()
print("started", flush=True)
time.sleep(60)
"""


def test_a_tree_killed_from_below_leaves_nothing_to_reap_elsewhere() -> None:
    """A process whose sandbox was started from one of its threads (as an MCP client's event
    loop does) is killed after everything below it, and what it leaves to this process is
    reaped: nothing is left, alive or a zombie."""
    bwrap = _bwrap.bwrap_path()
    assert bwrap is not None
    proc = subprocess.Popen(
        [sys.executable, "-c", SPAWNS_FROM_A_THREAD, bwrap], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    wait_for(lambda: len(_proc.descendants(proc.pid)) >= 3, 10, "the sandbox")
    tree = _proc.descendants(proc.pid)
    below = _proc.kill_below(proc.pid)
    proc.kill()
    proc.wait()
    _proc.reap_orphans(below)
    assert below and {pid for pid, _ in below} <= set(tree)
    assert [pid for pid in tree if os.path.exists(f"/proc/{pid}")] == []  # not even a zombie
