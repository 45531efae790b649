"""Temporary directories marked with the process that owns them, and the sweep that removes
those whose owner is gone.

A run removes what it made on every path it can see; a ``SIGKILL``, an out-of-memory kill or a
power cut gives it none. So every directory the library makes in the temporary folder (or a
run's workspace root) carries its owner in its name::

    <prefix>@<pid>.<start>.<pidns>-<random>      e.g. cs-ws-@81234.5530127.4026531836-k3j9_x0a

``pid`` is the owning process, ``start`` its start time (clock ticks after boot, field 22 of
``/proc/PID/stat``: a pid the kernel gave again to another process has another start time) and
``pidns`` the inode of its pid namespace (a process in another namespace sharing the folder
cannot tell whether the owner lives, so it leaves the directory alone). A directory named so
plus a suffix (``<name>.at-boundary``, a fork point's copies) belongs to the same owner.

:func:`clean` (``controlscope clean``) removes the marked directories whose owner has died or
become a zombie, and only those: never a live owner's, never an unmarked entry, a link or
another user's; each run does the same at its start (:func:`sweep_quietly`). A directory is
first renamed to a name marked with the sweeping process (atomic: of two sweepers one wins),
then removed with :func:`controlscope._tree.remove_tree` (read-only directories and trees of
any depth that agent code made).

This module imports nothing from controlscope but :mod:`controlscope._tree`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from controlscope._tree import remove_tree

__all__ = ["Leftover", "clean", "make_dir", "owner_mark", "sweep_quietly", "temp_dir"]

log = logging.getLogger(__name__)

_MARKED = re.compile(
    r"[A-Za-z0-9_-]*@(?P<pid>[0-9]{1,10})\.(?P<start>[0-9]{1,20})\.(?P<ns>[0-9]{1,20})"
    r"-[a-z0-9_]{8}(?:\.[a-z-]{1,40})?"
)
_CLAIM_PREFIX = "cs-rm-"
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789_"


def _start_time(pid: int) -> str | None:
    """The start time of ``pid`` (``/proc/PID/stat`` field 22), or None when it is gone or a
    zombie; raises OSError when ``/proc`` cannot say."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def _namespace() -> int | None:
    """The inode of this process's pid namespace, or None when ``/proc`` does not show it."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


_marks: dict[int, str | None] = {}


def owner_mark() -> str | None:
    """This process's mark, ``@<pid>.<start>.<pidns>`` (None where ``/proc`` cannot tell: its
    directories are then unmarked and never swept). Computed once per process (a forked child
    gets its own)."""
    pid = os.getpid()
    if pid not in _marks:
        try:
            start, ns = _start_time(pid), _namespace()
        except OSError:
            start = ns = None
        _marks[pid] = None if start is None or ns is None else f"@{pid}.{start}.{ns}"
    return _marks[pid]


def make_dir(prefix: str, root: str | os.PathLike[str] | None = None) -> Path:
    """Make a new, empty directory named ``prefix`` plus this process's mark, as
    :func:`tempfile.mkdtemp` does (mode 0700).

    Args:
        prefix: the name's start (letters, digits, ``-`` and ``_``).
        root: the parent directory; the temporary folder (``TMPDIR``...) when None.

    Returns:
        Its path (as made: not resolved).

    Raises:
        OSError: it cannot be made.
    """
    mark = owner_mark()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{mark}-" if mark else prefix, dir=root))


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    """A marked directory (:func:`make_dir`) in the temporary folder, removed afterwards
    whatever it holds.

    Raises:
        OSError: it cannot be made.
    """
    path = make_dir(prefix)
    try:
        yield path
    finally:
        remove_tree(path)


@dataclass(frozen=True)
class Leftover:
    """A marked directory whose owner is gone.

    Attributes:
        path: where it was.
        owner: the pid of the process that made it.
        problem: why it could not be removed (None: removed, or would be, in a dry run).
    """

    path: Path
    owner: int
    problem: str | None = None


def clean(
    roots: Iterable[str | os.PathLike[str]] | None = None, *, dry_run: bool = False
) -> list[Leftover]:
    """Remove what runs killed before they could clean up left behind: the marked directories
    (task workspaces, worker directories, a fork point's copies, verifier and check copies)
    whose owning process is gone. A live process's directories, unmarked entries, links and
    other users' directories are never touched. Each run does this at its start; this is the
    same for a folder no run will sweep (``controlscope clean``).

    Args:
        roots: the folders to look in (not below them); the temporary folder when None.
        dry_run: only say what would be removed.

    Returns:
        One :class:`Leftover` per directory removed (or to remove), in name order; those that
        could not be removed say why. Empty where ``/proc`` does not show this process's pid
        namespace (nothing can be judged).

    Raises:
        OSError: a folder cannot be read (a missing one is fine).
    """
    here = _namespace()
    if here is None:
        return []
    found: list[Leftover] = []
    for root in [tempfile.gettempdir()] if roots is None else roots:
        for path, owner in _dead_owners(Path(root), here):
            leftover = Leftover(path, owner) if dry_run else _removed(path, owner)
            if leftover is not None:
                found.append(leftover)
    return found


def sweep_quietly(root: str | os.PathLike[str] | None = None) -> None:
    """:func:`clean` the temporary folder and ``root`` (when given) at a run's start; a
    failure is logged, never raised."""
    roots = [tempfile.gettempdir(), *([] if root is None else [os.fspath(root)])]
    try:
        for leftover in clean(dict.fromkeys(roots)):
            if leftover.problem is None:
                log.info("removed %s, left by process %d", leftover.path, leftover.owner)
            else:
                log.warning("cannot remove %s: %s", leftover.path, leftover.problem)
    except OSError as err:
        log.warning("cannot look for leftovers: %s", err)


def _dead_owners(root: Path, namespace: int) -> list[tuple[Path, int]]:
    """The marked directories directly in ``root`` (this user's, no links) whose owner, in
    ``namespace``, is gone."""
    found: list[tuple[Path, int]] = []
    uid = os.geteuid()
    try:
        with os.scandir(root) as entries:
            names = sorted(e.name for e in entries if _MARKED.fullmatch(e.name))
    except FileNotFoundError:
        return []
    for name in names:
        match = _MARKED.fullmatch(name)
        assert match is not None
        pid, start = int(match["pid"]), match["start"]
        if int(match["ns"]) != namespace or pid == 0:
            continue
        try:
            info = os.lstat(root / name)
            alive = _start_time(pid) == start
        except OSError:
            continue  # gone meanwhile, or /proc cannot say: left alone
        if not alive and stat.S_ISDIR(info.st_mode) and info.st_uid == uid:
            found.append((root / name, pid))
    return found


def _removed(path: Path, owner: int) -> Leftover | None:
    """Claim ``path`` (rename it to a name marked with this process: if this process dies
    while removing it, a later sweep finishes) and remove it; None when another sweeper
    claimed it first."""
    mark = owner_mark()
    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(8))
    claimed = path.with_name(f"{_CLAIM_PREFIX}{mark or ''}-{suffix}")
    try:
        os.rename(path, claimed)
    except FileNotFoundError:
        return None
    except OSError as err:
        return Leftover(path, owner, str(err))
    try:
        remove_tree(claimed)
    except OSError as err:
        return Leftover(path, owner, f"{err} (what is left of it: {claimed})")
    return Leftover(path, owner)
