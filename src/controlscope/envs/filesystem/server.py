"""Start the pinned npm MCP filesystem server confined to one task workspace.

The server is ``@modelcontextprotocol/server-filesystem`` pinned in the repository's
``package.json``/``package-lock.json`` and installed with ``npm ci``: in a checkout's root, or by
``controlscope setup`` into the user's controlscope directory
(:mod:`controlscope.envs.filesystem._install`). It is started as ``node .../dist/index.js
WORKSPACE`` (paper section 4: "the official MCP filesystem server", one workspace per branch,
appendix A.1), never through ``npx``, so no network is needed.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from datetime import datetime
from functools import cache
from pathlib import Path

from controlscope import _bwrap
from controlscope.core import TaskError
from controlscope.envs._confine import AGENT_ROOT, confined_label, server_options
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.filesystem._install import SERVER_SCRIPT, installed_script, server_dir
from controlscope.envs.filesystem.workspace import HISTORICAL_MARGIN_S

__all__ = [
    "AGENT_ROOT",
    "CLOCK_MASK",
    "NODE_MODULES_ENV",
    "SERVER_SCRIPT",
    "find_server_script",
    "normalise_observation",
    "start_filesystem_server",
]

log = logging.getLogger(__name__)

NODE_MODULES_ENV = "CONTROLSCOPE_NODE_MODULES"
"""Environment variable naming a ``node_modules`` directory that holds the pinned server."""


def _checkout_root() -> Path | None:
    """The repository root when this package runs from a checkout: the nearest parent with
    the pin (``package-lock.json``) and ``pyproject.toml``."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "package-lock.json").is_file() and (parent / "pyproject.toml").is_file():
            return parent
    return None


def find_server_script() -> Path:
    """Locate the pinned server's ``dist/index.js``.

    Looks in ``$CONTROLSCOPE_NODE_MODULES`` when set; else in the checkout's ``node_modules``
    (``npm ci`` in the repository root), when this package runs from a checkout; else where
    ``controlscope setup`` installs it (``<home>/mcp-servers``, an install of this package's
    pin only).

    Returns:
        The absolute path of ``index.js``.

    Raises:
        TaskError: the server is not installed; the message says to run ``npm ci`` in the
            checkout, or ``controlscope setup`` in an installation from a package.
    """
    override = os.environ.get(NODE_MODULES_ENV)
    if override:
        script = Path(override).expanduser().resolve() / SERVER_SCRIPT
        if script.is_file():
            return script
        raise TaskError(
            f"${NODE_MODULES_ENV} is {override!r} but {SERVER_SCRIPT} is not in it; run "
            "`controlscope setup`, or point the variable at a node_modules that holds it"
        )
    root = _checkout_root()
    if root is not None and (root / "node_modules" / SERVER_SCRIPT).is_file():
        return root / "node_modules" / SERVER_SCRIPT
    installed = installed_script()
    if installed is not None:
        return installed.resolve()
    where = f"`npm ci` in {root}, or " if root is not None else ""
    raise TaskError(
        f"the MCP filesystem server is not installed; run {where}`controlscope setup` (it "
        f"installs the pinned server into {server_dir()} with npm)"
    )


#: A clock reading in ``get_file_info``'s answer: the field, then JavaScript's ``Date`` text
#: (``Mon Nov 30 2026 12:30:53 GMT+0000 (Coordinated Universal Time)``).
_CLOCK_FIELD = re.compile(
    # No word boundary before the field: in JSON or repr text (a variable in a review prompt)
    # the line break before it is the two characters backslash, n.
    r"(created|modified|accessed): ([A-Z][a-z]{2} [A-Z][a-z]{2} \d{2} \d{4} "
    r"\d{2}:\d{2}:\d{2} GMT[+-]\d{4})(?: \([^()\n\\]*\))?"
)
CLOCK_MASK = "<clock>"
# A reading cut by a size bound: the part before a cut marker (a review view's
# ``[... N chars cut ...]``, a variable snapshot's ``…[+N chars]``, the worker's
# ``…[output truncated: ...]``) or after a view's marker (views keep both ends). The dates have a
# fixed width, so a cut falls at the same place in two runs and only the readings differ.
_VIEW_CUT = r"\[\.\.\. \d+ chars cut \.\.\.\]"
_ANY_CUT = r"(?:" + _VIEW_CUT + r"|…\[\+\d+ chars\]|(?:\n|\\n)…\[output truncated)"
_CLOCK_HEAD_AT_CUT = re.compile(
    r"(created|modified|accessed): [A-Za-z0-9 :+-]*(?=" + _ANY_CUT + ")"
)
_CLOCK_TAIL_AT_CUT = re.compile(
    "(" + _VIEW_CUT + r")[A-Za-z0-9 :+-]*GMT[+-]\d{4}(?: \([^()\n\\]*\))?"
)


def normalise_observation(text: str, *, since: float | None = None) -> str:
    """Mask the file times that no seed controls, for comparing two runs (paper 3.3 and A.4).

    ``get_file_info`` reports a file's creation, access and modification times. Creation and
    access times are readings of the machine's clock and are always masked, and so is a
    modification time from ``since`` minus :data:`HISTORICAL_MARGIN_S` on (a file the run or
    the set-up wrote without dating it: its time is when it was written). Older modification
    times are the task's own, dated by the generator from the seed (A.4: "task-relevant
    original modification times remain preserved"), and are kept, so a run that changed one
    is still seen to differ. A reading cut by a size bound (next to the marker of a bounded
    review view, a variable snapshot or the captured output) cannot be dated and is masked.
    A masked reading becomes ``created: <clock>`` etc., wherever it appears (the tool's
    answer, printed output, a variable, also inside JSON or ``repr`` text).

    Args:
        text: any text of a model request.
        since: when the run whose text this is started (seconds since the epoch); None: now.
            A replay normalises its recording's text and its own with the recording's start,
            so both sides mask the same readings.

    Returns:
        ``text`` with those readings replaced by :data:`CLOCK_MASK`.
    """
    if ": " not in text and "GMT" not in text:
        return text
    cutoff = (time.time() if since is None else since) - HISTORICAL_MARGIN_S

    def mask(match: re.Match[str]) -> str:
        field, reading = match.group(1), match.group(2)
        if field == "modified" and _epoch(reading) < cutoff:
            return match.group(0)
        return f"{field}: {CLOCK_MASK}"

    text = _CLOCK_FIELD.sub(mask, text)
    if "chars cut" in text or "…[" in text:
        text = _CLOCK_HEAD_AT_CUT.sub(lambda m: f"{m.group(1)}: {CLOCK_MASK}", text)
        text = _CLOCK_TAIL_AT_CUT.sub(lambda m: m.group(1) + CLOCK_MASK, text)
    return text


def _epoch(reading: str) -> float:
    """Seconds since the epoch of a JavaScript ``Date`` text (``Tue Mar 14 2023 09:00:00
    GMT+0000``)."""
    return datetime.strptime(reading.replace("GMT", ""), "%a %b %d %Y %H:%M:%S %z").timestamp()


def start_filesystem_server(
    workspace: Path,
    *,
    timeout_s: float = 60.0,
    stderr_path: Path | None = None,
    confine: bool = True,
) -> McpToolServer:
    """Start the filesystem server with ``workspace`` as its only allowed directory.

    Where bubblewrap works (Linux), the server runs confined in its own namespaces: it sees the
    workspace at :data:`AGENT_ROOT` (``/workspace``) whatever its host path, no network, and the
    rest of the system read-only; ``server.agent_roots`` says what agent code must call the root.
    Elsewhere it sees the host path (a warning says so). Relative paths in tool arguments resolve
    against the workspace (the server's own rule), and the server runs with the workspace as its
    working directory and ``TZ=UTC``, so the dates that ``get_file_info`` reports agree with the
    verifiers' (which use UTC).

    Args:
        workspace: an existing directory; the server may touch nothing outside it.
        timeout_s: seconds allowed for start-up and for each primitive call.
        stderr_path: a file for the server's stderr (a temporary file when ``None``).
        confine: run the server under bubblewrap at the fixed root when possible.

    Returns:
        The connected server; close it when the branch ends.

    Raises:
        TaskError: Node.js or the server is missing, or the workspace is not a directory.
        ToolServerError: the server did not start.
    """
    script = find_server_script()
    node = shutil.which("node")
    if node is None:
        raise TaskError("Node.js (`node`) is not on PATH; the MCP filesystem server needs it")
    root = Path(workspace).resolve()
    if not root.is_dir():
        raise TaskError(f"workspace {root} is not a directory")
    bwrap = _bwrap.bwrap_path()
    if confine and bwrap is not None and _bwrap_works(node, script):
        server = McpToolServer.stdio(
            bwrap,
            [*_bwrap_options(node, script, root), node, str(script), AGENT_ROOT],
            env={"TZ": "UTC"},
            timeout_s=timeout_s,
            stderr_path=stderr_path,
            label=confined_label(node, [str(script), AGENT_ROOT]),
        )
        server.agent_roots = (AGENT_ROOT,)
        return server
    if confine:
        log.warning(
            "bubblewrap is unavailable: the filesystem server sees the workspace at its host path "
            "%s, so paths differ between branches",
            root,
        )
    server = McpToolServer.stdio(
        node,
        [str(script), str(root)],
        cwd=root,
        env={"TZ": "UTC"},
        timeout_s=timeout_s,
        stderr_path=stderr_path,
    )
    server.agent_roots = (str(root),)
    return server


def _bwrap_options(node: str, script: Path, root: Path) -> list[str]:
    """bwrap's options for the server: a tool server's confinement
    (:func:`controlscope.envs._confine.server_options`) with Node.js and the pinned package
    read-only, and the workspace bound read-write at :data:`AGENT_ROOT`, its working
    directory."""
    real_node = Path(os.path.realpath(node))
    ro_paths = [*sorted({real_node.parent.parent, script.parents[3]}), Path(node).parent]
    return server_options(ro_paths, root)


@cache
def _bwrap_works(node: str, script: Path) -> bool:
    """Whether Node.js runs under the server's bwrap options here (checked once)."""
    probe = Path(os.path.realpath("/tmp"))
    command = [node, "-e", "process.stdout.write('ok')"]
    problem = _bwrap.probe(_bwrap_options(node, script, probe), command, timeout_s=30)
    if problem is not None:
        log.info("the filesystem server cannot run under bwrap: %s", problem)
    return problem is None
