"""The scenario templates, registered in a fixed order (paper section 4: tasks come as
scenario templates with three instances each)."""

from __future__ import annotations

# Registration happens on import.
from controlscope.envs.apps._templates import _lookups, _multi, _writes  # noqa: F401
from controlscope.envs.apps._templates._registry import TEMPLATES, register

__all__ = ["TEMPLATES", "register"]
