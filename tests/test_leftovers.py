"""Nothing is left on disk: the directories of a run killed with SIGKILL are removed by a later
run or ``controlscope clean``; those of live runs and everything not ours are kept."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import controlscope as cs
from _process_support import wait_for
from controlscope import _proc
from controlscope._leftovers import make_dir, owner_mark
from test_api import script
from test_replay import fenced

TASK = "file_context/file_splitting"
SLEEPER = fenced('print("asleep", flush=True)\nimport time\ntime.sleep(120)')
MARK = re.compile(r"@(\d+)\.(\d+)\.(\d+)-")


def ours(temp: Path, pid: int) -> list[str]:
    """The names in ``temp`` marked with the process ``pid``."""
    return sorted(p.name for p in temp.iterdir() if (m := MARK.search(p.name)) and m[1] == str(pid))


def controlscope(temp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(temp), "COLUMNS": "300"},
        check=False,
    )


def start_sleeping_run(temp: Path, tmp_path: Path, name: str) -> subprocess.Popen[str]:
    """``controlscope run`` whose first block sleeps, once that block runs (its workspace in
    ``temp``)."""
    out = tmp_path / name
    argv = [sys.executable, "-m", "controlscope.cli", "run", "--task", TASK, "--out", str(out)]
    argv += ["--model", script(tmp_path, SLEEPER, "Done."), "--schedule", "never", "--quiet"]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    log = out / "events.jsonl"
    try:
        wait_for(lambda: log.exists() and "asleep" in log.read_text(), 120, "the block")
    except AssertionError:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc


@pytest.fixture
def temp(tmp_path: Path) -> Iterator[Path]:
    """The runs' temporary folder."""
    folder = tmp_path / "temp"
    folder.mkdir()
    yield folder


def kill_9(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the run's process alone, as ``kill -9`` does; its sandboxes die with it."""
    below = _proc.descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    for pid in below:  # its sandboxes, handed to this subreaper
        assert _proc.gone(pid)


def interrupt(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err


def test_clean_removes_what_a_killed_run_left_and_nothing_else(temp: Path, tmp_path: Path) -> None:
    """A run killed with SIGKILL leaves its workspace; ``controlscope clean --dry-run`` names it
    and removes nothing, ``controlscope clean`` removes it, and keeps a live run's workspace,
    an unmarked directory, a directory marked in another pid namespace and a link."""
    live = start_sleeping_run(temp, tmp_path, "live")
    try:
        kept = ours(temp, live.pid)
        assert kept
        killed = start_sleeping_run(temp, tmp_path, "killed")
        kill_9(killed)
        left = ours(temp, killed.pid)
        assert left and left[0].startswith("cs-ws-@")  # what SIGKILL leaves
        dead_pid, ns = killed.pid, os.stat("/proc/self/ns/pid").st_ino
        decoys = ["cs-ws-unmarked", f"cs-ws-@{dead_pid}.1.{ns + 1}-abcdefgh", "notes.txt"]
        for name in decoys[:2]:
            (temp / name).mkdir()
        (temp / "notes.txt").write_text("mine")
        (temp / f"cs-ws-@{dead_pid}.1.{ns}-linklink").symlink_to(temp / "cs-ws-unmarked")
        decoys.append(f"cs-ws-@{dead_pid}.1.{ns}-linklink")

        dry = controlscope(temp, "clean", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert [ln.split()[2] for ln in dry.stdout.splitlines()] == [str(temp / n) for n in left]
        assert all(ln.startswith("would remove ") for ln in dry.stdout.splitlines())
        assert all((temp / name).is_dir() for name in left)

        done = controlscope(temp, "clean")
        assert done.returncode == 0, done.stderr
        assert [ln.split()[1] for ln in done.stdout.splitlines()] == [str(temp / n) for n in left]
        assert not any(os.path.lexists(temp / name) for name in left)
        assert ours(temp, live.pid) == kept
        assert all(os.path.lexists(temp / name) for name in decoys)
        assert (temp / "notes.txt").read_text() == "mine"
        again = controlscope(temp, "clean")
        assert again.stdout.strip() == "nothing to remove"
    finally:
        interrupt(live)
    assert ours(temp, live.pid) == []  # a run removes its own


def test_the_next_run_removes_what_a_killed_run_left(temp: Path, tmp_path: Path) -> None:
    """A later run removes the workspace of a run killed with SIGKILL as it starts, and keeps
    the workspace of a run still going."""
    live = start_sleeping_run(temp, tmp_path, "live")
    try:
        kept = ours(temp, live.pid)
        killed = start_sleeping_run(temp, tmp_path, "killed")
        kill_9(killed)
        assert ours(temp, killed.pid)
        later = controlscope(
            temp, "run", "--task", TASK, "--out", str(tmp_path / "later"), "--quiet",
            "--model", script(tmp_path, "Done."), "--schedule", "never",
        )  # fmt: skip
        assert later.returncode == 0, later.stderr
        assert ours(temp, killed.pid) == []
        assert ours(temp, live.pid) == kept
    finally:
        interrupt(live)


def test_a_killed_workers_directory_is_removed_too(temp: Path) -> None:
    """Without bubblewrap the worker has a directory of its own in the temporary folder; one
    whose controller was killed with SIGKILL goes as well."""
    code = (
        "from controlscope.worker import WorkerSession\n"
        "from test_worker import FakeServer\n"
        "s = WorkerSession(FakeServer(), isolation='none')\n"
        "s.start()\n"
        "print('started', flush=True)\n"
        "import time; time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    kill_9(proc)
    left = ours(temp, proc.pid)
    assert [n.split("@")[0] for n in left] == ["controlscope-worker-"]
    removed = cs.clean([temp])
    assert [(r.path.name, r.owner, r.problem) for r in removed] == [(left[0], proc.pid, None)]
    assert ours(temp, proc.pid) == []


def test_clean_judges_each_owner_by_pid_and_start_time(tmp_path: Path) -> None:
    """An owner is gone when its pid is free, a zombie, or another process's (another start
    time); a leftover holding read-only directories and a deep tree is removed whole; this
    process's own directory, and another user's, stay."""
    me = owner_mark()
    assert me is not None
    pid, start, ns = (int(x) for x in me[1:].split("."))
    child = subprocess.Popen(["sleep", "60"])
    child_start = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    names = {
        "mine": make_dir("cs-ws-", tmp_path).name,
        "reused": f"cs-ws-@{pid}.{start + 1}.{ns}-reused00",
        "zombie": f"cs-ws-@{child.pid}.{child_start}.{ns}-zombie00",
        "boundary": f"cs-ws-@{pid}.{start + 1}.{ns}-reused00.at-boundary",
        "foreign": f"cs-ws-@{pid}.{start + 1}.{ns}-foreign0",
    }
    for key, name in names.items():
        (tmp_path / name).mkdir(exist_ok=key == "mine")
    os.chown(tmp_path / names["foreign"], 12345, 12345)
    deep = tmp_path / names["reused"]
    for part in ["a"] * 300:
        deep = deep / part
    deep.mkdir(parents=True)
    (tmp_path / names["reused"] / "a").chmod(0o500)
    child.kill()  # a zombie until waited for
    assert _proc.gone(child.pid)
    try:
        assert [r.path.name for r in cs.clean([tmp_path], dry_run=True)] == sorted(
            names[k] for k in ("reused", "boundary", "zombie")
        )
        removed = cs.clean([tmp_path])
    finally:
        child.wait()
    assert sorted(r.path.name for r in removed if r.problem is None) == sorted(
        names[k] for k in ("reused", "boundary", "zombie")
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names["mine"], names["foreign"]])
