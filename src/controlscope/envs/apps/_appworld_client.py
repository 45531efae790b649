"""The controlscope side of the AppWorld bridge: where AppWorld is, and one bridge process.

AppWorld runs in a virtual environment of its own (it pins pydantic 1). Two variables say where:

- ``APPWORLD_ROOT``: AppWorld's folder, holding its ``data`` (what ``appworld download data``
  fetches; required);
- ``APPWORLD_PYTHON``: the interpreter of the environment where ``appworld`` is installed
  (default: this interpreter, which works only when ``appworld`` imports here);
- ``APPWORLD_PYTHONPATH``: an import path for that interpreter (e.g. an ``appworld`` source
  checkout; optional).

:class:`Bridge` runs ``_appworld_bridge.py`` with that interpreter in its own process group and
exchanges one JSON line per request with it, every wait bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, NamedTuple

from controlscope.core import TaskError

__all__ = [
    "BRIDGE",
    "PATH_ENV",
    "PYTHON_ENV",
    "ROOT_ENV",
    "AppWorldMissing",
    "AppWorldSetup",
    "Bridge",
    "appworld_setup",
]

ROOT_ENV = "APPWORLD_ROOT"
"""The variable naming AppWorld's folder (with its ``data``)."""

PYTHON_ENV = "APPWORLD_PYTHON"
"""The variable naming the interpreter that has the ``appworld`` package."""

PATH_ENV = "APPWORLD_PYTHONPATH"
"""The variable naming an import path for AppWorld's interpreter (optional)."""

BRIDGE = Path(__file__).with_name("_appworld_bridge.py")
"""The bridge program (run with AppWorld's interpreter)."""

_STDERR_CHARS = 2000


class AppWorldMissing(TaskError):
    """AppWorld, its interpreter or its data is not where the variables say (the message says
    what to do)."""


class AppWorldSetup(NamedTuple):
    """Where AppWorld is: its interpreter, its folder, an import path for the interpreter."""

    python: str
    root: Path
    pythonpath: str | None = None

    def env(self) -> dict[str, str]:
        """The environment AppWorld's interpreter runs with."""
        env = {**os.environ, ROOT_ENV: str(self.root), "PYTHONUNBUFFERED": "1"}
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        return env


def appworld_setup() -> AppWorldSetup:
    """AppWorld's interpreter and folder, checked.

    Raises:
        AppWorldMissing: ``APPWORLD_ROOT`` unset or without ``data``, or the interpreter
            cannot import ``appworld``.
    """
    root = os.environ.get(ROOT_ENV)
    if not root or not (Path(root) / "data").is_dir():
        raise AppWorldMissing(
            f"AppWorld's data is not found: set ${ROOT_ENV} to the folder where `appworld "
            "download data` put its data folder (the download needs the internet), and "
            f"${PYTHON_ENV} to the python of a virtual environment with `pip install appworld` "
            "(it pins pydantic 1: keep it apart from controlscope's)"
        )
    found = AppWorldSetup(
        os.environ.get(PYTHON_ENV) or sys.executable, Path(root), os.environ.get(PATH_ENV)
    )
    python = found.python
    probe = subprocess.run(
        [python, "-c", "import appworld"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=found.env(),
    )
    if probe.returncode != 0:
        raise AppWorldMissing(
            f"the appworld package does not import with {python} (${PYTHON_ENV}): "
            f"{probe.stderr.strip()[-300:] or 'no output'}; install it there with "
            "`pip install appworld` and run `appworld install`"
        )
    return found


class Bridge:
    """One bridge process (see :mod:`._appworld_bridge`).

    Args:
        where: AppWorld's interpreter, folder (the process's ``APPWORLD_ROOT`` and working
            directory) and import path.
        timeout_s: the longest wait for one answer.
        stderr: where the bridge's stderr goes (default: nowhere).
        own_group: run the bridge in a process group of its own, killed whole on close; False
            keeps it in the caller's group (a server's bridge then dies with its server).

    Raises:
        OSError: the interpreter cannot be started.
    """

    def __init__(
        self,
        where: AppWorldSetup,
        *,
        timeout_s: float = 300.0,
        stderr: IO[str] | None = None,
        own_group: bool = True,
    ) -> None:
        self._timeout_s = timeout_s
        self._own_group = own_group
        self._process = subprocess.Popen(
            [where.python, str(BRIDGE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
            text=True,
            cwd=where.root,
            env=where.env(),
            start_new_session=own_group,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="appworld-bridge").start()

    def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        for line in stdout:
            self._lines.put(line)
        self._lines.put(None)

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and wait for its answer.

        Raises:
            RuntimeError: the bridge answered an error, died, or did not answer in time.
        """
        stdin = self._process.stdin
        if stdin is None or self._process.poll() is not None:
            raise RuntimeError(f"the AppWorld bridge is not running (exit {self._process.poll()})")
        stdin.write(json.dumps({"op": op, **fields}) + "\n")
        stdin.flush()
        try:
            line = self._lines.get(timeout=self._timeout_s)
        except queue.Empty:
            raise RuntimeError(f"AppWorld did not answer {op!r} in {self._timeout_s:g} s") from None
        if line is None:
            raise RuntimeError(f"the AppWorld bridge ended during {op!r}")
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise RuntimeError(f"the AppWorld bridge answered {op!r} with {line[:200]!r}")
        if "error" in answer:
            raise RuntimeError(f"AppWorld failed {op!r}: {str(answer['error'])[:_STDERR_CHARS]}")
        return answer

    def close(self) -> None:
        """End the bridge (its stdin closed, then its process group killed); idempotent."""
        process = self._process
        if process.stdin is not None and not process.stdin.closed:
            with contextlib.suppress(OSError):
                process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        if self._own_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # whatever it started goes with it
        elif process.poll() is None:
            process.kill()
        process.wait(timeout=10)

    def __enter__(self) -> Bridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
