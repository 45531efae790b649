"""The pinned MCP filesystem server installed into the user's controlscope directory.

A checkout runs ``npm ci`` in the repository root; a pip installation has no root, so the
package carries the pin (``npm/package.json`` and ``npm/package-lock.json``, the repository's
own files) and :func:`install_server` installs it with ``npm ci`` into
``<home>/mcp-servers/node_modules`` (``<home>``: ``$CONTROLSCOPE_HOME`` or
``~/.cache/controlscope``). ``npm ci`` installs exactly what the lock file lists and checks every
package against the lock file's ``integrity`` hash (it fails on a mismatch); install scripts are
not run (the server needs none). npm answers from its own cache where it can
(``--prefer-offline``), so an install after a first one needs no network.

An install is built beside the old one and swapped in when complete, and a stamp (the lock
file's SHA-256) says which pin it holds: :func:`installed_script` finds the server only when the
stamp matches this package's lock file, so an upgrade of controlscope that changes the pin asks
for ``controlscope setup`` again instead of running another server.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import re
import shutil
import subprocess
from pathlib import Path

from controlscope._home import home
from controlscope._leftovers import make_dir, sweep_quietly

__all__ = [
    "PIN_FILES",
    "SERVER_SCRIPT",
    "SetupError",
    "install_server",
    "installed_script",
    "pin_digest",
    "server_dir",
]

PIN_FILES = ("package.json", "package-lock.json")
"""The files that pin the server, shipped in this package's ``npm`` folder."""

SERVER_SCRIPT = Path("@modelcontextprotocol") / "server-filesystem" / "dist" / "index.js"
"""The server's entry point, relative to ``node_modules``."""

MIN_NODE_MAJOR = 20
"""The oldest Node.js major version the pinned server supports (its ``engines``)."""

_STAMP = "installed.sha256"
_BUILD_PREFIX = "mcp-servers-build-"
"""An install's build folder, named with its owner (``controlscope._leftovers``): the build
of a setup that was killed is removed by the next setup or ``controlscope clean``."""
_NPM_TIMEOUT_S = 900.0


class SetupError(RuntimeError):
    """The server could not be installed (npm or Node.js missing, npm failed); the message is
    one line that says what to do."""


def server_dir() -> Path:
    """Where :func:`install_server` installs: ``<home>/mcp-servers`` (not created here)."""
    return home() / "mcp-servers"


def _pin(name: str) -> bytes:
    return (importlib.resources.files("controlscope.envs.filesystem") / "npm" / name).read_bytes()


def pin_digest() -> str:
    """The SHA-256 of this package's ``package-lock.json`` (what an install is stamped with)."""
    return hashlib.sha256(_pin("package-lock.json")).hexdigest()


def installed_script() -> Path | None:
    """The server's ``index.js`` in :func:`server_dir`, when an install of this package's pin
    is complete there; else None."""
    root = server_dir()
    try:
        stamp = (root / _STAMP).read_text().strip()
    except OSError:
        return None
    script = root / "node_modules" / SERVER_SCRIPT
    return script if stamp == pin_digest() and script.is_file() else None


def _tools() -> tuple[str, str]:
    """``node`` and ``npm`` on PATH, Node.js recent enough.

    Raises:
        SetupError: one of them is missing, or Node.js is older than :data:`MIN_NODE_MAJOR`.
    """
    node, npm = shutil.which("node"), shutil.which("npm")
    missing = [name for name, path in (("Node.js (`node`)", node), ("npm", npm)) if not path]
    if node is None or npm is None:
        raise SetupError(
            f"{' and '.join(missing)} not found on PATH: the MCP filesystem server needs "
            f"Node.js {MIN_NODE_MAJOR} or later with npm (https://nodejs.org, or the system's "
            "nodejs and npm packages); install them and run `controlscope setup` again"
        )
    try:
        done = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        )
        major = int(re.match(r"v?(\d+)", done.stdout.strip()).group(1))  # type: ignore[union-attr]
    except (OSError, subprocess.SubprocessError, AttributeError, ValueError) as err:
        raise SetupError(f"`{node} --version` failed: {err}") from err
    if major < MIN_NODE_MAJOR:
        raise SetupError(
            f"Node.js {done.stdout.strip()} at {node} is too old: the MCP filesystem server needs "
            f"Node.js {MIN_NODE_MAJOR} or later"
        )
    return node, npm


def install_server(*, timeout_s: float = _NPM_TIMEOUT_S) -> Path:
    """Install the pinned server into :func:`server_dir` with ``npm ci`` (idempotent: a
    complete install of the same pin is kept).

    Args:
        timeout_s: the longest ``npm ci`` may take.

    Returns:
        The server's ``index.js``.

    Raises:
        SetupError: Node.js or npm is missing or too old, ``npm ci`` failed (a package whose
            bytes do not match the lock file's hash included: npm refuses it) or took longer
            than ``timeout_s``, or the result lacks the server. One line each.
    """
    ready = installed_script()
    if ready is not None:
        return ready
    _, npm = _tools()
    target = server_dir()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        sweep_quietly(target.parent)  # the builds of a setup that was killed
        build = make_dir(_BUILD_PREFIX, target.parent)  # marked with this process
        build.chmod(0o755)  # readable as npm makes its own folders
    except OSError as err:
        raise SetupError(f"cannot make {target.parent}/: {err.strerror or err}") from None
    try:
        for name in PIN_FILES:
            (build / name).write_bytes(_pin(name))
        _npm_ci(npm, build, timeout_s)
        if not (build / "node_modules" / SERVER_SCRIPT).is_file():
            raise SetupError(f"`npm ci` finished but left no node_modules/{SERVER_SCRIPT}")
        (build / _STAMP).write_text(pin_digest() + "\n")
        _swap_in(build, target)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return target / "node_modules" / SERVER_SCRIPT


def _npm_ci(npm: str, folder: Path, timeout_s: float) -> None:
    """``npm ci`` in ``folder``, quietly; its last lines of output in the error."""
    command = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"]
    env = {**os.environ, "npm_config_update_notifier": "false"}
    try:
        done = subprocess.run(
            command,
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise SetupError(f"`npm ci` did not finish within {timeout_s:g} s") from err
    except OSError as err:
        raise SetupError(f"`npm ci` could not start: {err}") from err
    if done.returncode != 0:
        tail = " | ".join(line.strip() for line in done.stderr.strip().splitlines()[-3:])
        raise SetupError(f"`npm ci` failed (exit {done.returncode}): {tail}")


def _swap_in(build: Path, target: Path) -> None:
    """Replace ``target`` by the complete install in ``build`` (the old one moved aside
    first, then removed)."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}-old-{os.getpid()}")
        target.rename(old)
    build.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
