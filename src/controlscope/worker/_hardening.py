"""In-process hardening of the worker, applied before agent code runs (in both isolation modes).

Resource limits, empty capability sets, a seccomp filter, the runtime's audit hook, the reset of
interpreter-wide hooks before every block, and the signal gate around boundary waits.

STANDARD LIBRARY ONLY: this module is part of the worker runtime bundle (see ``_runtime.py``),
run by a bare interpreter inside the sandbox; the controller imports it too.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import os
import signal
import struct
import sys
from typing import Any

# Taken now, before agent code can rebind the modules' attributes.
_getframe, _gettrace, _settrace, _setprofile = (
    sys._getframe,
    sys.gettrace,
    sys.settrace,
    sys.setprofile,
)
_signal, _setitimer, _sigmask = signal.signal, signal.setitimer, signal.pthread_sigmask
_getsignal, _gc_callbacks = signal.getsignal, gc.callbacks


def _apply_rlimits(limits: dict[str, int]) -> None:
    """Set address space (``memory_mb``), CPU seconds (``cpu_s``), processes (``processes``),
    file size (``file_size_mb``), open descriptors (``open_files``) and core size (0); soft =
    hard, so they cannot be raised."""
    import resource

    mb = 1024 * 1024
    wanted = {
        resource.RLIMIT_AS: limits["memory_mb"] * mb,
        resource.RLIMIT_CPU: limits["cpu_s"],
        resource.RLIMIT_NPROC: limits["processes"],
        resource.RLIMIT_FSIZE: limits["file_size_mb"] * mb,
        resource.RLIMIT_NOFILE: limits.get("open_files", 256),
        resource.RLIMIT_CORE: 0,
    }
    for which, value in wanted.items():
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


#: The syscalls the worker may make once its filter is installed, as ``name x86_64 aarch64``
#: (``-`` where an architecture lacks the call; libseccomp's tables, checked by the tests): the
#: interpreter's file, memory, signal, time and polling calls. The calls after ``ALLOW-END``
#: are allowed only for some arguments (see :func:`seccomp_program`). Everything else fails
#: with ``EPERM``: among them processes and threads, ``exec``, sockets, ``memfd_create`` and
#: System V shared memory (memory outside the worker's bounds), signals to other processes
#: (``rt_sigqueueinfo``, ``rt_tgsigqueueinfo``, ``tkill``, pidfds), tracing, namespaces,
#: mounts, keyrings, BPF and ``io_uring``.
_SYSCALLS = """
read 0 63 | write 1 64 | poll 7 - | ppoll 271 73 | futex 202 98 | sched_yield 24 124
mmap 9 222 | munmap 11 215 | brk 12 214 | madvise 28 233 | mremap 25 216
rt_sigprocmask 14 135 | rt_sigaction 13 134 | setitimer 38 103
clock_gettime 228 113 | openat 257 56 | newfstatat 262 79 | fstat 5 80 | close 3 57
lseek 8 62 | getdents64 217 61 | readv 19 65 | writev 20 66 | pread64 17 67
pwrite64 18 68 | preadv 295 69 | pwritev 296 70 | preadv2 327 286 | pwritev2 328 287
open 2 - | openat2 437 437 | close_range 436 436 | creat 85 - | stat 4 - | lstat 6 -
statx 332 291 | fstatfs 138 44 | statfs 137 43 | access 21 - | faccessat 269 48
faccessat2 439 439 | getdents 78 - | getcwd 79 17 | chdir 80 49 | fchdir 81 50
mkdir 83 - | mkdirat 258 34 | rmdir 84 - | unlink 87 - | unlinkat 263 35
rename 82 - | renameat 264 38 | renameat2 316 276 | link 86 - | linkat 265 37
symlink 88 - | symlinkat 266 36 | readlink 89 - | readlinkat 267 78 | chmod 90 -
fchmod 91 52 | fchmodat 268 53 | chown 92 - | fchown 93 55 | lchown 94 -
fchownat 260 54 | utimensat 280 88 | utimes 235 - | utime 132 - | futimesat 261 -
truncate 76 45 | ftruncate 77 46 | fsync 74 82 | fdatasync 75 83 | fallocate 285 47
fadvise64 221 223 | flock 73 32 | dup 32 23 | dup2 33 - | dup3 292 24 | pipe 22 -
pipe2 293 59 | sendfile 40 71 | copy_file_range 326 285 | splice 275 76 | tee 276 77
umask 95 166 | getxattr 191 8 | lgetxattr 192 9 | fgetxattr 193 10 | listxattr 194 11
llistxattr 195 12 | flistxattr 196 13 | setxattr 188 5 | lsetxattr 189 6
fsetxattr 190 7 | removexattr 197 14 | lremovexattr 198 15 | fremovexattr 199 16
mprotect 10 226 | msync 26 227 | mincore 27 232 | set_robust_list 273 99
rt_sigreturn 15 139 | rt_sigpending 127 136 | rt_sigsuspend 130 133
rt_sigtimedwait 128 137 | sigaltstack 131 132 | pause 34 - | getitimer 36 102
alarm 37 - | nanosleep 35 101 | clock_nanosleep 230 115 | clock_getres 229 114
gettimeofday 96 169 | time 201 - | times 100 153 | getrusage 98 165 | select 23 -
pselect6 270 72 | epoll_create 213 - | epoll_create1 291 20 | epoll_ctl 233 21
epoll_wait 232 - | epoll_pwait 281 22 | epoll_pwait2 441 441 | eventfd 284 -
eventfd2 290 19 | getpid 39 172 | getppid 110 173 | gettid 186 178 | getuid 102 174
geteuid 107 175 | getgid 104 176 | getegid 108 177 | getgroups 115 158
getresuid 118 148 | getresgid 120 150 | getpgid 121 155 | getpgrp 111 -
getsid 124 156 | uname 63 160 | sysinfo 99 179 | getrlimit 97 163
getpriority 140 141 | sched_getaffinity 204 123 | sched_getparam 143 121
sched_getscheduler 145 120 | sched_get_priority_max 146 125
sched_get_priority_min 147 126 | getcpu 309 168 | getrandom 318 278 | capget 125 90
exit 60 93 | exit_group 231 94 | wait4 61 260 | waitid 247 95
restart_syscall 219 128 | arch_prctl 158 - | prctl 157 167 | set_tid_address 218 96
rseq 334 293 | mknod 133 - | mknodat 259 33
ALLOW-END
kill 62 129 | tgkill 234 131 | prlimit64 302 261 | fcntl 72 25 | ioctl 16 29
clone3 435 435 | clone 56 220
"""

#: ``AUDIT_ARCH_*`` of each supported machine.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

_ALLOW, _EPERM, _ENOSYS, _KILL = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38, 0x80000000
_USER_NOTIF = 0x7FC00000
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
#: ``clone`` flag of a new thread (threads stay refused whatever the supervisor says).
CLONE_THREAD = 0x00010000
#: ``seccomp(2)``'s number per machine, its ``SECCOMP_SET_MODE_FILTER`` operation and the flag
#: that returns a user-notification listener.
_SECCOMP_NR = {"x86_64": 317, "aarch64": 277}
_SET_MODE_FILTER, _FLAG_NEW_LISTENER = 1, 1 << 3
#: ``prctl``'s way of adding a filter (``seccomp(2)`` is refused once the allow-list is in).
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
#: ``fcntl`` and ``ioctl`` commands refused: pipe buffers beyond the default (kernel memory
#: outside every bound), and typing into or controlling a terminal.
_F_SETPIPE_SZ, _TIOCSTI, _TIOCLINUX = 1031, 0x5412, 0x541C


def syscall_table(machine: str) -> tuple[dict[str, int], dict[str, int]] | None:
    """The allowed and the argument-checked syscalls of ``machine``, by name (None when the
    machine is not supported)."""
    if machine not in _AUDIT_ARCH:
        return None
    column = 1 if machine == "x86_64" else 2
    allowed: dict[str, int] = {}
    checked: dict[str, int] = {}
    target = allowed
    for line in _SYSCALLS.strip().splitlines():
        if line == "ALLOW-END":
            target = checked
            continue
        for item in line.split(" | "):
            fields = item.split()
            if fields[column] != "-":
                target[fields[0]] = int(fields[column])
    return allowed, checked


def seccomp_program(
    machine: str, pid: int, pgid: int | None = None, *, supervised_fork: bool = False
) -> bytes | None:
    """A classic-BPF seccomp filter (an allow-list) for the worker process ``pid``.

    Allowed: the calls of :data:`_SYSCALLS` before ``ALLOW-END``; ``kill`` aimed at the worker
    itself (``pid``), its own process group (``0``, or ``-pgid`` unless the group is 1, whose
    negation means every process; ``pgid`` defaults to ``pid``); ``tgkill``
    within the worker; ``prlimit64`` on the worker itself; ``fcntl`` but ``F_SETPIPE_SZ``;
    ``ioctl`` but ``TIOCSTI``/``TIOCLINUX``. ``clone3`` answers ``ENOSYS`` (the C library
    then tries ``clone``, which fails with ``EPERM``, so ``threading.Thread.start()`` raises
    ``RuntimeError``: a thread would outlive its block and could forge messages while a later
    block runs). Everything else fails with ``EPERM``; a syscall of a foreign ABI (x32, or
    another architecture) kills the process.

    With ``supervised_fork``, ``clone`` without ``CLONE_THREAD`` is let through this filter so
    that the one below it (:func:`fork_notify_program`, installed first) decides: it hands the
    call to the controller's fork supervisor, which refuses it unless the controller itself is
    forking the paused worker (see ``_fork.py``). Threads stay refused here.

    Args:
        machine: ``os.uname().machine``.
        pid: the worker's process id (as it sees itself).
        pgid: its process group (default ``pid``).
        supervised_fork: whether :func:`fork_notify_program` is installed below this filter.

    Returns:
        The program (8 bytes per instruction), or None for an unsupported machine.
    """
    table = syscall_table(machine)
    if table is None:
        return None
    allowed, checked = table
    group = pgid or pid
    # -pgid as the low 32 bits of the argument; a group 1 (the sandbox's init) would read as -1,
    # "every process": kill(0, ...) reaches the own group anyway.
    targets = (0, pid, (1 << 32) - group) if group > 1 else (0, pid)
    program = [(_LD, 0, 0, 4), (_JEQ, 1, 0, _AUDIT_ARCH[machine]), (_RET, 0, 0, _KILL)]
    program.append((_LD, 0, 0, 0))
    if machine == "x86_64":  # the x32 ABI: its calls have bit 30 set
        program += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, _EPERM)]
    program += _only_if(checked["kill"], 0, targets)
    program += _only_if(checked["tgkill"], 0, (pid,))
    program += _only_if(checked["prlimit64"], 0, (0, pid))
    program += _unless(checked["fcntl"], 1, (_F_SETPIPE_SZ,))
    program += _unless(checked["ioctl"], 1, (_TIOCSTI, _TIOCLINUX))
    program += [(_JEQ, 0, 1, checked["clone3"]), (_RET, 0, 0, _ENOSYS)]
    if supervised_fork:
        program += _fork_like(checked["clone"], _ALLOW)
    for number in allowed.values():
        program += [(_JEQ, 0, 1, number), (_RET, 0, 0, _ALLOW)]
    program.append((_RET, 0, 0, _EPERM))
    return b"".join(struct.pack("<HBBI", *ins) for ins in program)


Instruction = tuple[int, int, int, int]


def fork_notify_program(machine: str) -> bytes | None:
    """The filter installed below :func:`seccomp_program` when forks are supervised: ``clone``
    without ``CLONE_THREAD`` goes to the user-notification listener (the controller's fork
    supervisor answers); every other call is left to the allow-list above it.

    Returns:
        The program (8 bytes per instruction), or None for an unsupported machine.
    """
    table = syscall_table(machine)
    if table is None:
        return None
    program = [(_LD, 0, 0, 4), (_JEQ, 1, 0, _AUDIT_ARCH[machine]), (_RET, 0, 0, _ALLOW)]
    program += [(_LD, 0, 0, 0), *_fork_like(table[1]["clone"], _USER_NOTIF), (_RET, 0, 0, _ALLOW)]
    return b"".join(struct.pack("<HBBI", *ins) for ins in program)


def forked_program(machine: str) -> bytes | None:
    """The filter a forked worker adds over those it inherited, which name the worker it was
    forked from as "the worker itself" (its pid and group): ``kill`` and ``tgkill`` fail
    with ``EPERM`` (the inherited filters let them reach only that worker, its group or
    itself as that worker), ``prlimit64`` is allowed on itself only (``0``).

    Returns:
        The program (8 bytes per instruction), or None for an unsupported machine.
    """
    table = syscall_table(machine)
    if table is None:
        return None
    checked = table[1]
    program = [(_LD, 0, 0, 4), (_JEQ, 1, 0, _AUDIT_ARCH[machine]), (_RET, 0, 0, _KILL)]
    program.append((_LD, 0, 0, 0))
    for name in ("kill", "tgkill"):
        program += [(_JEQ, 0, 1, checked[name]), (_RET, 0, 0, _EPERM)]
    program += _only_if(checked["prlimit64"], 0, (0,))
    program.append((_RET, 0, 0, _ALLOW))
    return b"".join(struct.pack("<HBBI", *ins) for ins in program)


def _confine_fork() -> bool:
    """Add :func:`forked_program` in a forked worker (with ``prctl``: the inherited filters
    refuse ``seccomp(2)``). True once it is in force."""
    import ctypes

    program = forked_program(os.uname().machine)
    if program is None:
        return False

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _Fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_char_p))
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0)


def _fork_like(clone: int, action: int) -> list[Instruction]:
    """``clone`` (number ``clone``) without ``CLONE_THREAD`` returns ``action``, with it
    ``EPERM``; other syscalls skip the block (the accumulator holds the syscall number)."""
    block = [(_LD, 0, 0, 16), (_JSET, 1, 0, CLONE_THREAD), (_RET, 0, 0, action)]
    block += [(_RET, 0, 0, _EPERM)]
    return [(_JEQ, 0, len(block), clone), *block]


def _only_if(number: int, arg: int, values: tuple[int, ...]) -> list[Instruction]:
    """Syscall ``number`` is allowed when the low 32 bits of argument ``arg`` are one of
    ``values``, else ``EPERM``; other syscalls skip the block."""
    n = len(values)
    block = [(_LD, 0, 0, 16 + 8 * arg)]
    block += [(_JEQ, n - i, 0, value) for i, value in enumerate(values)]
    block += [(_RET, 0, 0, _EPERM), (_RET, 0, 0, _ALLOW)]
    return [(_JEQ, 0, len(block), number), *block]


def _unless(number: int, arg: int, values: tuple[int, ...]) -> list[Instruction]:
    """Syscall ``number`` fails with ``EPERM`` when the low 32 bits of argument ``arg`` are
    one of ``values``, else it is allowed; other syscalls skip the block."""
    n = len(values)
    block = [(_LD, 0, 0, 16 + 8 * arg)]
    block += [(_JEQ, n - i, 0, value) for i, value in enumerate(values)]
    block += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _EPERM)]
    return [(_JEQ, 0, len(block), number), *block]


def _drop_capabilities() -> bool:
    """Empty the effective, permitted and inheritable capability sets (a root worker keeps uid
    0 but can no longer raise rlimits or bypass permission checks). True on success."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # two __user_cap_data_struct, all zero
    return bool(libc.capset(header, data) == 0)


def _install(libc: Any, program: bytes, flags: int = 0) -> int:
    """Install one filter with ``seccomp(2)`` (``flags``: ``SECCOMP_FILTER_FLAG_*``); its
    result (a listener fd with ``NEW_LISTENER``, else 0), or -1 on failure."""
    import ctypes

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _Fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_char_p))
    number = _SECCOMP_NR[os.uname().machine]
    return int(libc.syscall(number, _SET_MODE_FILTER, flags, ctypes.byref(fprog)))


def _hand_over_listener(libc: Any, handoff_fd: int) -> bool:
    """Install :func:`fork_notify_program` and send its listener to the controller over the
    unix socket ``handoff_fd`` (then close both: agent code never holds the listener). True
    when the controller got it."""
    import socket

    program = fork_notify_program(os.uname().machine)
    listener = -1 if program is None else _install(libc, program, _FLAG_NEW_LISTENER)
    try:
        with socket.socket(fileno=handoff_fd) as sock:
            sock.settimeout(10)
            fds = [listener] if listener >= 0 else []
            socket.send_fds(sock, [b"L" if fds else b"-"], fds)
    except OSError:
        return False
    finally:
        if listener >= 0:
            os.close(listener)
    return listener >= 0


def _apply_seccomp(handoff_fd: int | None = None) -> tuple[bool, bool]:
    """Install :func:`seccomp_program` (after ``PR_SET_NO_NEW_PRIVS``).

    With ``handoff_fd`` (a unix socket to the controller), forks are supervised: the
    :func:`fork_notify_program` filter goes in first and its listener to the controller.

    Returns:
        Whether the allow-list is in force, and whether forks are supervised.
    """
    machine = os.uname().machine
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if syscall_table(machine) is None or libc.prctl(38, 1, 0, 0, 0) != 0:  # NO_NEW_PRIVS
        if handoff_fd is not None:
            os.close(handoff_fd)
        return False, False
    supervised = handoff_fd is not None and _hand_over_listener(libc, handoff_fd)
    program = seccomp_program(machine, os.getpid(), os.getpgid(0), supervised_fork=supervised)
    if program is None or _install(libc, program) != 0:
        return False, False
    return True, supervised


def _refuse_audit_hooks(event: str, args: tuple[Any, ...]) -> None:
    """The runtime's audit hook: agent code may not add audit hooks of its own (one would run
    inside later blocks, e.g. at the runtime's ``exec`` of a replacement)."""
    if event == "sys.addaudithook":
        raise RuntimeError("audit hooks are not available in the controlscope worker")


class _Hooks:
    """Interpreter-wide hooks as they were before agent code ran, restored before every block.

    A block (say, one being replaced) must leave nothing that runs later on its own: signal
    handlers and interval timers, the signal mask, ``gc`` callbacks, trace/profile functions,
    ``sys`` display/except/unraisable hooks, and rebound builtins are all reset.
    """

    def __init__(self) -> None:
        self.handlers: dict[int, Any] = {}
        for sig in signal.valid_signals():
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            handler = signal.getsignal(sig)
            self.handlers[sig] = signal.SIG_DFL if handler is None else handler
        # The cancellation timer may leave a SIGALRM in flight: never let it end the process.
        self.handlers[signal.SIGALRM] = signal.SIG_IGN
        self.builtins = dict(builtins.__dict__)

    def restore(self) -> None:
        for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
            _setitimer(timer, 0)
        _sigmask(signal.SIG_SETMASK, set())
        for sig, handler in self.handlers.items():
            current = _getsignal(sig)
            if current is not handler and current is not None:
                with contextlib.suppress(OSError, ValueError):
                    _signal(sig, handler)
        _gc_callbacks.clear()
        _settrace(None)
        _setprofile(None)
        sys.displayhook = sys.__displayhook__
        sys.excepthook = sys.__excepthook__
        sys.unraisablehook = sys.__unraisablehook__
        sys.breakpointhook = sys.__breakpointhook__
        current_builtins = builtins.__dict__
        for name, value in self.builtins.items():
            if current_builtins.get(name) is not value:
                current_builtins[name] = value


class _SignalGate:
    """Blocks every signal around a boundary wait (``pthread_sigmask`` through ctypes: the
    ``signal`` module's version costs ~100 us per pair, this one ~3 us)."""

    def __init__(self) -> None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            self._full = ctypes.create_string_buffer(256)
            self._old = ctypes.create_string_buffer(256)
            libc.sigfillset(self._full)
            self._mask: Any = libc.pthread_sigmask
        except (ImportError, OSError, AttributeError):
            self._mask = None
            self._saved: Any = None

    def block(self) -> None:
        if self._mask is not None:
            self._mask(0, self._full, self._old)  # SIG_BLOCK
        else:
            self._saved = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())

    def restore(self) -> None:
        if self._mask is not None:
            self._mask(2, self._old, None)  # SIG_SETMASK
        else:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._saved)
