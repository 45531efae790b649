"""Users' own tasks: MCPMark's filesystem task folders and any MCP server's tasks from a task
spec file, graded by third-party verifiers run in the sandbox.

Public API: :class:`McpmarkEnvironment` (``mcpmark:PATH``), :class:`SpecEnvironment`
(``taskspec:FILE``) with :class:`TaskSpec` and :func:`load_task_spec`, :func:`grant_network`,
and :data:`VERIFY_LIMITS`; the most a state (:data:`MAX_STATE_ENTRIES`,
:data:`MAX_STATE_BYTES`) and a task folder (:data:`MAX_FOLDER_ENTRIES`,
:data:`MAX_FOLDER_BYTES`) may hold. Both environments are reached by name through
:func:`controlscope.envs.get_environment`, so runs, replays, branches and panels name them as
they name the built-in ones.
"""

from __future__ import annotations

from controlscope.envs._base import Environment
from controlscope.envs._confine import CommandLimits
from controlscope.envs.external._files import (
    MAX_FOLDER_BYTES,
    MAX_FOLDER_ENTRIES,
    MAX_STATE_BYTES,
    MAX_STATE_ENTRIES,
)
from controlscope.envs.external._mcpmark import McpmarkEnvironment
from controlscope.envs.external._spec import TaskSpec, load_task_spec
from controlscope.envs.external._spec_env import SpecEnvironment
from controlscope.envs.external._verify import VERIFY_LIMITS

__all__ = [
    "MAX_FOLDER_BYTES",
    "MAX_FOLDER_ENTRIES",
    "MAX_STATE_BYTES",
    "MAX_STATE_ENTRIES",
    "VERIFY_LIMITS",
    "CommandLimits",
    "McpmarkEnvironment",
    "SpecEnvironment",
    "TaskSpec",
    "grant_network",
    "load_task_spec",
]


def grant_network(env: Environment) -> Environment:
    """``env`` with the network granted to its tool server (``--allow-network``).

    Args:
        env: a task spec's environment whose server asks for the network.

    Returns:
        The environment with the grant.

    Raises:
        TaskError: ``env`` has no server that asks for the network (the grant would be
            silently meaningless; :meth:`Environment.with_network`).
    """
    return env.with_network()
