"""The controller's side of one llama.cpp process (:mod:`controlscope.models._local_child`).

:class:`ModelProcess` starts the child with ``python -m controlscope.models._local_child``,
exchanges line-delimited JSON with it over its stdin and stdout, and bounds every wait: a child
that dies (SIGSEGV in a native kernel, the kernel's OOM killer) or exits becomes a
:class:`~controlscope.core.ProviderError` of kind ``runtime_crash``, one that does not answer in
time one of kind ``timeout`` (a request past its deadline) or ``runtime_crash`` (a hang while
loading); the error names the signal, exit status or wait and quotes the tail of the child's
stderr (llama.cpp's log, kept in an anonymous temporary file). A process that failed is killed
and must not be used again.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from controlscope.core import (
    MAX_RESPONSE_BYTES,
    ProviderError,
    ProviderErrorKind,
    escape_untrusted,
    provider_error_kind,
)

__all__ = ["ModelProcess"]

_CHILD_MODULE = "controlscope.models._local_child"
MAX_MESSAGE_BYTES = 8 * MAX_RESPONSE_BYTES
"""The longest line the child may write: an answer of :data:`MAX_RESPONSE_BYTES` JSON-escaped
(at most six bytes a byte) with its fields, or a long prompt's token ids; a longer one is a
``response_too_large`` error (the child is killed)."""
_STDERR_TAIL_BYTES = 4096
_STDERR_TAIL_CHARS = 700
_CLOSE_GRACE_S = 3.0
_REAP_S = 5.0

_NATIVE_FAULTS = {"SIGSEGV", "SIGILL", "SIGBUS", "SIGFPE", "SIGABRT"}


def describe_exit(returncode: int) -> str:
    """Words for a child's exit: ``was killed by signal SIGSEGV (11)``, ``exited with status 1``,
    followed by the usual cause of a native fault or a SIGKILL."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    words = f"was killed by signal {name} ({number})"
    if name in _NATIVE_FAULTS:
        words += (
            " (a crash inside llama.cpp; a build that does not suit this CPU, such as one with "
            "AMX kernels or a wheel compiled on another CPU, crashes like this: "
            "`bash scripts/setup.sh` checks the runtime and rebuilds it safely)"
        )
    elif name == "SIGKILL":
        words += " (the kernel's out-of-memory killer sends this signal)"
    return words


class _Timeout(Exception):
    """The child did not answer before the deadline."""


class _Gone(Exception):
    """The child closed its end of a pipe (it exited or died)."""


class _TooLong(Exception):
    """The child wrote a line longer than :data:`MAX_MESSAGE_BYTES`."""


class ModelProcess:
    """One running llama.cpp child serving one purpose context.

    Args:
        purpose: the purpose it serves (``planner``, ``reviewer``, ``other``); named in errors.
        config: the child's configuration (``model_path``, ``n_ctx``, ``n_threads``, ``seed``,
            ``verbose``); ``parent_pid`` is added.
        start_timeout_s: seconds the child may take to load the weights and say it is ready.
        late: the error kind when it is not ready in time: ``runtime_crash`` (a hung runtime),
            or ``timeout`` when ``start_timeout_s`` is what is left of a call's deadline.
        capture_stderr: keep the child's stderr in a temporary file (quoted in errors); when
            False it goes to this process's stderr.

    Attributes:
        ready: the child's ready message (``eog``, ``bos_text``, ``eos_text``, ``template``,
            ``system_info``).

    Raises:
        ProviderError: ``runtime_crash`` when the child cannot be started, or dies or hangs while
            starting; the child's own kind (``other``) when llama.cpp cannot load the weights.
    """

    def __init__(
        self,
        purpose: str,
        config: dict[str, Any],
        *,
        start_timeout_s: float,
        capture_stderr: bool = True,
        late: ProviderErrorKind = "runtime_crash",
    ) -> None:
        self.purpose = purpose
        self.owner = os.getpid()
        """The process that started the child (and alone speaks to it)."""
        self._buffer = bytearray()
        self._stderr: IO[bytes] | None = None
        if capture_stderr:  # closed by close(); anonymous, so nothing is left on disk
            self._stderr = tempfile.TemporaryFile(prefix="controlscope-llama-")  # noqa: SIM115
        src = str(Path(__file__).resolve().parents[2])  # the directory holding controlscope/
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", _CHILD_MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=env,
                close_fds=True,
            )
        except OSError as err:  # no memory or process slots left
            if self._stderr is not None:
                self._stderr.close()
            raise ProviderError(
                f"could not start the local model's {purpose} process: {err}", kind="runtime_crash"
            ) from err
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in = self._proc.stdin
        self._out_fd = self._proc.stdout.fileno()
        os.set_blocking(self._in.fileno(), False)
        self.closed = False
        self.ready: dict[str, Any] = {}
        answer = self.exchange(
            {**config, "parent_pid": os.getpid()},
            start_timeout_s,
            doing="loading the weights",
            late=late,
        )
        if not answer.get("ok"):
            self.close()
            raise ProviderError(
                str(answer.get("message")), kind=provider_error_kind(answer.get("kind"))
            )
        self.ready = answer

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._proc.pid

    def exchange(
        self,
        message: dict[str, Any],
        timeout_s: float,
        *,
        doing: str,
        late: ProviderErrorKind = "runtime_crash",
        limit_s: float | None = None,
    ) -> dict[str, Any]:
        """Send one message and return the child's answer (a dict with ``ok``).

        Args:
            message: the JSON-serialisable message.
            timeout_s: seconds allowed for sending and answering.
            doing: what the child is doing, for errors ("answering a request").
            late: the kind of the error when the child does not answer in time: ``timeout``
                for a request whose deadline passed, ``runtime_crash`` (a hung runtime) else.
            limit_s: the whole call's limit, named in a ``timeout`` error (default
                ``timeout_s``: the call may have spent some of its time before this exchange).

        Raises:
            ProviderError: ``runtime_crash`` when the child died or exited, ``late`` when it
                did not answer in time, ``response_too_large`` when it wrote a line longer
                than :data:`MAX_MESSAGE_BYTES`; the child is then killed and this object
                closed. Any
                other exception (e.g. KeyboardInterrupt) also kills the child before it
                propagates: the exchange's state is unknown.
        """
        if self.closed:
            raise ProviderError(f"the local model's {self.purpose} process is closed", kind="other")
        deadline = time.monotonic() + timeout_s
        try:
            self._write((json.dumps(message) + "\n").encode("utf-8"), deadline)
            answer: dict[str, Any] = json.loads(self._read_line(deadline))
            return answer
        except _Timeout:
            self._terminate()
            if late == "timeout":
                limit = timeout_s if limit_s is None else limit_s
                words = f"did not answer within the call's deadline of {limit:g} s"
                words += " and was killed"
            else:
                words = f"did not answer within {timeout_s:g} s (hung) and was killed"
            raise self._crash(words, doing, kind=late) from None
        except _Gone:
            code = self._reap()
            raise self._crash(describe_exit(code), doing) from None
        except json.JSONDecodeError as err:
            self._terminate()
            raise self._crash(f"broke the protocol ({err})", doing) from None
        except _TooLong:
            self._terminate()
            words = f"wrote a message longer than {MAX_MESSAGE_BYTES:,} bytes (response too large)"
            raise self._crash(words, doing, kind="response_too_large") from None
        except BaseException:
            self.kill()
            raise

    def _write(self, data: bytes, deadline: float) -> None:
        fd = self._in.fileno()
        view = memoryview(data)
        while view:
            self._wait(fd, select.POLLOUT, deadline)
            try:
                sent = os.write(fd, view)
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise _Gone from None
            view = view[sent:]

    def _read_line(self, deadline: float) -> bytes:
        buffer, start = self._buffer, 0
        while (end := buffer.find(b"\n", start)) < 0:  # each byte looked at once
            if len(buffer) > MAX_MESSAGE_BYTES:
                raise _TooLong
            start = len(buffer)
            self._wait(self._out_fd, select.POLLIN, deadline)
            chunk = os.read(self._out_fd, 1 << 16)
            if not chunk:
                raise _Gone
            buffer += chunk
        self._buffer = buffer[end + 1 :]
        return bytes(buffer[:end])

    @staticmethod
    def _wait(fd: int, event: int, deadline: float) -> None:
        poller = select.poll()
        poller.register(fd, event)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Timeout
            if poller.poll(max(1, int(remaining * 1000))):
                return  # ready, or an error/hang-up condition the next read/write reports

    def _reap(self) -> int:
        """The exit status of a child whose pipe closed (killed if it lingers)."""
        try:
            return self._proc.wait(timeout=_REAP_S)
        except subprocess.TimeoutExpired:
            return self._terminate()

    def _crash(
        self, what: str, doing: str, *, kind: ProviderErrorKind = "runtime_crash"
    ) -> ProviderError:
        tail = self.stderr_tail()
        self.close()
        return ProviderError(
            f"the local model's {self.purpose} process (pid {self.pid}) {what} while {doing}; "
            f"llama.cpp's last output: {tail}",
            kind=kind,
        )

    def stderr_tail(self) -> str:
        """The last lines the child wrote to stderr, escaped, on one line (from the start of a
        ``faulthandler`` report when there is one, else its end)."""
        if self._stderr is None:
            return "(not captured: shown on the controller's stderr)"
        try:
            size = os.fstat(self._stderr.fileno()).st_size
            data = os.pread(
                self._stderr.fileno(),
                _STDERR_TAIL_BYTES,
                max(0, size - _STDERR_TAIL_BYTES),
            )
        except (OSError, ValueError):
            return "(unreadable)"
        lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
        fatal = [i for i, ln in enumerate(lines) if ln.startswith("Fatal Python error")]
        if fatal:  # faulthandler's report: the innermost frames come first
            text = " | ".join(escape_untrusted(ln) for ln in lines[fatal[-1] :])
            return text if len(text) <= _STDERR_TAIL_CHARS else text[:_STDERR_TAIL_CHARS] + "..."
        text = " | ".join(escape_untrusted(ln) for ln in lines)
        if not text:
            return "(none)"
        return text if len(text) <= _STDERR_TAIL_CHARS else "..." + text[-_STDERR_TAIL_CHARS:]

    def _terminate(self) -> int:
        """SIGKILL the child if it still runs and reap it; return its exit status."""
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        return self._proc.wait()

    def kill(self) -> None:
        """Kill the child at once (SIGKILL), reap it and release its pipes. Idempotent."""
        self._terminate()
        self.close()

    def close(self) -> None:
        """End the child: close its stdin (it exits), kill it if it has not within a few
        seconds, reap it and release its pipes and stderr file. Idempotent."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self._in.close()
        try:
            self._proc.wait(timeout=_CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
