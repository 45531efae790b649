"""Files of users' own tasks: their hashes, and trees copied (an initial state into a workspace,
a final workspace for its verifier)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controlscope._tree import remove_tree
from controlscope.core import TaskError
from controlscope.envs.filesystem.workspace import file_hashes

__all__ = ["COPY_TIMEOUT_S", "copy_tree", "file_digest", "file_hashes_of", "scratch_copy"]

COPY_TIMEOUT_S = 600.0
"""Seconds a copy of a tree may take."""

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


def file_digest(path: Path) -> str:
    """SHA-256 of one file's bytes (hex).

    Raises:
        TaskError: it cannot be read.
    """
    try:
        with Path(path).open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as err:
        raise TaskError(f"cannot read {path}: {err}") from None


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
    copy = Path(tempfile.mkdtemp(prefix="cs-verify-"))
    try:
        copy_tree(workspace, copy)
        yield copy
    finally:
        remove_tree(copy)
