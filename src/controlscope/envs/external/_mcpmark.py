"""MCPMark's own filesystem tasks, run with their native verifiers (paper section 4).

An environment ``mcpmark:PATH`` is a task folder or any folder above task folders (an MCPMark
checkout). A run copies the task's initial state into its workspace, serves it with the pinned
npm filesystem server (the built-in filesystem environment's), gives the planner
``description.md``, and grades the final workspace with the folder's ``verify.py``: run on a
read-only copy in the sandbox (:mod:`controlscope.envs.external._verify`), with
``FILESYSTEM_TEST_DIR`` naming it; exit status 0 is success and the output is the check's reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controlscope._bwrap import base_interpreter
from controlscope.core import AnswerKey, Check, PlannerFormat, Task, TaskError, Verdict
from controlscope.envs._base import Environment
from controlscope.envs._confine import CommandLimits, executable_paths
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.external._files import broad_folder, check_state, copy_tree
from controlscope.envs.external._folders import (
    STATES_DIR,
    McpmarkFolder,
    default_state,
    find_folders,
    is_task_folder,
    read_folder,
)
from controlscope.envs.external._verify import VERIFY_LIMITS, confined_verdict
from controlscope.envs.external._workspace import WorkspaceTasks, empty_workspace
from controlscope.envs.filesystem import _planning
from controlscope.envs.filesystem.server import start_filesystem_server

__all__ = ["McpmarkEnvironment"]


class McpmarkEnvironment(WorkspaceTasks, Environment):
    """MCPMark's filesystem task folders (an :class:`~controlscope.envs.Environment`).

    A task's one parameter is ``state``: the directory of its initial state (default: the
    state it names, in ``test_environments/`` of the nearest folder above that has one).

    Attributes:
        name: ``mcpmark:`` and the resolved path (the name a replay builds it again from).
        root: the folder the tasks were found in.
        problems: one line per folder that looks like a task but cannot be read.
        read_tools: the filesystem server's information-returning tools.
        write_tools: the filesystem server's writing tools.
        verify_limits: the verifiers' time, memory and output limits.
        state_in_workspace: the whole state is the workspace directory (the pinned filesystem
            server, as the built-in environment's, keeps none of its own; ``verify.py`` reads
            the workspace alone), so a trajectory can be forked at a boundary with a copy of
            it and a new server (``controlscope.run.ForkPoint``).
        cluster_by: ``category``: a panel's bootstrap resamples the task categories, as the
            built-in filesystem tasks' (paper section 4).
    """

    read_tools = _planning.READ_TOOLS
    write_tools = _planning.WRITE_TOOLS
    state_in_workspace = True
    cluster_by = "category"

    def __init__(self, path: str | Path, *, verify_limits: CommandLimits = VERIFY_LIMITS) -> None:
        """Find the tasks.

        Args:
            path: a task folder (its task's id is ``category/task_id``), or a folder above
                task folders (ids are their paths below it, ``tasks/filesystem/`` left out).
            verify_limits: the verifiers' limits.

        Raises:
            TaskError: no such folder; a folder far broader than a checkout (``/``, the home
                folder or one above it, a shared temporary folder: :func:`broad_folder`),
                refused before it is searched; a task folder without ``description.md`` or
                ``verify.py``, or with a bad ``meta.json``; no task folder below ``path``.
        """
        root = Path(path).expanduser()
        if not root.is_dir():
            raise TaskError(f"no folder {root} (give an MCPMark task folder or checkout)")
        broad = broad_folder(root)
        if broad is not None:  # searched, its every folder would be listed and hashed
            raise TaskError(
                f"{root.resolve()} is {broad}, not an MCPMark task folder or checkout; "
                "give the checkout (or a task folder)"
            )
        self.root = root.resolve()
        self.name = f"mcpmark:{self.root}"
        self.verify_limits = verify_limits
        self.problems: list[str] = []
        if is_task_folder(self.root):
            folder = read_folder(self.root)
            self._folders = {f"{folder.category}/{folder.task_id}": folder}
        else:
            self._folders, self.problems = find_folders(self.root)
            if not self._folders and not self.problems:
                raise TaskError(
                    f"no MCPMark task folder below {self.root} (a task folder holds "
                    "description.md, meta.json and verify.py)"
                )

    def folder(self, task_id: str) -> McpmarkFolder:
        """The folder of ``task_id``.

        Raises:
            TaskError: unknown id.
        """
        folder = self._folders.get(task_id)
        if folder is None:
            raise TaskError(
                f"no MCPMark task {task_id!r} in {self.root} "
                f"(`controlscope tasks --mcpmark {self.root}` lists its {len(self._folders)})"
            )
        return folder

    def tasks(self) -> list[Task]:
        """Every task found, sorted by id; ``metadata`` says whether its state was found."""
        return [self._task(i, self._folders[i], {}) for i in sorted(self._folders)]

    def task(self, task_id: str, **params: Any) -> Task:
        """One task; ``state=DIR`` sets its initial state's directory.

        Raises:
            TaskError: unknown id, another parameter, or no initial state (none found where
                MCPMark keeps it, or ``state`` is not a directory).
        """
        unknown = sorted(set(params) - {"state"})
        if unknown:
            raise TaskError(f"MCPMark tasks take one parameter, state=DIR, not {unknown}")
        folder = self.folder(task_id)
        task = self._task(task_id, folder, params)
        self.state_dir(task)  # refused now, before anything runs
        return task

    def _task(self, task_id: str, folder: McpmarkFolder, params: dict[str, Any]) -> Task:
        given = {"state": str(_directory(params["state"]))} if "state" in params else {}
        found = Path(given["state"]) if given else default_state(folder.path, folder.state)
        return Task(
            id=task_id,
            env=self.name,
            category=folder.category,
            instruction=folder.instruction,
            template=task_id,
            params=given,
            metadata={
                "difficulty": folder.difficulty,
                "state": folder.state,
                "state_found": found is not None and found.is_dir(),
                "state_dir": "" if found is None else str(found),
                "folder": str(folder.path),
                "data_hashes": folder.data_hashes,
            },
        )

    def state_dir(self, task: Task) -> Path:
        """The directory of ``task``'s initial state.

        Raises:
            TaskError: it is missing, a folder far broader than a state (the home folder...),
                holds a special file or is too large
                (:func:`~controlscope.envs.external._files.check_state`).
        """
        folder = self.folder(task.id)
        if "state" in task.params:
            found: Path | None = _directory(task.params["state"])
        else:
            found = default_state(folder.path, folder.state)
        if found is None:
            raise TaskError(
                f"task {task.id} needs the initial state {folder.state!r}, which is not in "
                f"{STATES_DIR}/ above {folder.path}: unpack MCPMark's {folder.state}.zip there, "
                "or give its directory (--state DIR, or the task parameter state)"
            )
        return check_state(found, "the initial state")

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        """Copy the task's initial state into ``workspace`` (existing and empty), modification
        times kept; ``seed`` changes nothing (MCPMark's states are fixed).

        Returns:
            An empty answer key: ``verify.py`` knows what it checks.

        Raises:
            TaskError: unknown task, a missing state, a workspace that is not empty, or the copy
                failed.
        """
        del seed
        source = self.state_dir(task)
        copy_tree(source, empty_workspace(workspace))
        return {}

    def start_server(self, workspace: Path) -> McpToolServer:
        """Start the pinned npm filesystem server confined to ``workspace`` (as the built-in
        filesystem environment does).

        Raises:
            TaskError: Node.js or the server is missing.
            ToolServerError: the server did not start.
        """
        return start_filesystem_server(Path(workspace))

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        """Run the task's ``verify.py`` on a read-only copy of ``workspace`` in the sandbox, with
        the interpreter the worker runs and ``FILESYSTEM_TEST_DIR`` naming the copy; never
        raises.

        Returns:
            One check, ``verify.py``: passed iff it exited 0, its output as the reason.
        """
        del answer_key
        folder = self._folders.get(task.id)
        if folder is None:
            why = f"no MCPMark task {task.id!r} in {self.root}"
            return Verdict(
                task_id=task.id, checks=[Check(name="verify.py", passed=False, reason=why)]
            )
        python = str(base_interpreter())
        return confined_verdict(
            task.id,
            "verify.py",
            [python, "-s", str(folder.path / "verify.py")],
            workspace,
            limits=self.verify_limits,
            ro_paths=[*executable_paths(python), folder.path],
            env={"FILESYSTEM_TEST_DIR": "{workspace}"},
        )

    def planner_example(self, fmt: PlannerFormat) -> str:
        """The filesystem environment's worked example, written for ``fmt``."""
        return _planning.planner_example(fmt)

    def planner_note(self) -> str | None:
        """None: the planner's prompt speaks of files and the allowed directory."""
        return None

    def error_hint(self, error: str) -> str | None:
        """The filesystem environment's hint for code that looked for the files locally."""
        return _planning.error_hint(error)


def _directory(value: object) -> Path:
    """``value`` as the resolved path of an existing directory.

    Raises:
        TaskError: it is not a path of an existing directory.
    """
    if not isinstance(value, str | Path) or not str(value).strip():
        raise TaskError(f"state must name a directory, got {value!r}")
    path = Path(value).expanduser()
    if not path.is_dir():
        raise TaskError(f"the initial state {path} is not a directory")
    return path.resolve()
