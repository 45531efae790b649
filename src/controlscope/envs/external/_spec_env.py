"""Any MCP server's tasks, from a task spec file (:mod:`controlscope.envs.external._spec`).

An environment ``taskspec:FILE``. A run makes its initial state (a directory copied, or a
set-up command run confined in the workspace), starts the spec's server confined as the
filesystem server is (bubblewrap, the workspace at ``/workspace``, no network unless the spec
asks for it and the user grants it), and grades the final workspace with the spec's verifier
command, run on a read-only copy in the sandbox (:mod:`controlscope.envs.external._verify`).
Every command is looked up when a task is asked for, so a missing one is refused before a run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from controlscope._bwrap import base_interpreter
from controlscope.core import (
    AnswerKey,
    Check,
    PlannerFormat,
    Task,
    TaskError,
    ToolServerError,
    Verdict,
    absolute_path,
)
from controlscope.envs._base import Environment
from controlscope.envs._confine import (
    CommandLimits,
    executable_paths,
    run_confined,
    start_confined_server,
    which,
)
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.external._files import (
    broad_folder,
    check_state,
    copy_tree,
    file_digest,
    small_text,
)
from controlscope.envs.external._spec import CommandSpec, StateSpec, TaskEntry, load_task_spec
from controlscope.envs.external._verify import confined_verdict, outcome_check
from controlscope.envs.external._workspace import WorkspaceTasks, empty_workspace

__all__ = ["SpecEnvironment"]


class SpecEnvironment(WorkspaceTasks, Environment):
    """The tasks of a task spec file (an :class:`~controlscope.envs.Environment` that may be
    granted the network, :meth:`with_network`).

    Attributes:
        name: ``taskspec:`` and the resolved file (the name a replay builds it again from).
        path: the spec file.
        spec: the spec as read.
        read_tools: the spec's information-returning tools.
        write_tools: the spec's writing tools.
        network_granted: whether its server may reach the network (when the spec asks).
    """

    def __init__(self, path: str | Path, *, network_granted: bool = False) -> None:
        """Read the spec.

        Raises:
            TaskError: no such file, a spec that is not valid (one line naming the key), or
                one whose folder (shown to its server and commands) holds far more than a
                task (the home folder, ``/``, a shared temporary folder).
        """
        file = Path(path).expanduser()
        if not os.path.lexists(file):  # anything else there is read, or refused by the reader
            raise TaskError(f"no task spec file {file}")
        self.path = absolute_path(file)
        broad = broad_folder(self.path.parent)
        if broad is not None:
            raise TaskError(
                f"task spec {self.path}: its folder, {broad}, is shown to its server and "
                "commands; put the spec in a folder of its own"
            )
        self.spec = load_task_spec(self.path)
        self.name = f"taskspec:{self.path}"
        self.read_tools = frozenset(self.spec.tools.read)
        self.write_tools = frozenset(self.spec.tools.write)
        self.network_granted = network_granted
        self._entries = {t.id: t for t in self.spec.tasks}

    def with_network(self) -> SpecEnvironment:
        """The same tasks with the network granted to a server that asks for it.

        Raises:
            TaskError: the spec's server does not ask for it (``server.network`` is false).
        """
        if not self.spec.server.network:
            super().with_network()  # refused, as any environment's
        return SpecEnvironment(self.path, network_granted=True)

    # -- placeholders, paths, commands -------------------------------------------------------

    def _expand(self, text: str) -> str:
        folder, python = str(self.path.parent), str(base_interpreter())
        return text.replace("{spec_dir}", folder).replace("{python}", python)

    def _path(self, text: str, what: str) -> Path:
        """A path of the spec (relative: to its folder), which must exist; symlinks are kept
        (a confined process sees the path as the spec names it)."""
        path = Path(self._expand(text)).expanduser()
        path = Path(os.path.abspath(path if path.is_absolute() else self.path.parent / path))
        if not path.exists():
            raise TaskError(f"task spec {self.path}: {what} {text!r} does not exist ({path})")
        return path

    def _state_directory(self, text: str) -> Path:
        """The spec's state directory, checked as MCPMark's states are (not a folder far
        broader than a state, no special files, a bounded size).

        Raises:
            TaskError: it is missing or refused.
        """
        return check_state(self._path(text, "the state directory"), "the state directory")

    def _command(self, argv: list[str], what: str) -> list[str]:
        """``argv`` expanded, its executable an absolute path.

        Raises:
            TaskError: the executable is not found.
        """
        expanded = [self._expand(a) for a in argv]
        found = which(expanded[0], base=self.path.parent)
        if found is None:
            raise TaskError(
                f"task spec {self.path}: the {what} command {argv[0]!r} is not an executable "
                "file (not on PATH, or no such file)"
            )
        return [found, *expanded[1:]]

    def _readable(self, executable: str, paths: list[str], what: str) -> list[Path]:
        """What a process of the spec reads: its executable's prefix, the spec's folder and the
        paths the spec names for it."""
        named = [self._path(p, f"a path of the {what}") for p in paths]
        for path in named:
            broad = broad_folder(path) if path.is_dir() else None
            if broad is not None:
                raise TaskError(
                    f"task spec {self.path}: a path of the {what}, {path}, {broad}, is more "
                    "than a task needs: name the folders its command reads"
                )
        return [*executable_paths(executable), self.path.parent, *named]

    def _entry(self, task_id: str) -> TaskEntry:
        entry = self._entries.get(task_id)
        if entry is None:
            known = ", ".join(sorted(self._entries))
            raise TaskError(f"task spec {self.path} has no task {task_id!r}; its tasks: {known}")
        return entry

    def _verifier(self, entry: TaskEntry) -> CommandSpec:
        verifier = entry.verifier or self.spec.verifier
        assert verifier is not None  # the spec's check
        return verifier

    def _state(self, entry: TaskEntry) -> StateSpec:
        return entry.state or self.spec.state

    # -- tasks ---------------------------------------------------------------------------------

    def tasks(self) -> list[Task]:
        """Every task of the spec, sorted by id."""
        return [self._task(self._entries[i]) for i in sorted(self._entries)]

    def task(self, task_id: str, **params: Any) -> Task:
        """One task, every command and path it needs looked up.

        Raises:
            TaskError: an unknown id, any parameter (spec tasks take none), a command or path
                that does not exist, or a server that asks for the network without the user's
                grant.
        """
        if params:
            raise TaskError(f"task spec tasks take no parameters, got {sorted(params)}")
        entry = self._entry(task_id)
        server = self.spec.server
        self._readable(self._command([server.command], "server")[0], server.paths, "server")
        verifier = self._verifier(entry)
        self._readable(self._command(verifier.command, "verifier")[0], verifier.paths, "verifier")
        state = self._state(entry)
        if state.directory is not None:
            self._state_directory(state.directory)
        if state.command is not None:
            self._readable(self._command(state.command, "set-up")[0], state.paths, "set-up")
        if server.network and not self.network_granted:
            raise TaskError(
                f"task spec {self.path}: its server asks for the network (server.network); "
                "grant it with --allow-network (RunSpec allow_network=True)"
            )
        return self._task(entry)

    def _task(self, entry: TaskEntry) -> Task:
        return Task(
            id=entry.id,
            env=self.name,
            category=entry.category,
            instruction=self._instruction(entry),
            python_allowed=entry.python_allowed,
            template=entry.id,
            metadata={
                "network": self.spec.server.network and self.network_granted,
                "data_hashes": self._data_hashes(entry),
            },
        )

    def _instruction(self, entry: TaskEntry) -> str:
        if entry.instruction is not None:
            return entry.instruction.strip()
        path = self._path(str(entry.instruction_file), "the instruction file")
        try:
            text = small_text(path).strip()
        except TaskError as err:
            raise TaskError(f"task spec {self.path}: {err}") from None
        if not text:
            raise TaskError(f"task spec {self.path}: the instruction file {path} is empty")
        return text

    def _data_hashes(self, entry: TaskEntry) -> dict[str, str]:
        """SHA-256 of the spec file, of every command it names as a path (``./verify.sh``; not
        one found on ``PATH``, nor ``{python}``) and of every file its commands' arguments
        name (absolute paths of files, ``{python}`` left out), by path: a replay sees that the
        task changed (paper A.4)."""
        commands = [[self.spec.server.command, *self.spec.server.args]]
        commands += [self._verifier(entry).command, self._state(entry).command or []]
        named = {self.path}
        for command in filter(None, commands):
            if os.sep in command[0] and command[0] != "{python}":
                found = which(self._expand(command[0]), base=self.path.parent)
                named.update([Path(found).resolve()] if found is not None else [])
            for arg in (a for a in command[1:] if a != "{python}"):
                path = Path(self._expand(arg))
                if path.is_absolute() and path.is_file():
                    named.add(path.resolve())
        if entry.instruction_file is not None:
            named.add(self._path(entry.instruction_file, "the instruction file"))
        return {str(path): file_digest(path) for path in sorted(named)}

    # -- a run ---------------------------------------------------------------------------------

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        """Make the initial state in ``workspace`` (existing and empty): the state directory
        copied, the set-up command run there (confined, writable), or nothing. ``seed``
        changes nothing.

        Returns:
            An empty answer key: the verifier knows what it checks.

        Raises:
            TaskError: an unknown task, a workspace that is not empty, a copy that failed, or a
                set-up command that did not exit 0 (its output in the message).
        """
        del seed
        root = empty_workspace(workspace)
        state = self._state(self._entry(task.id))
        if state.directory is not None:
            copy_tree(self._state_directory(state.directory), root)
        elif state.command is not None:
            command = self._command(state.command, "set-up")
            limits = CommandLimits(timeout_s=state.timeout_s, memory_mb=state.memory_mb)
            outcome = run_confined(
                command,
                workspace=root,
                writable=True,
                limits=limits,
                ro_paths=self._readable(command[0], state.paths, "set-up"),
                env={k: self._expand(v) for k, v in state.env.items()},
            )
            if not outcome.ok:
                check = outcome_check("set-up", outcome, limits)
                raise TaskError(f"the set-up command of {task.id} failed: {check.reason}")
        return {}

    def start_server(self, workspace: Path) -> McpToolServer:
        """Start the spec's server confined to ``workspace``; check that it has the tools the
        spec names.

        Raises:
            TaskError: its command is missing.
            ToolServerError: it did not start, or lacks a tool the spec names.
        """
        server = self.spec.server
        command = self._command([server.command, *server.args], "server")
        started = start_confined_server(
            command[0],
            command[1:],
            Path(workspace),
            ro_paths=self._readable(command[0], server.paths, "server"),
            env={k: self._expand(v) for k, v in server.env.items()},
            network=server.network and self.network_granted,
            timeout_s=server.timeout_s,
        )
        missing = sorted((self.read_tools | self.write_tools) - {t.name for t in _tools(started)})
        if missing:
            started.close()
            raise ToolServerError(
                f"task spec {self.path} names tools its server does not have: {missing}"
            )
        return started

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        """Run the task's verifier on a read-only copy of ``workspace`` in the sandbox, with
        ``CONTROLSCOPE_WORKSPACE`` and ``FILESYSTEM_TEST_DIR`` naming the copy; never raises.

        Returns:
            One check, ``verifier``: passed iff it exited 0, its output as the reason.
        """
        del answer_key
        try:
            verifier = self._verifier(self._entry(task.id))
            command = self._command(verifier.command, "verifier")
            ro_paths = self._readable(command[0], verifier.paths, "verifier")
        except TaskError as err:
            check = Check(name="verifier", passed=False, reason=str(err))
            return Verdict(task_id=task.id, checks=[check])
        limits = CommandLimits(
            timeout_s=verifier.timeout_s,
            memory_mb=verifier.memory_mb,
            output_mb=verifier.output_mb,
        )
        env = {"CONTROLSCOPE_WORKSPACE": "{workspace}", "FILESYSTEM_TEST_DIR": "{workspace}"}
        env.update({k: self._expand(v) for k, v in verifier.env.items()})
        return confined_verdict(
            task.id, "verifier", command, workspace, limits=limits, ro_paths=ro_paths, env=env
        )

    def planner_example(self, fmt: PlannerFormat) -> str:
        """The spec's worked example (``[planner] example``; empty for none)."""
        del fmt
        return self.spec.planner.example

    def planner_note(self) -> str | None:
        """The spec's note on how the tools reach the environment (``[planner] note``); None:
        the planner's prompt speaks of files in the allowed directory."""
        return self.spec.planner.note

    def error_hint(self, error: str) -> str | None:
        """None: a spec has no hints."""
        del error
        return None


def _tools(server: McpToolServer) -> list[Any]:
    """The server's tools (the list is kept: the run asks again)."""
    try:
        return list(server.list_tools())
    except ToolServerError:
        server.close()
        raise
