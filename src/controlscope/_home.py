"""Where controlscope keeps what it fetches for a user: the embedded model's weights and the
pinned MCP filesystem server."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "CONTROLSCOPE_HOME"
"""Environment variable naming the directory that replaces ``~/.cache/controlscope``."""


def home() -> Path:
    """The user's controlscope directory (not created here): ``$CONTROLSCOPE_HOME`` when set,
    else ``~/.cache/controlscope``."""
    given = os.environ.get(HOME_ENV)
    if given:
        return Path(given).expanduser()
    return Path.home() / ".cache" / "controlscope"
