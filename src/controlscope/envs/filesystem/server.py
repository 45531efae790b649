"""Start the pinned npm MCP filesystem server confined to one task workspace.

The server is ``@modelcontextprotocol/server-filesystem`` pinned in the repository's
``package.json``/``package-lock.json`` and installed with ``npm ci``. It is started as
``node .../dist/index.js WORKSPACE`` (paper section 4: "the official MCP filesystem server", one
workspace per branch, appendix A.1), never through ``npx``, so no network is needed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from controlscope.envs.base import TaskError
from controlscope.mcp_client import McpToolServer

__all__ = ["NODE_MODULES_ENV", "SERVER_SCRIPT", "find_server_script", "start_filesystem_server"]

NODE_MODULES_ENV = "CONTROLSCOPE_NODE_MODULES"
"""Environment variable naming a ``node_modules`` directory that holds the pinned server."""

SERVER_SCRIPT = Path("@modelcontextprotocol") / "server-filesystem" / "dist" / "index.js"
"""The server's entry point, relative to ``node_modules``."""


def find_server_script() -> Path:
    """Locate the pinned server's ``dist/index.js``.

    Looks in ``$CONTROLSCOPE_NODE_MODULES`` when set, else in ``node_modules`` of this package's
    directory and each of its parents (the repository root in a checkout).

    Returns:
        The absolute path of ``index.js``.

    Raises:
        TaskError: the server is not installed; the message says to run ``npm ci``.
    """
    override = os.environ.get(NODE_MODULES_ENV)
    if override:
        script = Path(override).expanduser().resolve() / SERVER_SCRIPT
        if script.is_file():
            return script
        raise TaskError(
            f"${NODE_MODULES_ENV} is {override!r} but {SERVER_SCRIPT} is not in it; run `npm ci` "
            "in the controlscope repository root, or point the variable at its node_modules"
        )
    here = Path(__file__).resolve()
    for parent in here.parents:
        script = parent / "node_modules" / SERVER_SCRIPT
        if script.is_file():
            return script
    raise TaskError(
        f"the MCP filesystem server is not installed (no node_modules/{SERVER_SCRIPT} above "
        f"{here.parent}); run `npm ci` in the controlscope repository root (it reads "
        f"package-lock.json), or set ${NODE_MODULES_ENV} to a node_modules directory that holds it"
    )


def start_filesystem_server(
    workspace: Path,
    *,
    timeout_s: float = 60.0,
    stderr_path: Path | None = None,
) -> McpToolServer:
    """Start the filesystem server with ``workspace`` as its only allowed directory.

    Relative paths in tool arguments resolve against the workspace (the server's own rule), and the
    server process runs with the workspace as its working directory and ``TZ=UTC``, so the dates
    that ``get_file_info`` reports agree with the verifiers' (which use UTC).

    Args:
        workspace: an existing directory; the server may touch nothing outside it.
        timeout_s: seconds allowed for start-up and for each primitive call.
        stderr_path: a file for the server's stderr (a temporary file when ``None``).

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
    return McpToolServer.stdio(
        node,
        [str(script), str(root)],
        cwd=root,
        env={"TZ": "UTC"},
        timeout_s=timeout_s,
        stderr_path=stderr_path,
    )
