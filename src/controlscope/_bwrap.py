"""bubblewrap command lines and the probe of whether they work here.

Several processes run confined: the worker (agent code; ``controlscope.worker``), the MCP
filesystem server (``controlscope.envs.filesystem.server``) and the third-party servers, set-up
and verifier commands of users' own tasks (``controlscope.envs._confine``). All get the same
confinement (README, "Isolation"): every namespace unshared (no network), a new session, all
capabilities dropped, ``--die-with-parent``, read-only ``/usr`` and system paths, a private
``/tmp``, bwrap's minimal ``/dev`` read-only with a small ``/dev/shm`` of its own, the root
read-only (bwrap's ``/`` and ``/dev`` are otherwise writable tmpfs as large as half the host's
memory, which files written there would hoard), and no ``/proc`` or
``/sys`` (a root process, even without capabilities, could write kernel settings through them,
which are checked by file mode only). Each adds what it must see: the interpreter's prefix, or
Node.js, the server package and the workspace.

This module imports nothing from controlscope but :mod:`controlscope._proc`: it sits below every
layer that starts a process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from controlscope._proc import reap_orphans

__all__ = [
    "SHM_MB",
    "SYSTEM_DIRS",
    "base_interpreter",
    "bwrap_path",
    "options",
    "probe",
    "system_binds",
]

#: System paths shown read-only besides ``/usr`` (each as on the host: bound, or a symlink).
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

#: Default size of the private ``/dev/shm`` in MiB.
SHM_MB = 8


def bwrap_path() -> str | None:
    """The ``bwrap`` executable, or None when it is not installed (or not on Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("bwrap")


def base_interpreter() -> Path:
    """The base interpreter a confined Python runs (never a virtual environment's wrapper, whose
    ``pyvenv.cfg`` and site packages a sandbox does not show).

    Returns:
        ``<resolved sys.base_prefix>/bin/pythonX.Y`` when it exists, else the resolved
        ``sys.executable``.
    """
    base = Path(os.path.realpath(sys.base_prefix))
    candidate = base / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if candidate.exists():
        return candidate
    return Path(os.path.realpath(sys.executable))


def system_binds(dirs: Sequence[str]) -> list[str]:
    """bwrap arguments that show each of ``dirs`` read-only as on the host.

    A symlink stays a symlink (``/bin -> usr/bin`` on merged-/usr systems), a directory is
    bound, a missing one is skipped.

    Args:
        dirs: absolute paths.

    Returns:
        ``--symlink TARGET DIR`` / ``--ro-bind DIR DIR`` arguments, in ``dirs`` order.
    """
    args: list[str] = []
    for d in dirs:
        p = Path(d)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            args += ["--ro-bind", d, d]
    return args


def options(
    *,
    system_dirs: Sequence[str] = SYSTEM_DIRS,
    ro_paths: Sequence[Path] = (),
    binds: Sequence[tuple[str, str]] = (),
    ro_binds: Sequence[tuple[str, str]] = (),
    tmp_mb: int | None = None,
    shm_mb: int = SHM_MB,
    chdir: str = "/tmp",
    hostname: str | None = None,
    network: bool = False,
    setenv: Mapping[str, str] | None = None,
) -> list[str]:
    """bwrap's options between the executable and the confined command (ending with ``--``).

    Args:
        system_dirs: paths shown read-only as on the host, besides ``/usr``.
        ro_paths: further directories bound read-only at the same path; one already visible
            (under ``/usr``, a system path or an earlier one of them) is skipped.
        binds: ``(host_path, path_inside)`` pairs bound read-write.
        ro_binds: ``(host_path, path_inside)`` pairs bound read-only.
        tmp_mb: size limit of the private ``/tmp`` in MiB (None: bwrap's default).
        shm_mb: size limit of the private ``/dev/shm`` in MiB.
        chdir: the working directory inside.
        hostname: the host name inside (None: bwrap's default).
        network: keep the host's network namespace (``--share-net``); every other namespace is
            still unshared. Only for a tool server whose user granted it the network.
        setenv: variables set for the confined command alone (``--setenv``). Variables of
            third-party origin go here, never into bwrap's own environment: bwrap runs on the
            host unconfined, where a ``LD_PRELOAD`` would load code outside the sandbox.

    Returns:
        The options, ready to put after the ``bwrap`` executable and before the command.
    """
    args = ["--unshare-all", *(["--share-net"] if network else [])]
    args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += ["--ro-bind", "/usr", "/usr", *system_binds(system_dirs)]
    # The private /tmp first: the binds below may lie under /tmp (a checkout there) and must
    # stay visible.
    if tmp_mb is not None:
        args += ["--size", str(tmp_mb * 1024 * 1024)]
    args += ["--tmpfs", "/tmp", "--dev", "/dev"]
    args += ["--size", str(shm_mb * 1024 * 1024), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    shown: list[str] = ["/usr", *system_dirs]
    for path in ro_paths:
        if not any(path.is_relative_to(d) for d in shown):
            args += ["--ro-bind", str(path), str(path)]
            shown.append(str(path))
    for host, inside in binds:
        args += ["--bind", host, inside]
    for host, inside in ro_binds:
        args += ["--ro-bind", host, inside]
    args += ["--chdir", chdir]
    if hostname is not None:
        args += ["--hostname", hostname]
    for name, value in (setenv or {}).items():
        args += ["--setenv", name, value]
    # Last: the root (bwrap's tmpfs, with the folders made for the mounts above) read-only.
    return [*args, "--remount-ro", "/", "--"]


def probe(
    bwrap_options: Sequence[str],
    command: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """Run ``command`` once under bwrap and check that it prints ``ok``.

    Args:
        bwrap_options: the options (see :func:`options`).
        command: the confined command; it must print ``ok`` (surrounding whitespace ignored)
            and exit 0.
        timeout_s: seconds allowed.
        env: the environment of bwrap and the command (None: this process's).

    Returns:
        None when it works, else why not (one line, for a log or an error message).
    """
    bwrap = bwrap_path()
    if bwrap is None:
        if sys.platform.startswith("linux"):
            return "bubblewrap (bwrap) is not installed"
        return f"bubblewrap is Linux-only (platform {sys.platform})"
    try:
        out = subprocess.run(
            [bwrap, *bwrap_options, *command],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=None if env is None else dict(env),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap self-test failed to run: {exc}"
    finally:
        reap_orphans()  # the sandbox's init, when it was handed to this process
    if out.returncode != 0 or out.stdout.strip() != "ok":
        detail = (out.stderr or out.stdout).strip()[-500:]
        return f"bwrap self-test failed (exit {out.returncode}): {detail}"
    return None
