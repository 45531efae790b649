"""Forking a paused worker at a boundary (the fork supervisor), and agent code still unable to
create a process, under both isolations.

Every test drives a real worker over its channel: a block pauses at a call, the controller
forks it, and each process is then answered and checked on its own. The hostile blocks try
every way of making a process (``os.fork``, ``subprocess``, ``posix_spawn``, raw ``clone``
through ctypes with fork, thread and namespace flags, ``clone3``) when nothing is armed, from a
forked child, and while the supervisor is armed for another process or for the very process
that tries.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from controlscope import _proc
from controlscope.core import ToolSchema
from controlscope.worker._fork import ForkSupervisor, plain_fork
from controlscope.worker._process import ForkError, WorkerProcess
from controlscope.worker._proxies import generate_proxies
from controlscope.worker._types import Limits

PROXIES = generate_proxies(
    [ToolSchema(name="noop", input_schema={"type": "object", "properties": {}})]
)
ISOLATIONS = ["bwrap", "none"]

#: Agent code trying every way of making a process; prints one line per attempt.
HOSTILE = """
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
clone = {'x86_64': 56, 'aarch64': 220}[os.uname().machine]
clone3 = 435
def attempt(name, fn):
    try:
        r = fn()
    except (OSError, RuntimeError) as exc:
        print('refused', name, type(exc).__name__)
        return
    if r == 0:
        os._exit(0)  # a child: never let it run on
    if isinstance(r, int) and r < 0:
        print('refused', name, ctypes.get_errno())
    else:
        print('CREATED', name, r)
attempt('os.fork', os.fork)
attempt('subprocess', lambda: subprocess.run(['/bin/true']).returncode + 1)
attempt('posix_spawn', lambda: os.posix_spawn('/bin/true', ['true'], {}))
attempt('clone-fork', lambda: libc.syscall(clone, 17, 0, 0, 0, 0))
attempt('clone-thread', lambda: libc.syscall(clone, 0x10000 | 0x800 | 0x100 | 17, 0, 0, 0, 0))
attempt('clone-newuser', lambda: libc.syscall(clone, 0x10000000 | 17, 0, 0, 0, 0))
attempt('clone-vm', lambda: libc.syscall(clone, 0x100 | 0x4000 | 17, 0, 0, 0, 0))
attempt('clone3', lambda: libc.syscall(clone3, 0, 0))
"""
ATTEMPTS = 8


def start(isolation: str) -> WorkerProcess:
    worker = WorkerProcess(isolation, Limits(), spin_s=0, worker_spin_s=0)  # type: ignore[arg-type]
    worker.start(PROXIES)
    assert worker.seccomp and worker.forks
    return worker


@pytest.fixture(params=ISOLATIONS)
def worker(request: pytest.FixtureRequest) -> Iterator[WorkerProcess]:
    w = start(request.param)
    try:
        yield w
    finally:
        w.kill()


def run(worker: WorkerProcess, code: str, seq: int) -> str:
    """Run a block that makes no call to its end; its printed output."""
    worker.channel.send(_run(code, seq))
    assert worker.channel.recv(10)["t"] == "started"
    return finish(worker, None)


def _run(code: str, seq: int) -> dict[str, Any]:
    return {"t": "run", "seq": seq, "id": f"b{seq}", "code": code, "nonce": f"n{seq}"}


def pause(worker: WorkerProcess, code: str, seq: int) -> None:
    """Run a block up to its first call, which is left unanswered (the worker is paused)."""
    worker.channel.send(_run(code, seq))
    assert worker.channel.recv(10)["t"] == "started"
    msg = worker.channel.recv(10)
    assert msg["t"] == "call", msg


def finish(worker: WorkerProcess, answer: str | None) -> str:
    """Answer the paused call (None: there is none); the rest of the block's output."""
    if answer is not None:
        worker.channel.send({"t": "res", "text": answer})
    out = ""
    while True:
        msg = worker.channel.recv(20)
        if msg["t"] == "end":
            assert msg["status"] == "completed", msg
            return out + str(msg["out"])
        assert msg["t"] == "out", msg
        out += msg["out"]


def refusals(output: str) -> None:
    lines = output.splitlines()
    assert not [ln for ln in lines if ln.startswith("CREATED")], output
    assert len([ln for ln in lines if ln.startswith("refused")]) == ATTEMPTS, output


def test_a_paused_worker_forks_into_children_that_go_on_on_their_own(
    worker: WorkerProcess,
) -> None:
    pause(worker, "import os\nx = [1]\nr = noop()\nx.append(r)\nprint(r, x, os.getpid())\n", 1)
    first = worker.fork()
    second = worker.fork()
    try:
        pids = {worker._host_pid, first.pid, second.pid}
        assert len(pids) == 3 and all(pid is not None and _proc.alive(pid) for pid in pids)
        # each answered differently: each goes on with the block from the same boundary
        outputs = {w: finish(w, name) for w, name in ((second, "b"), (worker, "p"), (first, "a"))}
        assert outputs[worker].startswith("p [1, 'p'] ")
        assert outputs[first].startswith("a [1, 'a'] ")
        assert outputs[second].startswith("b [1, 'b'] ")
        # their namespaces are their own from the fork on
        assert run(first, "y = 'first'\nprint(x, y)", 2) == "[1, 'a'] first\n"
        assert run(worker, "print(x, 'y' in globals())", 2) == "[1, 'p'] False\n"
        # a child is still a confined worker
        refusals(run(first, HOSTILE, 3))
        # killing a child leaves its parent working
        child_pid = first.pid
        assert first.kill() and child_pid is not None and _proc.gone(child_pid)
        assert run(worker, "print(x)", 3) == "[1, 'p']\n"
    finally:
        first.kill()
        second.kill()


def test_each_fork_finds_open_files_where_they_were_at_the_boundary(
    worker: WorkerProcess,
) -> None:
    """A fork shares its parent's open file descriptions, positions included; a forked worker
    gets its own, at the positions given (those at the boundary), whatever an earlier fork
    read or wrote meanwhile; and the file's contents stay shared (it is one file)."""
    opened = (
        "import tempfile\nf = tempfile.TemporaryFile(buffering=0)\nf.write(b'abcdef')\nf.seek(2)\n"
    )
    pause(worker, opened + "r = noop()\n", 1)
    at_boundary = worker.open_files()
    assert len(at_boundary) == 1 and next(iter(at_boundary.values()))[1] == 2
    first = worker.fork(files=at_boundary)
    try:
        assert finish(first, "go") == ""
        assert run(first, "print(f.read(2))\nf.write(b'XY')", 2) == "b'cd'\n"
        second = worker.fork(files=at_boundary)
        try:
            assert finish(second, "go") == ""
            assert run(second, "print(f.read())", 2) == "b'cdXY'\n"
        finally:
            second.kill()
    finally:
        first.kill()


#: A forked worker trying to reach the worker it was forked from (whose pid the filters it
#: inherited name as "the worker itself"): its limits, signals to it and to their group.
AT_PARENT = """
import ctypes, os, resource
libc = ctypes.CDLL(None, use_errno=True)
tgkill = {'x86_64': 234, 'aarch64': 131}[os.uname().machine]
parent, group = os.getppid(), os.getpgid(0)
def attempt(name, fn):
    try:
        r = fn()
    except OSError as exc:
        print('refused', name, exc.errno)
        return
    print('refused' if isinstance(r, int) and r < 0 else 'REACHED', name)
attempt('prlimit', lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE, (20, 20)))
attempt('kill', lambda: os.kill(parent, 0))
attempt('kill-group', lambda: os.kill(0, 0))
attempt('killpg', lambda: os.killpg(group, 0) if group > 1 else os.kill(0, 0))
attempt('tgkill', lambda: libc.syscall(tgkill, parent, parent, 0))
resource.setrlimit(resource.RLIMIT_NOFILE, (30, 30))  # its own limits are its own
print(resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_a_forked_worker_cannot_reach_the_worker_it_was_forked_from(
    worker: WorkerProcess,
) -> None:
    """The filters a fork inherits allow signals and limits aimed at "the worker itself",
    named by the pid of the worker it was forked from: a forked worker must not use that to
    signal it or change its limits (which every later fork would inherit)."""
    pause(worker, "import resource\nr = noop()\n", 1)
    limits = run_after(worker.fork(), AT_PARENT)
    lines = limits.splitlines()
    assert [ln.split()[0] for ln in lines[:5]] == ["refused"] * 5, limits
    assert lines[5] == "(30, 30)"
    after = run_after(worker.fork(), "print(resource.getrlimit(resource.RLIMIT_NOFILE))")
    assert after == f"{Limits().open_files, Limits().open_files}\n"
    assert finish(worker, "go") == ""  # the worker itself is unharmed
    assert run(worker, "print(resource.getrlimit(resource.RLIMIT_NOFILE))", 2) == after


def run_after(child: WorkerProcess, code: str) -> str:
    """Answer a forked child's pending call, run ``code`` in it, kill it; its output."""
    try:
        assert finish(child, "go") == ""
        return run(child, code, 2)
    finally:
        child.kill()


def test_children_die_with_the_worker_they_were_forked_from(worker: WorkerProcess) -> None:
    pause(worker, "r = noop()\n", 1)
    child = worker.fork()
    pid = child.pid
    assert pid is not None and _proc.alive(pid)
    worker.kill()
    assert _proc.gone(pid)
    assert child.exited()
    child.kill()


def test_agent_code_cannot_create_a_process_at_any_time(worker: WorkerProcess) -> None:
    supervisor = worker._supervisor
    assert supervisor is not None
    refusals(run(worker, HOSTILE, 1))
    assert supervisor.refused >= 3  # fork-like clones reached the supervisor and were refused
    # while the supervisor is armed for another process of the family (a fork in progress)
    pause(worker, "r = noop()\n", 2)
    child = worker.fork()
    try:
        assert finish(worker, "go") == ""
        supervisor.arm(worker._host_pid or -1)
        try:
            finish(child, "go")
            refusals(run(child, HOSTILE, 3))
        finally:
            supervisor.disarm()
        # and while it is armed for the very process running agent code: only a plain fork
        # from it would be let through (the one the controller asks for at a boundary)
        assert child.pid is not None
        supervisor.arm(child.pid)
        try:
            out = run(child, HOSTILE.split("attempt('os.fork'")[0] + ARMED_ATTEMPTS, 4)
        finally:
            supervisor.disarm()
        assert "CREATED" not in out and out.count("refused") == 5, out
    finally:
        child.kill()
    refusals(run(worker, HOSTILE, 3))


#: The non-plain process creations, tried by the process the supervisor is armed for.
ARMED_ATTEMPTS = """
attempt('posix_spawn', lambda: os.posix_spawn('/bin/true', ['true'], {}))
attempt('clone-thread', lambda: libc.syscall(clone, 0x10000 | 0x800 | 0x100 | 17, 0, 0, 0, 0))
attempt('clone-newuser', lambda: libc.syscall(clone, 0x10000000 | 17, 0, 0, 0, 0))
attempt('clone-vm', lambda: libc.syscall(clone, 0x100 | 0x4000 | 17, 0, 0, 0, 0))
attempt('clone3', lambda: libc.syscall(clone3, 0, 0))
"""


def test_a_worker_not_paused_at_a_boundary_is_not_forked() -> None:
    """A fork command outside a boundary breaks the protocol: the worker quits, the fork
    fails within its bound, and nothing was created."""
    worker = start("bwrap")
    try:
        before = _proc.descendants(worker.pid or -1)
        started = time.monotonic()
        with pytest.raises(ForkError):
            worker.fork(timeout_s=3)
        assert time.monotonic() - started < 5
        assert len(_proc.descendants(worker.pid or -1)) <= len(before)
    finally:
        worker.kill()


def test_an_unarmed_call_times_out_and_the_arming_is_withdrawn() -> None:
    r, w = os.pipe()
    supervisor = ForkSupervisor(r)  # a listener on which no call ever comes
    try:
        supervisor.arm(os.getpid())
        with pytest.raises(RuntimeError):
            supervisor.arm(os.getpid())  # one fork at a time
        with pytest.raises(TimeoutError):
            supervisor.take(0.05)
        supervisor.arm(os.getpid())  # withdrawn: it can be armed again
        supervisor.disarm()
    finally:
        supervisor.close()
        os.close(w)


@pytest.mark.parametrize(
    ("flags", "plain"),
    [
        (0x01200011, True),  # glibc fork
        (17, True),
        (0x00100000 | 17, True),
        (0x01200011 | 0x10000, False),  # a thread
        (0x01200011 | 0x100, False),  # shared memory
        (0x4000 | 0x100 | 17, False),  # vfork
        (0x10000000 | 17, False),  # a new user namespace
        (0x01200000, False),  # no exit signal
        (0x01200011 | 1 << 40, False),  # bits the legacy call ignores are still refused
    ],
)
def test_only_a_plain_fork_is_ever_let_through(flags: int, plain: bool) -> None:
    assert plain_fork(flags) is plain


def test_a_worker_without_a_supervisor_says_it_cannot_be_forked() -> None:
    worker = WorkerProcess("none", Limits(), spin_s=0, worker_spin_s=0)
    assert not worker.forks
    with pytest.raises(ForkError, match="cannot be forked"):
        worker.fork()


#: A block whose state depends on its seeded ``random`` and on every answer it got.
SEEDED = """
import random
seen = []
for i in range(6):
    seen.append(round(random.random(), 12))
    seen.append(noop())
print(seen)
"""


def messages_after(worker: WorkerProcess, answers: list[str]) -> list[dict[str, Any]]:
    """Answer the paused call and the calls after it with ``answers``; every message the
    worker sent meanwhile (its own pid left out), up to the block's end."""
    seen: list[dict[str, Any]] = []
    worker.channel.send({"t": "res", "text": answers.pop(0)})
    while True:
        msg = worker.channel.recv(20)
        seen.append(msg)
        if msg["t"] == "end":
            return seen
        if msg["t"] == "call":
            worker.channel.send({"t": "res", "text": answers.pop(0)})


def replay_to(worker: WorkerProcess, calls: int) -> None:
    """Run :data:`SEEDED` and answer its first ``calls`` calls (``a0``, ``a1``...); it then
    waits at the next one."""
    pause(worker, SEEDED, 1)
    for i in range(calls):
        worker.channel.send({"t": "res", "text": f"a{i}"})
        msg = worker.channel.recv(10)
        while msg["t"] == "out":
            msg = worker.channel.recv(10)
        assert msg["t"] == "call", msg


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_forked_worker_goes_on_exactly_as_a_replay_of_its_prefix(isolation: str) -> None:
    """Forking at a boundary and replaying the prefix to it reach the same worker: the same
    answers from there on give the same boundaries (variables included) and the same end."""
    source, replayed = start(isolation), start(isolation)
    try:
        replay_to(source, 3)
        forked = source.fork()
        try:
            replay_to(replayed, 3)
            tail = ["b3", "b4", "b5"]
            from_fork = messages_after(forked, list(tail))
            from_replay = messages_after(replayed, list(tail))
            from_source = messages_after(source, ["other", "b4", "b5"])
        finally:
            forked.kill()
        assert from_fork == from_replay
        assert [m["t"] for m in from_fork].count("call") == 2
        assert from_fork[-1]["status"] == "completed"
        assert from_source != from_fork  # the source went on with its own answers
    finally:
        source.kill()
        replayed.kill()
