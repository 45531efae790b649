"""Environments: tasks, their initial states, a tool server per workspace, native verifiers.

Public API: the :class:`Environment` protocol, :func:`get_environment` (by name, e.g.
``filesystem``, or with a path: ``mcpmark:DIR``, ``taskspec:FILE``), :func:`environment_names`,
:class:`McpToolServer` (a synchronous client of any MCP server, what an environment's
``start_server`` returns), and users' own tasks (:mod:`controlscope.envs.external`).
"""

from controlscope.envs._base import Environment
from controlscope.envs._catalog import (
    ENVIRONMENT_KINDS,
    ENVIRONMENTS,
    environment_names,
    get_environment,
)
from controlscope.envs._mcp import McpToolServer

__all__ = [
    "ENVIRONMENTS",
    "ENVIRONMENT_KINDS",
    "Environment",
    "McpToolServer",
    "environment_names",
    "get_environment",
]
