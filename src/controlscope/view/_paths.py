"""Which files the viewer may read: only those inside the folder it was given (the check is
:func:`controlscope._paths.inside`, shared with the report, which reads a panel's runs by the
same rule)."""

from __future__ import annotations

from controlscope._paths import inside

__all__ = ["inside"]
