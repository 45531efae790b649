"""Keep the ``needs_weights`` and ``network`` markers honest, and the session clean.

A test without ``needs_weights`` runs with ``CONTROLSCOPE_HOME`` pointing at an empty directory
(named so that an error quoting it says why), so it cannot find the embedded model's weights;
a test without ``network`` runs with ``PIP_NO_INDEX=1``, so pip cannot reach the package index
and cannot assemble them either. A test that needs either but lacks its marker fails instead of
passing on a machine that happens to have the weights cached. Subprocesses inherit both.

Every run must leave nothing behind: the session's temporary files go to a directory of its own
(``TMPDIR``, inherited by subprocesses), and when the session ends no process started under it
may still be alive (orphans included: the session is their subreaper) and no task workspace
(``cs-ws-*``) or worker directory (``controlscope-worker-*``) may be left in that directory;
otherwise the session fails, naming them. After each test module, a child the session started
and never waited for (a zombie) fails that module, naming it; orphans handed to the session are
reaped (``_children_support``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from _alfworld_support import alfworld_data, alfworld_env  # noqa: F401 (fixtures)
from _children_support import reap, track_spawns, zombie_children
from controlscope._proc import alive, cmdline, descendants

_NO_WEIGHTS_HOME = pytest.StashKey[Path]()
_SESSION_TMP = pytest.StashKey[Path]()
_LEFTOVER_PATTERNS = ("cs-ws-*", "controlscope-worker-*")


def pytest_configure(config: pytest.Config) -> None:
    home = Path(tempfile.mkdtemp(prefix="controlscope-tests-"))
    config.stash[_NO_WEIGHTS_HOME] = home / "home-of-a-test-not-marked-needs_weights"
    session_tmp = home / "tmp"
    session_tmp.mkdir()
    config.stash[_SESSION_TMP] = session_tmp
    os.environ["TMPDIR"] = str(session_tmp)
    tempfile.tempdir = str(session_tmp)
    # Orphans (a grandchild whose parent died) are re-parented to this process instead of
    # init, so the check at the end sees them too.
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    track_spawns()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when a process or a workspace outlived the tests that made it."""
    problems = [f"process {pid} still runs: {cmd}" for pid, cmd in _surviving_descendants()]
    session_tmp = session.config.stash.get(_SESSION_TMP, None)
    if session_tmp is not None:
        for pattern in _LEFTOVER_PATTERNS:
            problems += [f"left on disk: {path}" for path in sorted(session_tmp.glob(pattern))]
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "the tests left things behind:\n  " + "\n  ".join(problems)
        if reporter is not None:
            reporter.write_line(text, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_NO_WEIGHTS_HOME, None)
    if home is not None:
        shutil.rmtree(home.parent, ignore_errors=True)


#: Helpers of this interpreter itself, which end with it (``multiprocessing`` starts one).
_OWN_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _surviving_descendants(wait_s: float = 5.0) -> list[tuple[int, str]]:
    """Live processes below this one (zombies and the interpreter's own helpers aside), after
    waiting ``wait_s`` for them."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [
            (pid, cmd[:200])
            for pid in descendants(os.getpid())
            if alive(pid) and not any(h in (cmd := cmdline(pid)) for h in _OWN_HELPERS)
        ]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """Run each test (its fixtures' setup and teardown included) under its markers' access."""
    with pytest.MonkeyPatch.context() as mp:
        if item.get_closest_marker("needs_weights") is None:
            mp.setenv("CONTROLSCOPE_HOME", str(item.config.stash[_NO_WEIGHTS_HOME]))
        if item.get_closest_marker("network") is None:
            mp.setenv("PIP_NO_INDEX", "1")
        return (yield)


_REPORTED: set[tuple[int, str]] = set()


@pytest.fixture(scope="module", autouse=True)
def _no_zombie_child(request: pytest.FixtureRequest) -> Generator[None, None, None]:
    """After each test module (its fixtures torn down), fail naming every child this process
    started and never waited for: a zombie that stays, which the library must never leave (a
    long-lived server or executor would fill the process table). Orphans that the kernel
    handed to this subreaper are reaped here, since outside the tests ``init`` would reap
    them; this process's own children never are (their exit status is their owner's to
    collect: reaping them here would hide the fault and take that status)."""
    yield
    own: list[str] = []
    for pid, start, command in zombie_children():
        if command is None:
            reap(pid)
        elif (pid, start) not in _REPORTED:  # once, in the module that left it
            _REPORTED.add((pid, start))
            own.append(f"zombie {pid}: {command}")
    if own:
        pytest.fail(
            f"{request.node.nodeid} left children it never waited for:\n  " + "\n  ".join(own),
            pytrace=False,
        )
