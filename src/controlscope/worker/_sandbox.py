"""How the worker process is launched: the interpreter, bubblewrap arguments, isolation checks.

Isolation on Linux (README, "Isolation"; paper section A.1: "Python executes in an isolated
worker with no direct task-filesystem mount or network access"): ``bwrap`` with the shared
confinement of :mod:`controlscope._bwrap` (every namespace unshared, so no network; read-only
system paths; a private size-limited ``/tmp``; a new session; no capabilities;
``--die-with-parent``; no ``/proc`` or ``/sys``) plus the interpreter's prefix read-only, and
nothing else (no task workspace, no repository, no home).
Resource limits, empty capability sets and a seccomp allow-list (no processes but the
controller's own fork of a worker paused at a boundary, see ``_fork.py``; no threads, ``exec``,
sockets, memory-backed files outside ``/tmp`` and ``/dev/shm``, signals to other processes,
namespaces or mounts; ``_hardening.seccomp_program``) are applied by the runtime itself before
agent code
runs, in both modes. Where bwrap is missing or fails its self-test, the same runtime runs
without it and the session reports ``isolation == "none"`` after a loud warning.
"""

from __future__ import annotations

import functools
import logging
import marshal
import os
import sys
from pathlib import Path
from typing import Literal

from controlscope import _bwrap
from controlscope._leftovers import temp_dir
from controlscope.core import Isolation
from controlscope.worker import _runtime

log = logging.getLogger(__name__)

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

#: The runtime bundle's modules, in execution order (each stdlib-only), as paths below the
#: package: the block-data constant walk lives in ``core`` (the controller's validation uses it).
RUNTIME_MODULES = ("core/_block_data", "worker/_snapshot", "worker/_hardening", "worker/_runtime")


@functools.cache
def runtime_sources() -> tuple[str, ...]:
    """The source texts of the in-sandbox runtime bundle (:data:`RUNTIME_MODULES`)."""
    package = Path(_runtime.__file__).parent.parent
    return tuple((package / f"{name}.py").read_text(encoding="utf-8") for name in RUNTIME_MODULES)


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
    return _bwrap.base_interpreter()


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


def bwrap_options(tmp_mb: int = 256, shm_mb: int = _bwrap.SHM_MB) -> list[str]:
    """The worker's bwrap options (between ``bwrap`` and the interpreter).

    Besides the shared confinement (:func:`controlscope._bwrap.options`): the interpreter's
    prefix read-only, a private ``/tmp`` of ``tmp_mb`` MiB as the working directory, a
    ``/dev/shm`` of ``shm_mb`` MiB, host name ``worker``.
    """
    prefix = Path(os.path.realpath(sys.base_prefix))
    ro_paths = [prefix, interpreter().parent]
    return _bwrap.options(ro_paths=ro_paths, tmp_mb=tmp_mb, shm_mb=shm_mb, hostname="worker")


def worker_command(
    isolation: Isolation, rfd: int, wfd: int, tmp_mb: int = 256, shm_mb: int = _bwrap.SHM_MB
) -> list[str]:
    """The full command that starts a worker under ``isolation`` (``tmp_mb`` and ``shm_mb``:
    sizes of its ``/tmp`` and ``/dev/shm`` in MiB).

    Raises:
        RuntimeError: ``isolation == "bwrap"`` but bwrap is not installed.
    """
    py = python_command(rfd, wfd)
    if isolation == "none":
        return py
    bwrap = _bwrap.bwrap_path()
    if bwrap is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed")
    return [bwrap, *bwrap_options(tmp_mb, shm_mb), *py]


@functools.cache
def bwrap_self_test() -> str | None:
    """Run the interpreter once inside the worker's bwrap (cached).

    The probe also checks that host files stay hidden inside: a fresh folder made on the host's
    temporary directory, and the current directory (the repository, in a checkout) unless the
    sandbox shows that path by design (``/``, ``/tmp``, ``/dev``, ``/proc``, or a read-only
    system or interpreter path), so running from ``/tmp`` keeps the isolation.

    Returns:
        None when bwrap works, else why not.
    """
    probe = "import os,sys;print('visible' if any(map(os.path.exists,sys.argv[1:])) else 'ok')"
    with temp_dir("cs-probe-") as marker:
        hidden = [str(marker), *([] if _shown_by_design(Path.cwd()) else [os.getcwd()])]
        command = [str(interpreter()), "-S", "-s", "-P", "-c", probe, *hidden]
        return _bwrap.probe(bwrap_options(), command, timeout_s=20, env=WORKER_ENV)


def _shown_by_design(path: Path) -> bool:
    """Whether the worker's sandbox shows ``path`` on purpose: one of its own mount points or
    a path under a read-only bind (:func:`bwrap_options`)."""
    if str(path) in ("/", "/tmp", "/dev", "/dev/shm", "/proc"):
        return True
    prefix = os.path.realpath(sys.base_prefix)
    shown: list[str] = ["/usr", *_bwrap.SYSTEM_DIRS, prefix, str(interpreter().parent)]
    return any(path.is_relative_to(d) for d in shown)


def resolve_isolation(requested: Literal["auto", "bwrap", "none"]) -> Isolation:
    """What isolation a session gets for a request.

    ``auto`` means bwrap when it passes its self-test, else ``none`` (the session then warns
    loudly). ``bwrap`` insists on it.

    Args:
        requested: ``"auto"``, ``"bwrap"`` or ``"none"``.

    Returns:
        ``"bwrap"`` or ``"none"``.

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
    """Whether bwrap isolation works on this machine.

    Returns:
        True when bwrap passes the worker's self-test (run once per process).
    """
    return bwrap_self_test() is None
