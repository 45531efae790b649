"""The command line of the environments' own Python MCP servers (started by
:meth:`controlscope.envs._mcp.McpToolServer.python_module`): ``python -m MODULE WORKSPACE``."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["workspace_file"]


def workspace_file(argv: list[str] | None, *, module: str, server: str, name: str) -> Path | None:
    """The file ``name`` in the workspace a server's one argument names.

    Args:
        argv: the arguments (None: ``sys.argv[1:]``).
        module: the server's module, for the usage line.
        server: the server's name, for the error line.
        name: the file the workspace must hold.

    Returns:
        The file's resolved path; None after printing the usage (not exactly one argument) or
        the missing file to stderr (the server then exits with status 2).
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} WORKSPACE", file=sys.stderr)
        return None
    path = Path(args[0]).resolve() / name
    if not path.is_file():
        print(f"{server}: no {name} in {path.parent}", file=sys.stderr)
        return None
    return path
