"""The worker process: started, handed the runtime, checked for life, killed.

:class:`WorkerProcess` owns one process at a time, its channel, its stderr file and (without
bwrap) its temporary directory. Starting it runs the bootstrap under the sandbox command, sends
the runtime bundle and the ``init`` message (proxies, limits), and waits for ``ready``; killing
it kills its whole process group and releases everything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import select
import signal
import socket
import subprocess
import tempfile
from typing import IO, Any

from controlscope import _proc
from controlscope._leftovers import make_dir
from controlscope._tree import remove_tree
from controlscope.core import Isolation
from controlscope.worker import _sandbox
from controlscope.worker._channel import Channel, ChannelTimeout, ProtocolViolation, WorkerGone
from controlscope.worker._fork import ForkSupervisor, OpenFiles, fresh_descriptions, open_files
from controlscope.worker._proxies import ProxySet
from controlscope.worker._types import Limits

log = logging.getLogger(__name__)

#: Seconds the worker may take to start and answer ``ready``.
START_TIMEOUT_S = 20.0
#: Default seconds each side polls the channel before sleeping (see ``WorkerSession``);
#: measured with ``benchmarks/boundary_overhead.py``: a keep round trip takes about 0.04 ms with
#: these and 0.16 ms without.
CONTROLLER_SPIN_S = 150e-6
WORKER_SPIN_S = 200e-6
#: The longest spin either side may be given, in seconds.
MAX_SPIN_S = 0.01
_STDERR_TAIL = 2000


class WorkerStartError(RuntimeError):
    """The worker process could not be started or did not answer ``ready``."""


class ForkError(RuntimeError):
    """A paused worker could not be forked (unsupported here, refused, or it misbehaved)."""


class _Adopted:
    """A forked worker: a child of the worker, not of the controller, so it is watched and
    killed through a pidfd (its exit status belongs to its parent)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd = os.pidfd_open(pid)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._fd], [], [], 0)[0]:
            self.returncode = 0  # ended; how is its parent's to know
        return self.returncode

    def wait(self, timeout: float) -> int:
        if self.returncode is None and not select.select([self._fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)
        self.returncode = 0
        return 0

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self._fd, signal.SIGKILL)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


class WorkerProcess:
    """One worker process at a time, under the given isolation.

    Args:
        isolation: ``"bwrap"`` or ``"none"`` (already resolved).
        limits: the rlimits, ``/tmp`` size and output bound handed to the worker.
        spin_s: seconds the controller polls the channel before sleeping.
        worker_spin_s: the same for the worker.

    Raises:
        ValueError: a spin time outside [0, MAX_SPIN_S].
    """

    def __init__(
        self, isolation: Isolation, limits: Limits, *, spin_s: float, worker_spin_s: float
    ) -> None:
        if not (0 <= spin_s <= MAX_SPIN_S and 0 <= worker_spin_s <= MAX_SPIN_S):  # refuses NaN
            raise ValueError(
                f"spin times must lie in [0, {MAX_SPIN_S:g}] seconds, not {spin_s}, "
                f"{worker_spin_s} (a longer spin only burns CPU, e.g. during every review)"
            )
        self.isolation = isolation
        self._limits = limits
        self._spin_s = spin_s
        self._worker_spin_s = worker_spin_s
        self._proc: subprocess.Popen[bytes] | _Adopted | None = None
        self._chan: Channel | None = None
        self._handoff: socket.socket | None = None
        self._handoff_fd = -1
        self._supervisor: ForkSupervisor | None = None
        self._owns_supervisor = False
        self._host_pid: int | None = None
        self._stderr: IO[bytes] | None = None
        self._tmpdir: str | None = None
        self.seccomp = False
        """Whether the running worker installed its seccomp filter."""

    @property
    def running(self) -> bool:
        """Whether a process was started and not killed since (it may have died meanwhile)."""
        return self._proc is not None

    @property
    def forks(self) -> bool:
        """Whether the running worker can be forked at a boundary (:meth:`fork`): its
        process-creating calls go to the controller's fork supervisor."""
        return self._supervisor is not None

    @property
    def pid(self) -> int | None:
        """The worker's process id as the controller sees it (bwrap's, under bwrap)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def channel(self) -> Channel:
        """The running worker's channel.

        Raises:
            RuntimeError: no worker is running.
        """
        if self._chan is None:
            raise RuntimeError("the worker is not running")
        return self._chan

    def exited(self) -> bool:
        """Whether the started process has exited (without being killed by :meth:`kill`)."""
        return self._proc is not None and self._proc.poll() is not None

    def start(self, proxies: ProxySet, seed: int = 0) -> None:
        """Start a worker: spawn it, send the runtime and ``init``, wait for ``ready``.

        Args:
            proxies: the tool proxies the worker defines in every block.
            seed: the seed each block's ``random`` is seeded from (with the block's id).

        Raises:
            WorkerStartError: the process did not start or did not answer in time.
        """
        self._spawn()
        lim = self._limits
        init = {
            "t": "init",
            "proxies": proxies.source,
            "names": list(proxies.params),
            "tools": proxies.tools,
            "params": proxies.signatures,
            "seed": seed,
            "fork_fd": None if self._handoff is None else self._handoff_fd,
            "output_chars": lim.output_chars,
            "spin_s": self._worker_spin_s,
            "limits": {
                "memory_mb": lim.address_space_mb,
                "open_files": lim.open_files,
                "cpu_s": lim.cpu_s,
                "processes": lim.processes,
                "file_size_mb": lim.file_size_mb,
            },
        }
        try:
            self.channel.send_raw(_sandbox.runtime_frame())
            self.channel.send(init)
            ready = self.channel.recv(START_TIMEOUT_S)
        except (ChannelTimeout, WorkerGone, ProtocolViolation) as exc:
            detail = self.stderr_tail()
            self.kill()
            raise WorkerStartError(f"the worker did not start: {exc}; {detail}") from exc
        if ready.get("t") != "ready":
            self.kill()
            raise WorkerStartError(f"the worker answered {ready.get('t')!r} instead of ready")
        self.seccomp = bool(ready.get("seccomp"))
        if not self.seccomp:
            log.warning("worker runs without its seccomp filter (unsupported machine)")
        self._take_listener(bool(ready.get("fork")))

    def _take_listener(self, offered: bool) -> None:
        """Receive the worker's user-notification listener (when it says it sent one) and
        start the fork supervisor on it; without one the worker cannot be forked."""
        sock, self._handoff = self._handoff, None
        if sock is None:
            return
        with sock:
            if not offered:
                return
            try:
                sock.settimeout(START_TIMEOUT_S)
                _msg, fds, _flags, _addr = socket.recv_fds(sock, 1, 1)
            except OSError as exc:
                log.warning("no fork listener from the worker: %s", exc)
                return
        if fds:
            self._supervisor = ForkSupervisor(fds[0])
            self._owns_supervisor = True

    def open_files(self) -> OpenFiles:
        """The regular files the worker holds open (agent code's), with their flags and
        positions (see :func:`~controlscope.worker._fork.open_files`); empty when no worker
        runs or it cannot be found.
        """
        if self._proc is None:
            return {}
        try:
            host = self._host_pid = self._host_pid or self._locate()
        except ProtocolViolation:
            return {}
        return open_files(host)

    def fork(self, timeout_s: float = 10.0, files: OpenFiles | None = None) -> WorkerProcess:
        """Fork this worker, paused at a boundary (waiting for the answer to a call), into a
        child worker on a channel of its own; both then wait for the answer to that call.

        The controller's fork supervisor lets exactly this one fork through (agent code can
        never create a process; see ``_fork.py``). The child runs under the same sandbox and
        filters, shares the worker's ``/tmp`` and ``/dev/shm``, and dies with it (its
        sandbox's process namespace, or process group without bwrap); it counts against the
        worker's ``processes`` limit and has a pid of its own. It then behaves as a replay of
        the same prefix would (the ``random`` module's state is kept). Costs 5 to 20 ms.

        Args:
            timeout_s: bound on each step (the worker's messages, the fork call).
            files: the worker's open files with the positions the child is to find them at
                (:meth:`open_files` at the boundary; default: as they are now). The child
                gets open file descriptions of its own (the worker too: its old ones are
                replaced), so that its reads and writes do not move another fork's positions.

        Returns:
            The child, a running :class:`WorkerProcess` (kill it with :meth:`kill`).

        Raises:
            ForkError: forks are not supervised here (:attr:`forks`), or the fork failed or
                the worker broke the protocol (then its state is unknown: kill it).
        """
        supervisor = self._supervisor
        if supervisor is None or self._proc is None:
            raise ForkError("this worker cannot be forked (no fork supervisor)")
        nonce = secrets.token_hex(8)
        c_r, p_w = os.pipe()  # controller -> child
        p_r, c_w = os.pipe()  # child -> controller
        child: WorkerProcess | None = None
        held: int | None = None
        try:
            host = self._host_pid = self._host_pid or self._locate()
            supervisor.arm(host)
            self.channel.send({"t": "fork", "nonce": nonce}, timeout_s)
            numbers = _numbers(self.channel.recv(timeout_s), nonce)
            held = supervisor.take(timeout_s)
            fresh = fresh_descriptions(host, open_files(host) if files is None else files)
            try:
                supervisor.allow(held, numbers, (c_r, c_w), fresh)
            finally:
                for fd, _number, _flags in fresh:
                    os.close(fd)
            child_ns = _forked(self.channel.recv(timeout_s), nonce)
            child = self._adopt(host, child_ns, Channel(p_r, p_w, spin_s=self._spin_s))
            if _forked(child.channel.recv(timeout_s), nonce) != 0:
                raise ProtocolViolation("the child did not report as the child")
        except (ChannelTimeout, WorkerGone, ProtocolViolation, TimeoutError, OSError) as exc:
            if held is None:
                supervisor.disarm()
            if child is not None:
                child.kill()
            else:
                os.close(p_r)
                os.close(p_w)
            raise ForkError(f"the worker could not be forked: {exc}") from exc
        finally:
            os.close(c_r)
            os.close(c_w)
        return child

    def scratch_dirs(self) -> list[str]:
        """The directories, as this process reaches them, that agent code writes besides the
        workspace and that the worker's forks share: the sandbox's ``/tmp`` and ``/dev/shm``
        under bwrap (through ``/proc``), the worker's own working directory without (where
        agent code can write anywhere). Empty when no worker runs.

        Raises:
            ForkError: the worker's interpreter cannot be found.
        """
        if self._proc is None:
            return []
        if self.isolation == "none":
            return [self._tmpdir] if self._tmpdir is not None else []
        try:
            host = self._host_pid = self._host_pid or self._locate()
        except ProtocolViolation as exc:
            raise ForkError(str(exc)) from exc
        return [f"/proc/{host}/root/{mount}" for mount in ("tmp", "dev/shm")]

    def _locate(self) -> int:
        """The host pid of the worker's interpreter (under bwrap, below bwrap's processes)."""
        assert self._proc is not None
        if isinstance(self._proc, _Adopted) or self.isolation == "none":
            return self._proc.pid
        below = _proc.descendants(self._proc.pid)
        if not below:
            raise ProtocolViolation("the worker's interpreter is gone")
        return below[-1]

    def _adopt(self, parent: int, child_ns: int, chan: Channel) -> WorkerProcess:
        """The controller's handle on the child ``child_ns`` (pid in the sandbox) of the
        worker process ``parent`` (host pid), on channel ``chan``."""
        found = [pid for pid in _proc.children(parent) if _proc.ns_pid(pid) == child_ns]
        if len(found) != 1:
            chan.close()
            raise ProtocolViolation(f"no forked child {child_ns} of the worker")
        child = WorkerProcess(
            self.isolation,
            self._limits,
            spin_s=self._spin_s,
            worker_spin_s=self._worker_spin_s,
        )
        child._proc = _Adopted(found[0])
        child._chan = chan
        child._host_pid = found[0]
        child._supervisor = self._supervisor
        child.seccomp = self.seccomp
        return child

    def _spawn(self) -> None:
        """Start the process under the sandbox command with its two channel pipes."""
        c_r, p_w = os.pipe()  # controller -> worker
        p_r, c_w = os.pipe()  # worker -> controller
        # the worker hands its fork listener over this socket before agent code runs
        self._handoff, handoff = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._handoff_fd = handoff.fileno()
        cwd = "/"
        env = dict(_sandbox.WORKER_ENV)
        if self.isolation == "none":
            self._tmpdir = str(make_dir("controlscope-worker-"))
            cwd = env["HOME"] = env["TMPDIR"] = self._tmpdir
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        try:
            self._proc = subprocess.Popen(
                _sandbox.worker_command(
                    self.isolation, c_r, c_w, self._limits.tmp_mb, self._limits.shm_mb
                ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                pass_fds=(c_r, c_w, self._handoff_fd),
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            for fd in (c_r, c_w, p_r, p_w):
                os.close(fd)
            self.kill()  # releases the stderr file and the temporary directory
            raise WorkerStartError(f"cannot start the worker: {exc}") from exc
        finally:
            handoff.close()
            if self._proc is not None:
                os.close(c_r)
                os.close(c_w)
        self._chan = Channel(p_r, p_w, spin_s=self._spin_s)

    def kill(self) -> bool:
        """Kill the process group and release the channel, stderr file and temporary directory.

        Returns:
            Whether a process was running (and is now dead). Idempotent.
        """
        proc, self._proc = self._proc, None
        below: list[tuple[int, str]] = []
        if proc is not None:
            if not isinstance(proc, _Adopted):  # a forked worker is no group leader
                below = _proc.kill_below(proc.pid)  # the sandbox's init first: bwrap reaps it
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            if isinstance(proc, _Adopted):
                proc.release()
            else:  # those handed to this process (its forks, the sandbox's init)
                _proc.reap_orphans(below)
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None and self._owns_supervisor:
            supervisor.close()
        self._owns_supervisor, self._host_pid = False, None
        if self._handoff is not None:
            self._handoff.close()
            self._handoff = None
        if self._chan is not None:
            self._chan.close()
            self._chan = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._tmpdir is not None:
            tmpdir, self._tmpdir = self._tmpdir, None
            try:
                remove_tree(tmpdir)  # agent code shaped it: no recursion, however deep
            except OSError as exc:
                log.warning("could not remove the worker's directory %s: %s", tmpdir, exc)
        return proc is not None

    def abandon(self) -> None:
        """Forget the process without touching it: in a controller process forked while
        this worker ran (a branch by fork), the worker, its channel and its files belong to
        the controller that started it, which ends them. The inherited descriptors of the
        channel are closed (this process must never speak on them)."""
        if self._chan is not None:
            self._chan.close()
        self._proc = self._chan = self._handoff = self._supervisor = None
        self._stderr = self._tmpdir = None
        self._owns_supervisor, self._host_pid = False, None

    def memory_mb(self) -> float | None:
        """The worker's memory as :attr:`Limits.memory_mb` bounds it, in MiB: the peak resident
        memory of its processes plus what its memory-backed files hold (its ``/tmp`` and
        ``/dev/shm`` under bwrap, read through ``/proc``). None when no worker runs or
        ``/proc`` cannot tell."""
        if self._proc is None:
            return None
        pids = [self._proc.pid, *_proc.descendants(self._proc.pid)]
        peak_kib = sum(_proc.status_kib(pid, "VmHWM") for pid in pids)
        files = 0
        if self.isolation == "bwrap":
            inner = pids[-1]
            for mount in ("tmp", "dev/shm"):
                try:
                    fs = os.statvfs(f"/proc/{inner}/root/{mount}")
                except OSError:
                    return None
                files += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
        return peak_kib / 1024 + files / 2**20

    def stderr_tail(self) -> str:
        """The end of the worker's stderr (``worker stderr: ...``), or ``""``."""
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - _STDERR_TAIL))
            text = self._stderr.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"worker stderr: {text}" if text else ""

    def death_reason(self) -> str:
        """Why the worker is gone: its exit code or signal (with the limit it hints at) and the
        tail of its stderr. Waits at most a second for the exit status."""
        proc = self._proc
        if proc is None:
            return "the worker is gone"
        if isinstance(proc, _Adopted):
            return "the forked worker ended" if proc.poll() is not None else "it closed its channel"
        try:
            code = proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "the worker closed its channel"
        signum = -code if code < 0 else code - 128 if code > 128 else 0
        try:
            name = signal.Signals(signum).name if signum else ""
        except ValueError:
            name = f"signal {signum}"
        hint = {"SIGXCPU": " (CPU-seconds limit)", "SIGXFSZ": " (file-size limit)"}.get(name, "")
        if code < 0:
            reason = f"the worker died from {name}{hint}"
        else:
            reason = f"the worker exited with code {code}"
            if name:
                reason += f" ({name}{hint})"
        tail = self.stderr_tail()
        return f"{reason}; {tail}" if tail else reason


def _numbers(msg: dict[str, Any], nonce: str) -> tuple[int, int]:
    """The descriptor numbers a ``forking`` message announces for the child's channel.

    Raises:
        ProtocolViolation: another message, or numbers that are not two distinct fds.
    """
    fds = msg.get("fds")
    if msg.get("t") != "forking" or msg.get("nonce") != nonce or not isinstance(fds, list):
        raise ProtocolViolation(f"expected the worker's forking message, got {msg.get('t')!r}")
    if (
        len(fds) != 2
        or fds[0] == fds[1]
        or not all(type(f) is int and 3 <= f < 1 << 20 for f in fds)
    ):
        raise ProtocolViolation("the worker announced unusable descriptors for the child")
    return fds[0], fds[1]


def _forked(msg: dict[str, Any], nonce: str) -> int:
    """The pid a ``forked`` message reports (0 from the child).

    Raises:
        ProtocolViolation: another message, or the fork failed in the worker.
    """
    if msg.get("t") != "forked" or msg.get("nonce") != nonce:
        raise ProtocolViolation(f"expected a forked message, got {msg.get('t')!r}")
    pid = msg.get("pid")
    if type(pid) is not int or pid < 0:
        raise ProtocolViolation(f"the fork failed in the worker: {msg.get('error')!r}")
    return pid
