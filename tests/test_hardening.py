"""The worker's seccomp allow-list and its whole-memory bound, under both isolations.

Every test runs agent code in a real worker (bubblewrap, and the documented ``isolation:
none`` fallback where it applies) and checks the effect on the host: a process of the test's
own that must survive, the worker's memory read from ``/proc``.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from controlscope.core import (
    BlockResult,
    Boundary,
    Keep,
    Operation,
    PrimitiveCall,
    ToolResult,
    ToolSchema,
)
from controlscope.worker import Limits, WorkerSession
from controlscope.worker._hardening import forked_program, seccomp_program, syscall_table

#: Raw syscall numbers agent code uses below Python (x86_64, aarch64).
SIGNAL_CALLS = {
    "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240),
    "tkill": (200, 130),
    "tgkill": (234, 131),
    "pidfd_open": (434, 434),
    "memfd_create": (319, 279),
    "shmget": (29, 194),
}


class NoopServer:
    agent_roots: tuple[str, ...] = ()
    server_info: dict[str, str] = {}  # noqa: RUF012 - a read-only class default

    def list_tools(self) -> list[ToolSchema]:
        return [ToolSchema(name="noop", input_schema={"type": "object", "properties": {}})]

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        return ToolResult(text="ok")

    def close(self) -> None:
        pass


class Keeper:
    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        pass

    def on_boundary(self, boundary: Boundary) -> Operation:
        return Keep()

    def on_call(self, call: PrimitiveCall) -> None:
        pass

    def on_block_end(self, result: BlockResult) -> None:
        pass


def session(isolation: str, limits: Limits | None = None) -> WorkerSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the loud warning of isolation "none"
        worker = WorkerSession(NoopServer(), limits or Limits(), isolation=isolation)  # type: ignore[arg-type]
    worker.start()
    assert worker.isolation == isolation and worker.seccomp
    return worker


def run(worker: WorkerSession, code: str) -> BlockResult:
    [result] = worker.run_reply([("b", code)], Keeper())
    assert result.status == "completed", (result.status, result.error)
    return result


@pytest.fixture
def target() -> Iterator[subprocess.Popen[bytes]]:
    """A host process of the test's own, in a session of its own: no block may signal it."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


SIGNALS = r"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
column = 0 if os.uname().machine == 'x86_64' else 1
numbers = {name: pair[column] for name, pair in NUMBERS.items()}
info = (ctypes.c_int * 32)(int(signal.SIGTERM), 0, -1)  # siginfo_t, SI_QUEUE
def raw(name, *args):
    ret = libc.syscall(numbers[name], *args)
    return ret, ctypes.get_errno()
def py(call, *args):
    try:
        call(*args)
        return 0, 0
    except OSError as exc:
        return -1, exc.errno
T, C = TARGET, os.getppid()
print({
    'kill': py(os.kill, T, signal.SIGTERM),
    'killpg': py(os.killpg, T, signal.SIGTERM),
    'kill_all_probe': py(os.kill, -1, 0),
    'kill_parent_probe': py(os.kill, C, 0),
    'rt_sigqueueinfo': raw('rt_sigqueueinfo', T, int(signal.SIGTERM), info),
    'rt_tgsigqueueinfo': raw('rt_tgsigqueueinfo', T, T, int(signal.SIGTERM), info),
    'tkill': raw('tkill', T, int(signal.SIGTERM)),
    'tgkill': raw('tgkill', T, T, int(signal.SIGTERM)),
    'pidfd_open': raw('pidfd_open', T, 0),
})
os.kill(os.getpid(), 0)
signal.signal(signal.SIGUSR1, lambda *a: print('own signal'))
signal.raise_signal(signal.SIGUSR1)
"""


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_signals_to_any_other_process_fail(isolation: str, target: subprocess.Popen[bytes]) -> None:
    code = SIGNALS.replace("NUMBERS", repr(SIGNAL_CALLS)).replace("TARGET", str(target.pid))
    with session(isolation) as worker:
        result = run(worker, code)
    outcome = eval(result.output.splitlines()[0])  # a dict literal printed by the block
    assert outcome == {name: (-1, 1) for name in outcome}, outcome  # EPERM, every one
    assert "own signal" in result.output  # signals to itself still work
    assert target.poll() is None  # alive


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_memfd_and_system_v_shared_memory_are_refused(isolation: str) -> None:
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "try:\n"
        "    os.memfd_create('hoard')\n"
        "    print('memfd allowed')\n"
        "except OSError as exc:\n"
        "    print('memfd', exc.errno)\n"
        "print('shmget', libc.shmget(0, 1 << 20, 0o1600), ctypes.get_errno())\n"
    )
    with session(isolation) as worker:
        result = run(worker, code)
    assert result.output.splitlines() == ["memfd 1", "shmget -1 1"]


def test_dev_and_the_root_are_read_only_and_dev_shm_is_small() -> None:
    """bwrap's ``/`` and ``/dev`` are tmpfs as large as half the host's memory: both read-only,
    so files written outside ``/tmp`` and ``/dev/shm`` cannot hoard the host's memory."""
    code = (
        "def fill(path, mb):\n"
        "    try:\n"
        "        with open(path, 'wb') as f:\n"
        "            for _ in range(mb):\n"
        "                f.write(b'x' * (1 << 20))\n"
        "        return 'wrote'\n"
        "    except OSError as exc:\n"
        "        return exc.errno\n"
        "print(fill('/dev/hoard', 1), fill('/dev/shm/hoard', 64), fill('/hoard', 1))\n"
    )
    with session("bwrap", Limits(memory_mb=512, tmp_mb=32, shm_mb=4)) as worker:
        result = run(worker, code)
    assert result.output.split() == ["30", "28", "30"]  # EROFS, ENOSPC, EROFS


HOARD = r"""
import os
held = []
def fill(path):
    try:
        with open(path, 'wb') as f:
            while True:
                f.write(b'x' * (1 << 20))
    except OSError:
        pass
for i in range(64):
    fill(f'/tmp/hoard-{i}')
    fill(f'/dev/shm/hoard-{i}')
try:
    while True:
        held.append(bytearray(16 << 20))
except MemoryError:
    pass
print(len(held))
"""


def test_the_whole_memory_of_the_worker_is_bounded() -> None:
    """Files in /tmp and /dev/shm and heap memory together stay within ``memory_mb``."""
    limits = Limits(memory_mb=320, tmp_mb=64, shm_mb=8, file_size_mb=16)
    with session("bwrap", limits) as worker:
        result = run(worker, HOARD)
        used = worker.memory_mb()
    assert int(result.output) > 0  # it did hold memory
    assert used is not None and 64 + 8 < used <= limits.memory_mb, used


def test_limits_keep_room_for_the_interpreter() -> None:
    with pytest.raises(ValueError, match="address space"):
        Limits(memory_mb=300, tmp_mb=256)


def test_the_allow_list_matches_libseccomp() -> None:
    """Our syscall numbers are the kernel's, as libseccomp (Debian's library) knows them."""
    lib = ctypes.CDLL("libseccomp.so.2")
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    for machine in ("x86_64", "aarch64"):
        arch = lib.seccomp_arch_resolve_name(machine.encode())
        table = syscall_table(machine)
        assert table is not None
        for name, number in {**table[0], **table[1]}.items():
            assert lib.seccomp_syscall_resolve_name_arch(arch, name.encode()) == number, name
        assert "memfd_create" not in table[0] and "rt_sigqueueinfo" not in table[0]
        program = seccomp_program(machine, 2)
        assert program is not None and len(program) // 8 < 4096  # the kernel's bound


def test_unsupported_machines_get_no_filter() -> None:
    assert seccomp_program("sparc", 1) is None and syscall_table("sparc") is None
    assert forked_program("sparc") is None


if __name__ == "__main__":  # pragma: no cover - a manual check
    sys.exit(pytest.main([__file__]))
