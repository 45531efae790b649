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
    file size (``file_size_mb``) and core size (0); soft = hard, so they cannot be raised."""
    import resource

    mb = 1024 * 1024
    wanted = {
        resource.RLIMIT_AS: limits["memory_mb"] * mb,
        resource.RLIMIT_CPU: limits["cpu_s"],
        resource.RLIMIT_NPROC: limits["processes"],
        resource.RLIMIT_FSIZE: limits["file_size_mb"] * mb,
        resource.RLIMIT_CORE: 0,
    }
    for which, value in wanted.items():
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


_SECCOMP_ARCH: dict[str, dict[str, Any]] = {
    "x86_64": {
        "arch": 0xC000003E,
        "x32": True,
        # fork vfork execve execveat tkill ptrace process_vm_readv/writev pidfd_* | unshare
        # setns mount umount2 pivot_root chroot new-mount-API | bpf perf_event_open userfaultfd
        # keyctl add_key request_key io_uring_* | modules kexec reboot swap acct syslog quotactl
        # sethostname setdomainname iopl ioperm | name_to_handle_at open_by_handle_at
        "deny": (
            *(57, 58, 59, 322, 200, 101, 310, 311, 424, 434, 438),
            *(272, 308, 165, 166, 155, 161, 428, 429, 430, 431, 432, 433, 442),
            *(321, 298, 323, 250, 248, 249, 425, 426, 427),
            *(175, 313, 176, 246, 320, 169, 167, 168, 163, 103, 179, 170, 171, 172, 173),
            *(303, 304),
        ),
        "clone": 56,
        "clone3": 435,
        "socket": 41,
        "kill": 62,
        "tgkill": 234,
    },
    "aarch64": {
        "arch": 0xC00000B7,
        "x32": False,
        "deny": (
            *(221, 281, 130, 117, 270, 271, 424, 434, 438),
            *(97, 268, 40, 39, 41, 51, 428, 429, 430, 431, 432, 433, 442),
            *(280, 241, 282, 219, 217, 218, 425, 426, 427),
            *(105, 273, 106, 104, 294, 142, 224, 225, 89, 116, 60, 161, 162),
            *(264, 265),
        ),
        "clone": 220,
        "clone3": 435,
        "socket": 198,
        "kill": 129,
        "tgkill": 131,
    },
}


def seccomp_program(machine: str, pid: int, pgid: int | None = None) -> bytes | None:
    """A classic-BPF seccomp filter for the worker process ``pid``.

    No new processes and no new threads: ``clone`` fails with ``EPERM`` (``clone3`` answers
    ``ENOSYS`` so the C library falls back to ``clone``), so ``threading.Thread.start()`` raises
    ``RuntimeError``. A thread would outlive its block and could forge messages while a later
    block (or a replacement) runs; with the main thread alone, the runtime decides when agent
    code runs. Also denied with ``EPERM``: ``fork``/``vfork``/``execve``/``execveat``,
    ``socket`` outside ``AF_UNIX``, ``ptrace`` and
    cross-process memory access, pidfds, ``tkill``, new namespaces and mounts, BPF, perf,
    userfaultfd, keyrings, io_uring, kernel modules, kexec, reboot, swap, accounting, syslog,
    quotas, host names, port I/O, file handles, and ``kill``/``tgkill`` aimed at any process
    but the worker itself (``pid``) or its own process group (``pgid``, default ``pid``). A
    syscall of a foreign ABI kills the process. Returns None for an unsupported machine.
    """
    spec = _SECCOMP_ARCH.get(machine)
    if spec is None:
        return None
    allow, eperm, enosys, kill = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38, 0x80000000
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    own_group = (1 << 32) - (pgid or pid)  # -pgid as the low 32 bits of the argument
    # Jumps are ("J", op, k, true_label, false_label), resolved after layout; None = next.
    body: list[Any] = [
        (ld, 0, 0, 4),
        ("J", jeq, spec["arch"], None, "KILL"),
        (ld, 0, 0, 0),
    ]
    if spec["x32"]:
        body.append(("J", jge, 0x40000000, "EPERM", None))
    for nr in spec["deny"]:
        body.append(("J", jeq, nr, "EPERM", None))
    body.append(("J", jeq, spec["clone3"], "ENOSYS", None))
    body.append(("J", jeq, spec["clone"], "EPERM", None))
    body.append(("J", jeq, spec["socket"], "SOCKET", None))
    body.append(("J", jeq, spec["kill"], "KILLSYS", None))
    body.append(("J", jeq, spec["tgkill"], "TGKILL", None))
    body.append((ret, 0, 0, allow))
    labels: dict[str, int] = {}
    tail: list[Any] = []  # every jump goes forward, as classic BPF requires

    def label(name: str) -> None:
        labels[name] = len(body) + len(tail)

    label("KILL")
    tail.append((ret, 0, 0, kill))
    label("ENOSYS")
    tail.append((ret, 0, 0, enosys))
    label("SOCKET")
    tail.append((ld, 0, 0, 16))
    tail.append(("J", jeq, 1, "ALLOW", "EPERM"))
    label("KILLSYS")
    tail.append((ld, 0, 0, 16))
    tail.append(("J", jeq, 0, "ALLOW", None))
    tail.append(("J", jeq, own_group, "ALLOW", None))
    tail.append(("J", jeq, pid, "ALLOW", "EPERM"))
    label("TGKILL")
    tail.append((ld, 0, 0, 16))
    tail.append(("J", jeq, pid, "ALLOW", "EPERM"))
    label("EPERM")
    tail.append((ret, 0, 0, eperm))
    label("ALLOW")
    tail.append((ret, 0, 0, allow))
    return _assemble(body + tail, labels)


def _assemble(program: list[Any], labels: dict[str, int]) -> bytes:
    """Classic-BPF bytes of ``program``: ``(op, jt, jf, k)`` instructions and forward jumps
    ``("J", op, k, true_label, false_label)`` (None: the next instruction)."""
    out = []
    for i, ins in enumerate(program):
        if ins[0] == "J":
            _, op, k, t_label, f_label = ins
            jt = 0 if t_label is None else labels[t_label] - (i + 1)
            jf = 0 if f_label is None else labels[f_label] - (i + 1)
            out.append(struct.pack("<HBBI", op, jt, jf, k))
        else:
            op, jt, jf, k = ins
            out.append(struct.pack("<HBBI", op, jt, jf, k))
    return b"".join(out)


def _drop_capabilities() -> bool:
    """Empty the effective, permitted and inheritable capability sets (a root worker keeps uid
    0 but can no longer raise rlimits or bypass permission checks). True on success."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # two __user_cap_data_struct, all zero
    return bool(libc.capset(header, data) == 0)


def _apply_seccomp() -> bool:
    """Install :func:`seccomp_program` (after ``PR_SET_NO_NEW_PRIVS``); True when in force."""
    program = seccomp_program(os.uname().machine, os.getpid(), os.getpgid(0))
    if program is None:
        return False
    import ctypes

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _Fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_char_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return bool(libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0)  # PR_SET_SECCOMP, FILTER


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
