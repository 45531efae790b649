"""Environments: tasks, their initial states, a tool server per workspace, native verifiers.

Public API: the :class:`Environment` protocol, :func:`get_environment` (by name, e.g.
``filesystem``), :func:`environment_names`, and :class:`McpToolServer` (a synchronous client of
any MCP server, what an environment's ``start_server`` returns).
"""

from controlscope.envs._base import Environment
from controlscope.envs._catalog import ENVIRONMENTS, environment_names, get_environment
from controlscope.envs._mcp import McpToolServer

__all__ = [
    "ENVIRONMENTS",
    "Environment",
    "McpToolServer",
    "environment_names",
    "get_environment",
]
