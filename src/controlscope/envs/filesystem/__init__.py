"""The filesystem environment (MCPMark-style tasks on the pinned npm MCP filesystem server).

Public API here: installing the pinned server for an installation from a package
(:func:`install_server`, :class:`SetupError`, :func:`server_dir`); the environment itself is
:mod:`.environment`, the server's start :mod:`.server`.
"""

from controlscope.envs.filesystem._install import SetupError, install_server, server_dir

__all__ = ["SetupError", "install_server", "server_dir"]
