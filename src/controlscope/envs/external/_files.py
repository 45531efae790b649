"""Files of users' own tasks: their hashes, trees checked (no special files, a bounded size)
and copied (an initial state into a workspace, a final workspace for its verifier)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controlscope._leftovers import make_dir
from controlscope._tree import remove_tree, walk_tree
from controlscope.core import InputFileError, TaskError, open_regular, read_text
from controlscope.envs.filesystem.workspace import file_hashes

__all__ = [
    "COPY_TIMEOUT_S",
    "MAX_FOLDER_BYTES",
    "MAX_FOLDER_ENTRIES",
    "MAX_STATE_BYTES",
    "MAX_STATE_ENTRIES",
    "MAX_TEXT_BYTES",
    "broad_folder",
    "check_state",
    "check_tree",
    "copy_tree",
    "file_digest",
    "file_hashes_of",
    "scratch_copy",
    "small_text",
]

COPY_TIMEOUT_S = 600.0
"""Seconds a copy of a tree may take."""

MAX_STATE_ENTRIES = 100_000
MAX_STATE_BYTES = 4 << 30
"""The most entries (files, folders, links) and bytes an initial state may hold: far more than
any MCPMark state, far less than a home folder or ``/`` named by mistake (copied whole)."""

MAX_FOLDER_ENTRIES = 1_000
MAX_FOLDER_BYTES = 64 << 20
"""The most entries and bytes a task folder may hold (MCPMark's hold three small files; all of
them are hashed at every listing and replay)."""

MAX_TEXT_BYTES = 1 << 20
"""The longest instruction or task metadata file read (1 MiB: far more than any task's)."""

#: Files a task's data hashes leave out: what running its verifier by hand leaves behind.
_IGNORED = ("__pycache__/", ".pytest_cache/")


def file_hashes_of(folder: Path) -> dict[str, str]:
    """SHA-256 of each file below ``folder`` (symlinks by target, never followed), by relative
    path: a task's data as recorded in ``run_start`` (its metadata's ``data_hashes``), so a
    replay sees that the task changed (paper A.4).

    Raises:
        TaskError: ``folder`` cannot be read.
    """
    hashes = file_hashes(folder)
    return {k: v for k, v in hashes.items() if not any(p in f"/{k}" for p in _IGNORED)}


def broad_folder(folder: Path) -> str | None:
    """What ``folder`` is when it holds far more than a task's files (``/``, the home folder or
    a folder above it, a temporary folder shared by every process), else None. Such a folder
    must not be shown whole to a third-party process: it would see ``~/.ssh``, or other runs'
    workspaces.
    """
    real = Path(folder).resolve()
    shared = {Path(p).resolve() for p in ("/tmp", "/var/tmp", "/dev/shm", tempfile.gettempdir())}
    if real == Path("/"):
        return "the root folder"
    if Path.home().resolve().is_relative_to(real):
        return "the home folder" if real == Path.home().resolve() else "a folder above home"
    if real in shared:
        return "a temporary folder every process shares"
    return None


def check_tree(root: Path, what: str, *, max_entries: int, max_bytes: int) -> None:
    """Refuse a tree no task has: one holding a FIFO, socket or device (a read of a FIFO hangs;
    a device node copied by root is a host device in a workspace), or more than
    ``max_entries`` entries or ``max_bytes`` bytes of files (stops at the first excess, so
    ``/`` named by mistake is refused at once). Links are not followed.

    Args:
        root: the directory.
        what: what it is, for the message (``the initial state``).
        max_entries: the most files, folders and links.
        max_bytes: the most bytes of its files (their sizes).

    Raises:
        TaskError: it holds a special file, is too large, or cannot be read.
    """
    entries = size = 0
    try:
        for entry in walk_tree(root):
            entries += 1
            size += entry.stat.st_size if entry.kind == "F" else 0
            if entry.kind == "O":
                raise TaskError(
                    f"{what} {root} holds {entry.rel!r}, a FIFO, socket or device: a task's "
                    "files are files, folders and links"
                )
            if entries > max_entries or size > max_bytes:
                raise TaskError(
                    f"{what} {root} holds more than {max_entries} entries or "
                    f"{max_bytes >> 20} MiB: is it the right folder?"
                )
    except OSError as err:
        raise TaskError(f"{what} {root} cannot be read: {err}") from None


def small_text(path: Path) -> str:
    """A task's text file (an instruction, ``meta.json``), a regular file of at most
    :data:`MAX_TEXT_BYTES` (:func:`controlscope.core.read_text`: a FIFO or a device is refused,
    never waited on or read).

    Raises:
        TaskError: it cannot be read, is not a regular file, is not UTF-8 or is longer.
    """
    try:
        return read_text(path, MAX_TEXT_BYTES)
    except InputFileError as err:
        raise TaskError(str(err)) from None


def check_state(path: Path, what: str) -> Path:
    """An initial state's directory, refused when it is a folder far broader than a task's
    (:func:`broad_folder`: copied whole, ``~/.ssh`` would land in a workspace agent code
    reads and a model provider is sent), holds a special file, or is too large
    (:func:`check_tree` with :data:`MAX_STATE_ENTRIES`, :data:`MAX_STATE_BYTES`).

    Returns:
        ``path``.

    Raises:
        TaskError: it is refused.
    """
    broad = broad_folder(path)
    if broad is not None:
        raise TaskError(f"{what} {path} is {broad}, not a task's state")
    check_tree(path, what, max_entries=MAX_STATE_ENTRIES, max_bytes=MAX_STATE_BYTES)
    return path


def file_digest(path: Path) -> str:
    """SHA-256 of one regular file's bytes (hex); a FIFO or a device is refused, never read.

    Raises:
        TaskError: it cannot be read or is not a regular file.
    """
    try:
        with open_regular(path) as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as err:
        raise TaskError(f"cannot read {path}: {err}") from None
    except InputFileError as err:
        raise TaskError(str(err)) from None


def copy_tree(source: Path, target: Path, *, timeout_s: float = COPY_TIMEOUT_S) -> None:
    """Copy everything in ``source`` into the existing directory ``target``: files with their
    modes and modification times (tasks that read dates need them), symlinks as symlinks,
    special files as such (never opened). ``cp -a`` walks trees of any depth without recursion.

    Raises:
        TaskError: the copy failed or took longer than ``timeout_s``.
    """
    cp = shutil.which("cp")
    if cp is None:
        raise TaskError("`cp` is not on PATH; it copies task states")
    try:
        done = subprocess.run(
            [cp, "-a", "--", f"{source}/.", str(target)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TaskError(f"cannot copy {source} to {target}: {err}") from None
    if done.returncode != 0:
        raise TaskError(f"cannot copy {source} to {target}: {done.stderr.strip()[-500:]}")


@contextmanager
def scratch_copy(workspace: Path) -> Iterator[Path]:
    """A copy of ``workspace`` in a new temporary directory, removed afterwards whatever it
    holds.

    Raises:
        TaskError: the copy failed.
    """
    copy = make_dir("cs-verify-")
    try:
        copy_tree(workspace, copy)
        yield copy
    finally:
        remove_tree(copy)
