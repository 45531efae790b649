"""The environment registry: environments by name, imported when first asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from controlscope.core import TaskError
from controlscope.envs._base import Environment

__all__ = ["ENVIRONMENTS", "environment_names", "get_environment"]

ENVIRONMENTS: dict[str, str] = {
    "filesystem": "controlscope.envs.filesystem.environment:FilesystemEnvironment",
    "alfworld": "controlscope.envs.alfworld.environment:AlfworldEnvironment",
}
"""Environment name -> ``module:factory`` (a zero-argument callable returning the environment)."""


def environment_names() -> list[str]:
    """The registered environment names, sorted."""
    return sorted(ENVIRONMENTS)


def get_environment(name: str) -> Environment:
    """Build the environment called ``name``.

    Args:
        name: a registered environment name (``filesystem``).

    Returns:
        A new instance of the environment.

    Raises:
        TaskError: unknown name (the message lists the known ones).
    """
    target = ENVIRONMENTS.get(name)
    if target is None:
        raise TaskError(f"unknown environment {name!r}; known: {', '.join(environment_names())}")
    module_name, _, attr = target.partition(":")
    factory: Callable[[], Environment] = getattr(importlib.import_module(module_name), attr)
    return factory()
