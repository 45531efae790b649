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
import signal
import subprocess
import tempfile
from typing import IO

from controlscope import _proc
from controlscope._tree import remove_tree
from controlscope.core import Isolation
from controlscope.worker import _sandbox
from controlscope.worker._channel import Channel, ChannelTimeout, ProtocolViolation, WorkerGone
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
        self._proc: subprocess.Popen[bytes] | None = None
        self._chan: Channel | None = None
        self._stderr: IO[bytes] | None = None
        self._tmpdir: str | None = None
        self.seccomp = False
        """Whether the running worker installed its seccomp filter."""

    @property
    def running(self) -> bool:
        """Whether a process was started and not killed since (it may have died meanwhile)."""
        return self._proc is not None

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

    def _spawn(self) -> None:
        """Start the process under the sandbox command with its two channel pipes."""
        c_r, p_w = os.pipe()  # controller -> worker
        p_r, c_w = os.pipe()  # worker -> controller
        cwd = "/"
        env = dict(_sandbox.WORKER_ENV)
        if self.isolation == "none":
            self._tmpdir = tempfile.mkdtemp(prefix="controlscope-worker-")
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
                pass_fds=(c_r, c_w),
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
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
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
