"""The template registry."""

from __future__ import annotations

from controlscope.envs.apps._template import Template

__all__ = ["TEMPLATES", "register"]

TEMPLATES: dict[str, Template] = {}
"""Template id -> template, in registration order."""


def register(cls: type[Template]) -> type[Template]:
    """Register a template class (one instance of it serves every task of the template).

    Raises:
        ValueError: an id registered twice.
    """
    if cls.id in TEMPLATES:
        raise ValueError(f"template {cls.id} registered twice")
    TEMPLATES[cls.id] = cls()
    return cls
