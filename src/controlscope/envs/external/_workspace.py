"""What users' own tasks share with the filesystem environment: workspaces hashed with their
task-relevant modification times, clock readings masked in observations."""

from __future__ import annotations

from pathlib import Path

from controlscope.core import Task, TaskError
from controlscope.envs.filesystem.server import normalise_observation
from controlscope.envs.filesystem.workspace import content_hash, file_hashes

__all__ = ["WorkspaceTasks", "empty_workspace"]


def empty_workspace(workspace: Path) -> Path:
    """``workspace`` resolved, when it is an existing, empty directory.

    Raises:
        TaskError: it is missing, not a directory, not empty or unreadable.
    """
    root = Path(workspace)
    try:
        if not root.is_dir():
            raise TaskError(f"workspace {root} is not a directory")
        if any(root.iterdir()):
            raise TaskError(f"workspace {root} is not empty")
    except OSError as error:
        raise TaskError(f"workspace {root} cannot be read: {error}") from error
    return root.resolve()


class WorkspaceTasks:
    """The hashing and masking rules of users' own tasks (a base class of their environments).

    A workspace is hashed as the filesystem environment hashes a time-sensitive task's
    (:func:`~controlscope.envs.filesystem.workspace.content_hash`): names, bytes, and the
    modification times older than a day before the run started, the state's own (a copy keeps
    them), never those of files a run wrote. A replay hashes from its recording's start, so a
    task folder written the day a run was recorded hashes the same when it is replayed later.
    Observations are masked as the filesystem server's (its clock readings), which changes
    nothing in other servers' text.
    """

    def state_hash(self, task: Task, workspace: Path, *, since: float | None = None) -> str:
        """Hash of the workspace (paper 3.3, A.4); ``since``: when the run started (None: now).

        Raises:
            TaskError: an unreadable workspace.
        """
        del task
        return content_hash(Path(workspace), historical_mtimes=True, now=since)

    def file_hashes(
        self, task: Task, workspace: Path, *, since: float | None = None
    ) -> dict[str, str]:
        """Each file's hash by relative path, by the rule of :meth:`state_hash`.

        Raises:
            TaskError: an unreadable workspace.
        """
        del task
        return file_hashes(Path(workspace), historical_mtimes=True, now=since)

    def normalise_observation(self, text: str, *, since: float | None = None) -> str:
        """``text`` with the clock readings no seed controls masked (see
        :func:`~controlscope.envs.filesystem.server.normalise_observation`)."""
        return normalise_observation(text, since=since)
