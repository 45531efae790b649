"""Every app and API, registered in a fixed order: the registry the server, the documentation
APIs and the environment's tool sets read."""

from __future__ import annotations

# Registration happens on import, in this order (the server lists tools in it).
from controlscope.envs.apps import _money_mail, _music, _people, _stores  # noqa: F401
from controlscope.envs.apps._api import APIS, APPS, Api

__all__ = ["APIS", "APPS", "READ_TOOLS", "WRITE_TOOLS", "Api"]

READ_TOOLS: frozenset[str] = frozenset(t for t, a in APIS.items() if not a.writes)
"""Tools that only return information (documentation, listings, shows, logins)."""

WRITE_TOOLS: frozenset[str] = frozenset(t for t, a in APIS.items() if a.writes)
"""Tools that change an app's state (the supervisor's ``complete_task`` among them)."""
