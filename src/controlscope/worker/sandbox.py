"""How the worker process is launched: the interpreter, bubblewrap arguments, isolation checks.

Isolation on Linux (design.md, execution contract; paper section A.1: "Python executes in an
isolated worker with no direct task-filesystem mount or network access"): ``bwrap`` with every
namespace unshared (no network), read-only binds of the system paths and of the interpreter's
prefix only (no task workspace, no repository, no home), a private size-limited tmpfs ``/tmp``,
a new session, all capabilities dropped, ``--die-with-parent``, and no ``/proc`` or ``/sys``.
Resource limits, empty capability sets and a seccomp filter (no processes, threads, ``exec``,
network sockets, namespaces or mounts) are applied by the runtime itself before agent code
runs, in both modes. Where bwrap is missing or fails its self-test, the same runtime runs
without it and the session reports ``isolation == "none"`` after a loud warning.
"""

from __future__ import annotations

import functools
import logging
import marshal
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from controlscope.worker import _runtime

log = logging.getLogger(__name__)

Isolation = Literal["bwrap", "none"]

#: Bootstrap run by ``python -c``: reads one length-prefixed frame from the channel (fd
#: ``argv[1]``) holding the runtime bundle, a marshalled tuple of code objects (compiled by the
#: controller with the same interpreter, filename ``<controlscope-runtime>``), and runs them in
#: order as ``__main__``.
BOOTSTRAP = (
    "import os,sys,marshal\n"
    "def _rd(n, r=int(sys.argv[1])):\n"
    " b=b''\n"
    " while len(b)<n:\n"
    "  c=os.read(r,n-len(b))\n"
    "  if not c: os._exit(0)\n"
    "  b+=c\n"
    " return b\n"
    "for _c in marshal.loads(_rd(int.from_bytes(_rd(4),'big'))): exec(_c)\n"
)

#: The worker's whole environment: nothing of the controller's leaks (API keys, paths).
#: PYTHONHASHSEED is fixed so that set displays reproduce (paper section A.4).
WORKER_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "PYTHONHASHSEED": "0",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}

_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


#: The runtime bundle's modules, in execution order (each stdlib-only).
RUNTIME_MODULES = ("_constants", "_snapshot", "_hardening", "_runtime")


@functools.cache
def runtime_sources() -> tuple[str, ...]:
    """The source texts of the in-sandbox runtime bundle (:data:`RUNTIME_MODULES`)."""
    here = Path(_runtime.__file__).parent
    return tuple((here / f"{name}.py").read_text(encoding="utf-8") for name in RUNTIME_MODULES)


@functools.cache
def runtime_frame() -> bytes:
    """The first frame sent to a new worker: the bundle's code objects, length-prefixed."""
    codes = tuple(
        compile(src, _runtime.RUNTIME_FILENAME, "exec", dont_inherit=True)
        for src in runtime_sources()
    )
    data = marshal.dumps(codes)
    return _runtime.HEADER.pack(len(data)) + data


def interpreter() -> Path:
    """The base interpreter the worker runs (never the virtual environment's wrapper).

    Returns:
        ``<resolved sys.base_prefix>/bin/pythonX.Y`` when it exists, else the resolved
        ``sys.executable``.
    """
    base = Path(os.path.realpath(sys.base_prefix))
    candidate = base / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if candidate.exists():
        return candidate
    return Path(os.path.realpath(sys.executable))


def python_command(rfd: int, wfd: int) -> list[str]:
    """The interpreter command line that runs the runtime on channel fds ``rfd``/``wfd``."""
    return [
        str(interpreter()),
        "-S",
        "-s",
        "-P",
        "-c",
        BOOTSTRAP,
        str(rfd),
        str(wfd),
    ]


def bwrap_path() -> str | None:
    """The ``bwrap`` executable, or None when it is not installed (or not on Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("bwrap")


def system_binds(dirs: Sequence[str]) -> list[str]:
    """bwrap arguments that show each of ``dirs`` read-only as on the host: a symlink stays a
    symlink (``/bin -> usr/bin`` on merged-/usr systems), a directory is bound, a missing one is
    skipped."""
    args: list[str] = []
    for d in dirs:
        p = Path(d)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            args += ["--ro-bind", d, d]
    return args


def bwrap_arguments(bwrap: str, tmp_mb: int = 256) -> list[str]:
    """bwrap's arguments before the command: namespaces, binds, tmpfs, capabilities.

    No ``/proc`` and no ``/sys`` are mounted: a root process (even without capabilities) could
    write kernel settings through them, which are checked by file mode only.
    """
    args = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    args += system_binds(_SYSTEM_DIRS)
    # The private /tmp first: the binds below may lie under /tmp and must stay visible.
    args += ["--size", str(tmp_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    prefix = Path(os.path.realpath(sys.base_prefix))
    if not prefix.is_relative_to("/usr"):
        args += ["--ro-bind", str(prefix), str(prefix)]
    exe_dir = interpreter().parent
    if not exe_dir.is_relative_to("/usr") and not exe_dir.is_relative_to(prefix):
        args += ["--ro-bind", str(exe_dir), str(exe_dir)]
    args += [
        "--dev",
        "/dev",
        "--chdir",
        "/tmp",
        "--hostname",
        "worker",
        "--",
    ]
    return args


def worker_command(isolation: Isolation, rfd: int, wfd: int, tmp_mb: int = 256) -> list[str]:
    """The full command that starts a worker under ``isolation`` (``tmp_mb``: size of /tmp).

    Raises:
        RuntimeError: ``isolation == "bwrap"`` but bwrap is not installed.
    """
    py = python_command(rfd, wfd)
    if isolation == "none":
        return py
    bwrap = bwrap_path()
    if bwrap is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed")
    return bwrap_arguments(bwrap, tmp_mb) + py


@functools.cache
def bwrap_self_test() -> str | None:
    """Run the interpreter once inside bwrap; None if it works, else why not (cached)."""
    bwrap = bwrap_path()
    if bwrap is None:
        return (
            "bubblewrap (bwrap) is not installed"
            if sys.platform.startswith("linux")
            else f"bubblewrap is Linux-only (platform {sys.platform})"
        )
    probe = "import os,sys;print('ok' if not os.path.exists(sys.argv[1]) else 'visible')"
    cmd = [*bwrap_arguments(bwrap), str(interpreter()), "-S", "-s", "-P", "-c", probe, os.getcwd()]
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=20, env=WORKER_ENV, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap self-test failed to run: {exc}"
    if out.returncode != 0 or out.stdout.strip() != "ok":
        detail = (out.stderr or out.stdout).strip()[-500:]
        return f"bwrap self-test failed (exit {out.returncode}): {detail}"
    return None


def resolve_isolation(requested: Literal["auto", "bwrap", "none"]) -> Isolation:
    """What isolation a session gets for a request.

    ``auto`` means bwrap when it passes its self-test, else ``none`` (with a loud warning, see
    :func:`warn_unisolated`). ``bwrap`` insists on it.

    Raises:
        RuntimeError: ``bwrap`` was requested and is unavailable or fails its self-test.
        ValueError: an unknown request.
    """
    if requested not in ("auto", "bwrap", "none"):
        raise ValueError(f"isolation must be 'auto', 'bwrap' or 'none', not {requested!r}")
    if requested == "none":
        return "none"
    problem = bwrap_self_test()
    if problem is None:
        return "bwrap"
    if requested == "bwrap":
        raise RuntimeError(f"bwrap isolation requested but unavailable: {problem}")
    log.warning("bwrap unavailable (%s)", problem)
    return "none"


def isolation_available() -> bool:
    """True when bwrap isolation works on this machine."""
    return bwrap_self_test() is None
