"""Third-party processes confined to a task's workspace: tool servers, set-up and verifier
commands.

Every such process gets the shared bubblewrap confinement (:func:`controlscope._bwrap.options`:
every namespace unshared, so no network; read-only system paths and the few files of ``/etc``
processes need, :data:`ETC_FILES`; a private ``/tmp``; no capabilities;
``--die-with-parent``), the paths it must read shown read-only, and
the workspace at :data:`AGENT_ROOT`, whatever its host path, so that paths are the same in every
branch (paper 3.3, A.1). A tool server sees the workspace read-write; a verifier sees a copy of
it read-only (:func:`run_confined`). A command also gets resource limits (address space, CPU
seconds, size of any file it writes, its output included), a cap on its processes (a pids cgroup
of its own where the machine offers one, :mod:`controlscope._cgroup`; servers too) and a
wall-clock limit, after which its whole process group is killed; its output is kept bounded (head
and tail).

The environment a confined command gets is :data:`COMMAND_ENV` and what its caller adds, never
this process's (no API keys or paths leak into third-party code).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from controlscope import _bwrap
from controlscope._cgroup import ProcessCap, cap_problem
from controlscope._proc import descendants, gone, kill_below, reap_orphans
from controlscope.core import CUT_MARKER
from controlscope.envs._mcp import McpToolServer
from controlscope.envs._stdio import kill_group

__all__ = [
    "AGENT_ROOT",
    "COMMAND_ENV",
    "ETC_FILES",
    "MAX_LIMIT",
    "MAX_TIMEOUT_S",
    "SERVER_PROCESSES",
    "CommandLimits",
    "CommandOutcome",
    "confined_label",
    "confinement_problem",
    "executable_paths",
    "run_confined",
    "server_options",
    "start_confined_server",
    "which",
]

log = logging.getLogger(__name__)

AGENT_ROOT = "/workspace"
"""Where every branch's workspace appears to a confined process, and so to agent code. Paths in
requests, tool arguments and observations are then the same across branches (same-state
branching and prefix replay, paper section 3.3), whatever host directory each branch gets."""

ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "timezone",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "mime.types",
    "os-release",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "pki/ca-trust",
)
"""The entries of ``/etc`` a confined third-party process sees read-only (those that exist): the
dynamic loader's cache, Debian's command alternatives, the time zone, user and host names, name
service, MIME types and trusted certificates. Never the rest of ``/etc``: password hashes
(``shadow``), host and private keys (``ssh/``, ``ssl/private/``), credentials of services. A task
spec names anything else its commands read (``paths``)."""


def _etc_paths() -> list[Path]:
    """The paths of :data:`ETC_FILES` that exist here (a dangling symlink would stop bwrap)."""
    return [Path("/etc", name) for name in ETC_FILES if Path("/etc", name).exists()]


COMMAND_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "TZ": "UTC",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONUNBUFFERED": "1",
}
"""The whole environment of a confined command, before what its caller adds (Python's output
unbuffered, so what it prints and its traceback keep their order)."""

SERVER_PROCESSES = 256
"""How many processes and threads a third-party tool server may run at once (see
:class:`CommandLimits`' ``processes``)."""

#: Bytes of a command's output kept from its start and from its end.
_OUTPUT_HEAD = 6_000
_OUTPUT_TAIL = 10_000


MAX_TIMEOUT_S = 86_400.0
MAX_LIMIT = 1 << 20
"""The largest limits a command may be given: a day, and 2**20 of each count (MiB of memory,
output, ``/tmp``; processes). Larger ones would not fit the kernel's resource limits."""


@dataclass(frozen=True)
class CommandLimits:
    """What a confined command may use.

    Each at least 1 (``timeout_s`` positive) and at most :data:`MAX_TIMEOUT_S` or
    :data:`MAX_LIMIT`.

    Attributes:
        timeout_s: wall-clock seconds before its process group is killed (also its CPU seconds).
        memory_mb: its address space in MiB (the rlimit, for every process it starts).
        output_mb: the size of its output, and of any file it writes, in MiB (the file-size
            rlimit: a command that passes it is stopped by ``SIGXFSZ``).
        tmp_mb: the size of its private ``/tmp`` in MiB.
        processes: how many processes and threads it may run at once (a pids cgroup of its
            own, where the machine offers one: :mod:`controlscope._cgroup`).
    """

    timeout_s: float = 300.0
    memory_mb: int = 1024
    output_mb: int = 8
    tmp_mb: int = 64
    processes: int = 256

    def __post_init__(self) -> None:
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise ValueError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}], got {self.timeout_s}")
        for name in ("memory_mb", "output_mb", "tmp_mb", "processes"):
            if not 1 <= getattr(self, name) <= MAX_LIMIT:
                raise ValueError(f"{name} must be in [1, {MAX_LIMIT}], got {getattr(self, name)}")


@dataclass(frozen=True)
class CommandOutcome:
    """How a confined command ended.

    Attributes:
        status: its exit status; negative: killed by that signal; None: it could not start or
            did not finish in time.
        output: its standard output and error, interleaved, decoded (bad bytes replaced), the
            middle of a long output cut (marked).
        timed_out: it was killed at its wall-clock limit.
        confined: it ran under bubblewrap (False: bubblewrap is unavailable here).
        problem: why it could not start, or None.
        seconds: how long it ran.
        output_full: its output reached the size limit (what it wrote after was lost).
    """

    status: int | None
    output: str
    timed_out: bool = False
    confined: bool = True
    problem: str | None = None
    seconds: float = 0.0
    output_full: bool = False

    @property
    def ok(self) -> bool:
        """Whether it exited with status 0."""
        return self.status == 0

    def describe(self, limits: CommandLimits) -> str:
        """How it ended, in words (``exit 1``, ``did not finish within 300 s (killed)``, ``exit
        139: killed by SIGSEGV, ...`` where bubblewrap reports a signal as 128 + its number)."""
        full = f"; its output reached the {limits.output_mb} MiB limit" if self.output_full else ""
        if self.problem is not None:
            return f"could not run: {self.problem}"
        if self.timed_out:
            return f"did not finish within {limits.timeout_s:g} s (killed){full}"
        assert self.status is not None
        if self.status < 0:
            name = _signal_name(-self.status)
            return f"{_signal_cause(name, limits)} ({name})"
        if self.confined and 128 < self.status <= 128 + 64:
            # bwrap ends with 128 + the number of the signal that killed the command.
            name = _signal_name(self.status - 128)
            return f"exit {self.status}: killed by {name}, {_signal_cause(name, limits)}{full}"
        return f"exit {self.status}{full}"


def _signal_cause(name: str, limits: CommandLimits) -> str:
    """The usual cause of a confined command's death by the signal ``name``."""
    return {
        "SIGXFSZ": f"its output or a file it wrote passed {limits.output_mb} MiB",
        "SIGXCPU": f"it used {limits.timeout_s:g} CPU seconds",
        "SIGKILL": "killed",
        "SIGSEGV": f"a crash (perhaps its {limits.memory_mb} MiB memory limit)",
    }.get(name, "killed by a signal")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def executable_paths(command: str) -> list[Path]:
    """The directories a confined process needs to run ``command`` (an absolute path): its
    directory, and the prefix its real file lies in (``/usr/local`` of ``/usr/local/bin/node``,
    a Python installation's root), so its libraries are found."""
    real = Path(os.path.realpath(command))
    return sorted({Path(command).parent, real.parent.parent})


def server_options(
    ro_paths: Sequence[Path],
    workspace: Path,
    *,
    network: bool = False,
    setenv: Mapping[str, str] | None = None,
) -> list[str]:
    """bwrap's options for a tool server: the shared confinement with :data:`ETC_FILES`, the
    ``ro_paths`` read-only and ``workspace`` read-write at :data:`AGENT_ROOT`, its working
    directory (``network``: keep the host's network; ``setenv``: its own variables)."""
    return _bwrap.options(
        ro_paths=[*_etc_paths(), *ro_paths],
        binds=[(str(workspace), AGENT_ROOT)],
        chdir=AGENT_ROOT,
        network=network,
        setenv=setenv,
    )


def _command_options(
    ro_paths: Sequence[Path],
    workspace: Path,
    *,
    writable: bool,
    tmp_mb: int,
    setenv: Mapping[str, str] | None = None,
) -> list[str]:
    """bwrap's options for a set-up or verifier command: as a server's, with the workspace
    read-only unless ``writable``, a private ``/tmp`` of ``tmp_mb`` MiB as working directory,
    ``setenv`` its own variables."""
    bind = [(str(workspace), AGENT_ROOT)]
    return _bwrap.options(
        ro_paths=[*_etc_paths(), *ro_paths],
        binds=bind if writable else [],
        ro_binds=[] if writable else bind,
        tmp_mb=tmp_mb,
        chdir="/tmp",
        hostname="sandbox",
        setenv=setenv,
    )


@functools.cache
def confinement_problem() -> str | None:
    """Why third-party commands cannot run under bubblewrap here (checked once), or None."""
    probe = Path(os.path.realpath(tempfile.gettempdir()))
    options = _command_options([], probe, writable=False, tmp_mb=1)
    problem = _bwrap.probe(options, ["/bin/sh", "-c", "echo ok"], timeout_s=30, env=COMMAND_ENV)
    if problem is not None:
        log.warning("third-party commands run WITHOUT bubblewrap: %s", problem)
    return problem


def run_confined(
    command: Sequence[str],
    *,
    workspace: Path,
    writable: bool,
    limits: CommandLimits,
    ro_paths: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
) -> CommandOutcome:
    """Run a third-party command confined to ``workspace`` and bounded; never raises for what
    the command does.

    ``{workspace}`` in the command's arguments and in ``env``'s values names the workspace as the
    command sees it (:data:`AGENT_ROOT`, or its host path where bubblewrap is unavailable: the
    command then runs with the limits alone, in the workspace, and a warning is logged).

    Args:
        command: the executable (an absolute path) and its arguments.
        workspace: the directory it sees at :data:`AGENT_ROOT`.
        writable: whether it may write there (a set-up command) or not (a verifier).
        limits: its time, memory, output and ``/tmp`` limits.
        ro_paths: further directories it sees read-only (its interpreter's prefix, its files).
        env: variables added to :data:`COMMAND_ENV`, set inside the sandbox alone (never in
            bwrap's own environment on the host, where ``LD_PRELOAD`` would act unconfined).

    Returns:
        How it ended, with its bounded output.
    """
    confined = confinement_problem() is None
    root = AGENT_ROOT if confined else str(workspace)
    argv = [part.replace("{workspace}", root) for part in command]
    added = {k: v.replace("{workspace}", root) for k, v in (env or {}).items()}
    variables = {**COMMAND_ENV, **added}
    if confined:
        bwrap = _bwrap.bwrap_path()
        assert bwrap is not None
        options = _command_options(
            ro_paths, workspace, writable=writable, tmp_mb=limits.tmp_mb, setenv=added
        )
        argv = [bwrap, *options, *argv]
        variables = dict(COMMAND_ENV)  # bwrap's own: the added ones are set inside alone
    cap_problem()  # said once, where there is no cap
    cap = ProcessCap(limits.processes)
    with tempfile.TemporaryFile() as sink, contextlib.closing(cap):
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                cap.command(argv),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=variables,
                cwd=None if confined else workspace,
                start_new_session=True,
                # setrlimit alone before exec; a child stuck there is killed at the limit.
                preexec_fn=_rlimits(limits),
            )
        except (OSError, subprocess.SubprocessError) as err:  # the latter: setrlimit failed
            return CommandOutcome(None, "", confined=confined, problem=str(err))
        timed_out = _wait(process, limits.timeout_s)
        seconds = time.monotonic() - started
        status = None if timed_out else process.returncode
        full = sink.seek(0, os.SEEK_END) >= limits.output_mb * 1024 * 1024
        output = _bounded(sink)
        return CommandOutcome(status, output, timed_out, confined, None, seconds, full)


def _wait(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for ``process`` at most ``timeout_s``; kill its whole group either way and wait
    (at most :data:`_KILL_WAIT_S`) until every process it started is gone, so nothing it left
    running outlives the call. Returns whether it timed out."""
    try:
        process.wait(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    started = descendants(process.pid)
    # Its children first (the sandbox's init, reaped by bwrap): none is orphaned.
    below = kill_below(process.pid) if process.returncode is None else []
    kill_group(process.pid)
    process.wait()
    reap_orphans(below)  # those handed to this process (a sandbox's init on every bwrap exit)
    deadline = time.monotonic() + _KILL_WAIT_S
    for pid in started:
        gone(pid, max(0.0, deadline - time.monotonic()))
    return timed_out


_KILL_WAIT_S = 5.0
"""How long a killed command's processes may take to die before the call returns anyway."""


def _rlimits(limits: CommandLimits) -> Callable[[], None]:
    """A function setting the command's resource limits, run in the child before ``exec``."""
    mb = 1024 * 1024
    wanted = {
        resource.RLIMIT_AS: limits.memory_mb * mb,
        resource.RLIMIT_CPU: math.ceil(limits.timeout_s) + 1,
        resource.RLIMIT_FSIZE: limits.output_mb * mb,
        resource.RLIMIT_CORE: 0,
    }

    def apply() -> None:
        for which, value in wanted.items():
            hard = resource.getrlimit(which)[1]
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))

    return apply


def _bounded(sink: IO[bytes]) -> str:
    """The command's output file read back: all of it when short, else its head and tail
    around a marker saying how much was left out."""
    size = sink.seek(0, os.SEEK_END)
    sink.seek(0)
    if size <= _OUTPUT_HEAD + _OUTPUT_TAIL:
        return _text(sink.read())
    head = sink.read(_OUTPUT_HEAD)
    sink.seek(size - _OUTPUT_TAIL)
    tail = sink.read(_OUTPUT_TAIL)
    cut = CUT_MARKER.format(n=size - _OUTPUT_HEAD - _OUTPUT_TAIL).replace("chars", "bytes")
    return f"{_text(head)}{cut}{_text(tail)}"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def which(command: str, *, base: Path | None = None) -> str | None:
    """``command`` as an absolute path: itself when absolute, relative to ``base`` when it
    names a path (``./verify.sh``), else looked up on ``PATH``; None when it is not an
    executable file."""
    if os.sep in command:
        path = Path(command)
        if not path.is_absolute() and base is not None:
            path = base / path
        path = path.absolute()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(command)


def confined_label(command: str, args: Sequence[str]) -> str:
    """A confined server's name in messages: its command as it runs inside the sandbox (never
    bwrap's options, whose host workspace path differs between branches; agent code sees the
    name in a call's error)."""
    return f"{Path(command).name} {' '.join(args)}".strip()


def start_confined_server(
    command: str,
    args: Sequence[str],
    workspace: Path,
    *,
    ro_paths: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    network: bool = False,
    timeout_s: float = 60.0,
) -> McpToolServer:
    """Start a third-party MCP server (stdio) confined to ``workspace``, as the filesystem
    server is: under bubblewrap it sees the workspace read-write at :data:`AGENT_ROOT` (its
    working directory), ``ro_paths`` and the system read-only, and no network unless
    ``network``; ``{workspace}`` in ``args`` and ``env`` values names the workspace as it sees
    it. Where bubblewrap is unavailable it runs with the host path as its workspace (a warning
    says so).

    Args:
        command: the server's executable (an absolute path).
        args: its arguments.
        workspace: the task workspace.
        ro_paths: directories it must read (its interpreter's prefix, its code).
        env: variables of the server (``TZ=UTC`` is set), set inside the sandbox alone (bwrap
            itself gets the MCP SDK's default environment).
        network: keep the host's network (a user's grant).
        timeout_s: seconds allowed for start-up and each call.

    Returns:
        The connected server; ``agent_roots`` says how agent code names the workspace.

    Raises:
        ToolServerError: the server did not start or complete the MCP handshake.
    """
    root = Path(workspace).resolve()
    confined = confinement_problem() is None
    inside = AGENT_ROOT if confined else str(root)
    argv = [a.replace("{workspace}", inside) for a in args]
    variables = {
        "TZ": "UTC",
        **{k: v.replace("{workspace}", inside) for k, v in (env or {}).items()},
    }
    cap_problem()  # said once, where there is no cap
    cap = ProcessCap(SERVER_PROCESSES)
    if confined:
        bwrap = _bwrap.bwrap_path()
        assert bwrap is not None
        # The spec's variables are set inside alone: bwrap itself runs on the host.
        options = server_options(ro_paths, root, network=network, setenv=variables)
        full = cap.command([bwrap, *options, command, *argv])
        server = McpToolServer.stdio(
            full[0],
            full[1:],
            env={"TZ": "UTC"},
            timeout_s=timeout_s,
            label=confined_label(command, argv),
            on_close=cap.close,
        )
    else:
        log.warning("bubblewrap is unavailable: the server %s runs unconfined in %s", command, root)
        full = cap.command([command, *argv])
        server = McpToolServer.stdio(
            full[0],
            full[1:],
            cwd=root,
            env=variables,
            timeout_s=timeout_s,
            label=confined_label(command, argv),
            on_close=cap.close,
        )
    server.agent_roots = (inside,)
    return server
