"""Directory trees that agent code shaped: removed and walked without recursion or long paths.

Agent code decides what a workspace (or the worker's ``/tmp`` without bubblewrap) holds, and
one tool call can make a chain of directories thousands of levels deep. Python's recursive
``shutil.rmtree`` and ``os.walk`` then hit the interpreter's recursion limit, and the full paths
exceed the kernel's ``PATH_MAX``. Both helpers here work on directory file descriptors and names
only, iteratively:

- :func:`remove_tree` first moves every subdirectory up to the top directory (a rename within one
  file system), so nothing is ever deeper than one level, then empties and removes each;
- :func:`walk_tree` keeps one open descriptor per level of the current path and stops descending
  at a depth bound, which it reports;
- :func:`copy_tree` copies one with GNU ``cp`` (which walks it with descriptors too), sharing
  the files' blocks (reflinks) where the file system can; :func:`refill_tree` puts a copy's
  contents back in a directory that must stay (a mount point).

This module imports nothing from controlscope: the worker, the environments and the run use it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "MAX_WALK_DEPTH",
    "Entry",
    "copy_tree",
    "refill_tree",
    "remove_tree",
    "walk_tree",
]

MAX_WALK_DEPTH = 256
"""Levels below the root that :func:`walk_tree` descends (far more than any task needs, and
fewer open descriptors than the usual limit of 1,024)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


#: Seconds :func:`copy_tree` waits for ``cp``.
COPY_TIMEOUT_S = 120.0


def copy_tree(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Copy the directory ``src`` to ``dst`` (which must not exist): modes, times and links as
    they are (never followed), each file's blocks shared with the original where the file
    system has reflinks (btrfs, XFS...), else copied.

    Raises:
        FileExistsError: ``dst`` exists.
        OSError: ``cp`` is missing, failed (its message), or took longer than
            :data:`COPY_TIMEOUT_S`.
    """
    if os.path.lexists(dst):
        raise FileExistsError(f"{dst} exists")
    _cp(src, dst)


def _cp(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """``cp -a`` ``src`` to ``dst`` (into it, when it is a directory that exists)."""
    cp = shutil.which("cp")
    if cp is None:
        raise OSError("cp is not installed")
    command = [cp, "-a", "--reflink=auto", "--no-target-directory", "--", src, dst]
    try:
        done = subprocess.run(command, capture_output=True, timeout=COPY_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise OSError(f"copying {src} took longer than {COPY_TIMEOUT_S:g} s") from exc
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()[-500:]
        raise OSError(f"cannot copy {src} to {dst}: {detail!r}")


def refill_tree(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Make the existing directory ``dst`` hold what ``src`` holds, as :func:`copy_tree`
    copies it; ``dst`` itself stays (it may be a mount point, such as a sandbox's ``/tmp``).

    Raises:
        OSError: an entry of ``dst`` cannot be removed, or the copy failed.
    """
    top = os.open(dst, _DIR_FLAGS)
    try:
        with os.scandir(top) as entries:
            found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for name, is_dir in found:
            if is_dir:
                remove_tree(os.path.join(dst, name))
            else:
                os.unlink(name, dir_fd=top)
    finally:
        os.close(top)
    _cp(src, dst)


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Delete the directory ``path`` and everything in it, however deep; never follows links.

    Subdirectories are renamed into ``path`` itself (flat, with fresh names) before they are
    emptied, so the work needs no recursion and no path longer than two names. Permissions that
    block the removal are widened first. A missing ``path`` is fine.

    Args:
        path: the directory to remove.

    Raises:
        OSError: something in it cannot be removed (the rest is removed as far as possible).
    """
    try:
        top = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return
    pending = ["."]
    count = 0
    try:
        with contextlib.suppress(OSError):
            os.fchmod(top, 0o700)
        while pending:
            name = pending.pop()
            count = _empty_dir(top, name, pending, count)
            if name != ".":
                os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(path)


def _empty_dir(top: int, name: str, pending: list[str], count: int) -> int:
    """Remove the files and links of ``top/name``; move its subdirectories up into ``top`` (their
    new names are appended to ``pending``). Returns the running count of moved directories."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=top)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o700)
        with os.scandir(fd) as entries:
            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for child, is_dir in children:
            if not is_dir:
                os.unlink(child, dir_fd=fd)
                continue
            count += 1
            flat = f".cs-rm-{count}"
            while _exists(top, flat):
                count += 1
                flat = f".cs-rm-{count}"
            os.rename(child, flat, src_dir_fd=fd, dst_dir_fd=top)
            pending.append(flat)
    finally:
        os.close(fd)
    return count


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


@dataclass(frozen=True)
class Entry:
    """One entry of a walked tree.

    Attributes:
        rel: its path relative to the root, ``/``-separated (bytes that are not UTF-8 kept as
            surrogate escapes, as ``os`` gives them).
        kind: ``"D"`` directory, ``"F"`` regular file, ``"L"`` symbolic link, ``"O"`` anything
            else (FIFO, socket, device), ``"X"`` a directory below the depth bound (not
            descended).
        stat: its ``lstat`` result.
        dir_fd: a descriptor of its parent directory, valid only until the walk goes on (for
            reading it by name: ``os.open(name, ..., dir_fd=entry.dir_fd)``).
        name: its own name.
    """

    rel: str
    kind: str
    stat: os.stat_result
    dir_fd: int
    name: str


def walk_tree(root: str | os.PathLike[str], *, max_depth: int = MAX_WALK_DEPTH) -> Iterator[Entry]:
    """Every entry under ``root`` (not ``root`` itself), depth first, without following links.

    Args:
        root: the directory to walk.
        max_depth: directories this many levels below ``root`` are reported with kind ``"X"``
            and not descended into.

    Yields:
        One :class:`Entry` per entry, a directory before its contents, names in sorted order.

    Raises:
        OSError: ``root`` or a directory in it cannot be read.
    """
    stack: list[tuple[int, str, list[str]]] = []
    top = os.open(root, _DIR_FLAGS)
    try:
        stack.append((top, "", _names(top)))
        while stack:
            fd, prefix, names = stack[-1]
            if not names:
                stack.pop()
                if stack:
                    os.close(fd)
                continue
            name = names.pop()
            info = os.lstat(name, dir_fd=fd)
            rel = f"{prefix}{name}"
            kind = _kind(info.st_mode)
            if kind == "D" and len(stack) >= max_depth:
                kind = "X"
            yield Entry(rel=rel, kind=kind, stat=info, dir_fd=fd, name=name)
            if kind == "D":
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                stack.append((child, f"{rel}/", _names(child)))
    finally:
        for fd, _prefix, _names_left in stack[1:]:
            os.close(fd)
        os.close(top)


def _names(fd: int) -> list[str]:
    """The names in the directory ``fd``, in reverse sorted order (popped from the end)."""
    with os.scandir(fd) as entries:
        return sorted((e.name for e in entries), reverse=True)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "D"
    if stat.S_ISREG(mode):
        return "F"
    if stat.S_ISLNK(mode):
        return "L"
    return "O"
