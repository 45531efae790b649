"""Which files the viewer and the report may read: only those inside the folder they were given.
A run reached through a symbolic link, or named ``..`` by a ``branches.json`` or a panel's
manifest, that leads out of that folder is left out (the page or the report says so), so
serving, exporting or reporting a folder reads nothing from elsewhere."""

from __future__ import annotations

from pathlib import Path


def inside(root: Path, path: Path, *, resolved: Path | None = None) -> bool:
    """Whether ``path``, its links followed, is ``root`` or below it (a link loop is not).

    Args:
        root: the folder given to the viewer.
        path: a file or folder below ``root`` by name (it need not exist).
        resolved: ``root.resolve()``, when the caller has it (many paths below one root).
    """
    try:
        return path.resolve().is_relative_to(resolved or root.resolve())
    except (OSError, RuntimeError):  # RuntimeError: a link loop
        return False
