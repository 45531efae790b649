"""The environment registry: environments by name, imported when first asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from controlscope.core import TaskError
from controlscope.envs._base import Environment

__all__ = ["ENVIRONMENTS", "ENVIRONMENT_KINDS", "environment_names", "get_environment"]

ENVIRONMENTS: dict[str, str] = {
    "filesystem": "controlscope.envs.filesystem.environment:FilesystemEnvironment",
    "alfworld": "controlscope.envs.alfworld.environment:AlfworldEnvironment",
    "apps": "controlscope.envs.apps.environment:AppsEnvironment",
    "appworld": "controlscope.envs.apps.appworld_env:AppWorldEnvironment",
}
"""Environment name -> ``module:factory`` (a zero-argument callable returning the environment)."""

ENVIRONMENT_KINDS: dict[str, str] = {
    "mcpmark": "controlscope.envs.external:McpmarkEnvironment",
    "taskspec": "controlscope.envs.external:SpecEnvironment",
    "session": "controlscope.envs.session:SessionEnvironment",
}
"""Environments named with a path, ``KIND:PATH`` -> ``module:factory`` (called with the path):
``mcpmark:DIR`` (MCPMark task folders), ``taskspec:FILE`` (a task spec's tasks),
``session:RUN_DIR`` (an agent's session recorded by :class:`controlscope.Executor`)."""


def environment_names() -> list[str]:
    """The registered environment names, sorted."""
    return sorted(ENVIRONMENTS)


def get_environment(name: str) -> Environment:
    """Build the environment called ``name``.

    Args:
        name: a registered environment name (``filesystem``), or a kind of
            :data:`ENVIRONMENT_KINDS` with its path (``mcpmark:DIR``, ``taskspec:FILE``).

    Returns:
        A new instance of the environment.

    Raises:
        TaskError: unknown name (the message lists the known ones), or a path the kind
            cannot read.
    """
    kind, colon, path = name.partition(":")
    if kind in ENVIRONMENT_KINDS:
        if not colon or not path.strip():
            raise TaskError(f"environment {kind} is named with a path: {kind}:PATH")
        made: Environment = _factory(ENVIRONMENT_KINDS[kind])(path.strip())
        return made
    target = ENVIRONMENTS.get(name)
    if target is None:
        kinds = ", ".join(f"{k}:PATH" for k in ENVIRONMENT_KINDS)
        raise TaskError(
            f"unknown environment {name!r}; known: {', '.join(environment_names())}, {kinds}"
        )
    built: Environment = _factory(target)()
    return built


def _factory(target: str) -> Callable[..., Environment]:
    """The callable ``module:attribute`` names, its module imported now."""
    module_name, _, attr = target.partition(":")
    factory: Callable[..., Environment] = getattr(importlib.import_module(module_name), attr)
    return factory
