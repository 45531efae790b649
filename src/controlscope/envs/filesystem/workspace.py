"""Task workspaces: one fresh directory per branch, removed afterwards, and a content hash.

Paper appendix A.1: "The environment server receives a separate task workspace for each branch";
appendix A.4: source programs replay in independent workspaces, and task-relevant original
modification times are preserved and compared while times of files written during execution are
tracked apart. :func:`content_hash` follows that rule: it hashes relative names and bytes, and, when
asked, the modification times that were set explicitly to the past (``os.utime`` in a generator),
never the times of files written by the run itself.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from types import TracebackType

from controlscope._leftovers import make_dir
from controlscope._tree import Entry, remove_tree, walk_tree
from controlscope.core import TaskError

__all__ = ["HISTORICAL_MARGIN_S", "Workspace", "content_hash", "file_hashes"]

HISTORICAL_MARGIN_S = 86_400.0
"""A file's modification time counts as task-relevant (historical) when it is at least this many
seconds older than the start of the run whose state is hashed (the moment of hashing when it is
not known). Generators date files years back; a run lasts at most 1,800 s (paper section 4), so
nothing a run writes is this old. A replay hashes from its recording's start, so a file a copied
task state brought that was under a day old then counts the same however much later it replays."""

_CHUNK = 1 << 20


class Workspace:
    """A fresh, empty task workspace directory; a context manager that removes it afterwards.

    Example::

        with Workspace(prefix="english_talent-") as ws:
            key = env.setup(task, seed, ws.path)

    Attributes:
        path: the absolute, symlink-resolved directory (the MCP server reports resolved paths).
    """

    def __init__(self, root: Path | None = None, *, prefix: str = "cs-ws-") -> None:
        """Create the directory.

        Args:
            root: the parent directory (created when missing); the system temp dir when ``None``.
            prefix: the directory name's prefix; characters other than ASCII letters, digits,
                ``-`` and ``_`` are replaced by ``_``. The name goes on with this process's
                mark (:func:`controlscope.clean` removes it once this process is gone).

        Raises:
            TaskError: the directory cannot be created (unwritable root, a file in the way...).
        """
        safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in prefix)
        try:
            if root is not None:
                Path(root).mkdir(parents=True, exist_ok=True)
            made = make_dir(safe or "cs-ws-", root)
        except OSError as error:
            where = "the system temp directory" if root is None else str(root)
            raise TaskError(f"cannot create a task workspace under {where}: {error}") from error
        self.path = Path(made).resolve()
        self._removed = False

    @classmethod
    def create(cls, root: Path | None = None, *, prefix: str = "cs-ws-") -> Workspace:
        """Same as ``Workspace(root, prefix=prefix)``.

        Raises:
            TaskError: the directory cannot be created.
        """
        return cls(root, prefix=prefix)

    def remove(self) -> None:
        """Delete the workspace and everything in it, however deep agent code nested it; safe
        to call twice.

        Raises:
            OSError: something in it cannot be removed.
        """
        if self._removed:
            return
        self._removed = True
        remove_tree(self.path)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def content_hash(
    root: Path,
    *,
    historical_mtimes: bool = False,
    now: float | None = None,
) -> str:
    """Hash a workspace's tree: relative names, file bytes and, optionally, historical mtimes.

    Directories (including empty ones) count by name; files by name and content; symlinks by name
    and target (never followed); anything else by name. The walk is iterative and descends
    :data:`controlscope._tree.MAX_WALK_DEPTH` levels (deeper directories count by name only), so
    no tree agent code shaped can exhaust the interpreter's stack. With ``historical_mtimes``, a
    file's modification time (whole seconds) is included when it is at least
    :data:`HISTORICAL_MARGIN_S` older than ``now``: the task-relevant times a generator set, which
    a correct run preserves (``move_file`` keeps them),
    while files the run wrote carry the current time and are left out (paper appendix A.4).

    Args:
        root: the workspace directory.
        historical_mtimes: include task-relevant modification times (time-sensitive tasks).
        now: the reference time, seconds since the epoch: when the run whose state this is
            started (``time.time()`` when ``None``).

    Returns:
        A hex SHA-256 digest (64 characters); equal trees give equal digests.

    Raises:
        TaskError: ``root`` is not a directory or cannot be read.
    """
    digest = hashlib.sha256()
    for rel, kind, extra in _entries(root, historical_mtimes, now):
        digest.update(f"{kind}\0{rel}\0{extra}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def file_hashes(
    root: Path,
    *,
    historical_mtimes: bool = False,
    now: float | None = None,
) -> dict[str, str]:
    """Each file of a workspace's tree by relative path: what :func:`content_hash` hashes, per
    file, so two terminal workspaces can be compared file by file (paper section 3.3).

    Args:
        root: the workspace directory.
        historical_mtimes: add the historical modification times (as :func:`content_hash`).
        now: the reference time, seconds since the epoch (``time.time()`` when ``None``).

    Returns:
        For a file, the SHA-256 of its bytes (hex), followed by ``:MTIME`` (whole seconds) when
        its historical modification time is part of the state; for a symlink, ``-> TARGET``.
        Directories are left out (:func:`content_hash` counts them).

    Raises:
        TaskError: ``root`` is not a directory or cannot be read.
    """
    out: dict[str, str] = {}
    for rel, kind, extra in _entries(root, historical_mtimes, now):
        if kind == "F":
            out[rel] = extra.split(":", 1)[1]
        elif kind == "L":
            out[rel] = f"-> {extra}"
    return out


def _entries(root: Path, historical_mtimes: bool, now: float | None) -> list[tuple[str, str, str]]:
    """The tree's sorted ``(relative path, kind, extra)`` entries (see :func:`_walk`).

    Raises:
        TaskError: ``root`` is not a directory or cannot be read.
    """
    base = Path(root)
    if not base.is_dir():
        raise TaskError(f"cannot hash workspace {base}: not a directory")
    cutoff = (time.time() if now is None else now) - HISTORICAL_MARGIN_S
    try:
        return sorted(_walk(base, historical_mtimes, cutoff))
    except OSError as error:
        raise TaskError(f"cannot hash workspace {base}: {error}") from error


def _walk(base: Path, historical_mtimes: bool, cutoff: float) -> list[tuple[str, str, str]]:
    """``(relative name, kind, detail)`` of every entry, walked without recursion (see
    :func:`controlscope._tree.walk_tree`; a directory below its depth bound counts by name with
    kind ``X``, a FIFO, socket or device by name with kind ``O``)."""
    entries: list[tuple[str, str, str]] = []
    for entry in walk_tree(base):
        extra = ""
        if entry.kind == "L":
            extra = os.readlink(entry.name, dir_fd=entry.dir_fd)
        elif entry.kind == "F":
            extra = f"{entry.stat.st_size}:{_file_digest(entry)}"
            if historical_mtimes and entry.stat.st_mtime < cutoff:
                extra += f":{int(entry.stat.st_mtime)}"
        entries.append((entry.rel, entry.kind, extra))
    return entries


def _file_digest(entry: Entry) -> str:
    digest = hashlib.sha256()
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    with os.fdopen(os.open(entry.name, flags, dir_fd=entry.dir_fd), "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
