"""The filesystem environment: MCPMark-style tasks on the real npm MCP filesystem server.

Paper section 4: tasks across categories, "the adapter gives generated Python code access to the
original filesystem APIs through a proxy", and "native file-target verifiers determine task
success". Tasks come from :data:`~controlscope.envs.filesystem.registry.REGISTRY`, filled by the
modules listed in :data:`~controlscope.envs.filesystem.tasks.TASK_MODULES`.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import random
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controlscope.core import AnswerKey, Check, PlannerFormat, Task, TaskError, Verdict
from controlscope.envs._base import Environment
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.filesystem import _planning
from controlscope.envs.filesystem.registry import REGISTRY, FsTaskSpec
from controlscope.envs.filesystem.server import normalise_observation, start_filesystem_server
from controlscope.envs.filesystem.tasks import TASK_MODULES
from controlscope.envs.filesystem.workspace import content_hash, file_hashes

__all__ = [
    "MAX_SEED",
    "FilesystemEnvironment",
    "check_seed",
    "fill_instruction",
    "load_tasks",
    "make_task",
    "prepare_workspace",
    "spec_rng",
]

MAX_SEED = 2**63 - 1
"""Largest accepted seed; seeds are integers in ``[0, MAX_SEED]``."""

_TASK_PACKAGE = "controlscope.envs.filesystem.tasks"


def load_tasks() -> dict[str, FsTaskSpec]:
    """Import every task module of :data:`TASK_MODULES` that exists and return the registry.

    Returns:
        :data:`REGISTRY` (task id -> spec).

    Raises:
        ImportError: a task module exists but fails to import (its own error, not hidden).
    """
    for name in TASK_MODULES:
        full = f"{_TASK_PACKAGE}.{name}"
        if importlib.util.find_spec(full) is not None:
            importlib.import_module(full)
    return REGISTRY


def fill_instruction(instruction: str, params: Mapping[str, Any]) -> str:
    """Replace ``{name}`` for each parameter; every other brace (JSON examples...) stays as is."""
    for name, value in params.items():
        instruction = instruction.replace("{" + name + "}", str(value))
    return instruction


def _check_params(spec: FsTaskSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(params) - set(spec.default_params))
    if unknown:
        known = ", ".join(sorted(spec.default_params)) or "none"
        raise TaskError(f"task {spec.id!r} has no parameter(s) {unknown}; its parameters: {known}")
    merged = {**spec.default_params, **params}
    try:
        if spec.check_params is not None:
            spec.check_params(merged)
    except TaskError:
        raise
    except (TypeError, ValueError) as error:
        raise TaskError(f"task {spec.id!r}: bad parameters {params}: {error}") from error
    return merged


def make_task(spec: FsTaskSpec, params: Mapping[str, Any] | None = None) -> Task:
    """Build the :class:`Task` of ``spec`` (registered or not) with validated parameters.

    Args:
        spec: the task spec.
        params: generator parameters overriding ``spec.default_params``.

    Returns:
        The task, its instruction filled with the parameters.

    Raises:
        TaskError: an unknown parameter name or a value its ``check_params`` rejects.
    """
    merged = _check_params(spec, dict(params or {}))
    return Task(
        id=spec.id,
        env=FilesystemEnvironment.name,
        category=spec.category,
        instruction=fill_instruction(spec.instruction, merged),
        python_allowed=spec.python_allowed,
        template=spec.template,
        params=merged,
    )


def check_seed(seed: object) -> int:
    """Return ``seed`` if it is an integer in ``[0, MAX_SEED]``.

    Raises:
        TaskError: any other value (bools, floats and strings included).
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TaskError(f"seed must be an integer, got {seed!r}")
    if not 0 <= seed <= MAX_SEED:
        raise TaskError(f"seed must be between 0 and {MAX_SEED}, got {seed}")
    return seed


def spec_rng(seed: int) -> random.Random:
    """The generator's random source for ``seed`` (the same for every task: ``Random(seed)``)."""
    return random.Random(check_seed(seed))


def prepare_workspace(workspace: Path) -> Path:
    """Return ``workspace`` resolved if it is an existing, empty directory.

    Raises:
        TaskError: it is missing, not a directory, not empty or unreadable.
    """
    root = Path(workspace)
    if not root.exists():
        raise TaskError(f"workspace {root} does not exist")
    if not root.is_dir():
        raise TaskError(f"workspace {root} is not a directory")
    try:
        if any(root.iterdir()):
            raise TaskError(f"workspace {root} is not empty")
    except OSError as error:
        raise TaskError(f"workspace {root} cannot be read: {error}") from error
    return root.resolve()


class FilesystemEnvironment(Environment):
    """The filesystem environment (an :class:`~controlscope.envs.Environment`).

    Attributes:
        name: ``filesystem``.
        read_tools: the server's information-returning tools.
        write_tools: the server's writing tools.
        state_in_workspace: the whole state is the workspace directory (the MCP filesystem
            server keeps none of its own), so a trajectory can be forked at a boundary with a
            copy of it and a new server (``controlscope.run.ForkPoint``).
        cluster_by: ``category``: a panel's bootstrap resamples the seven task categories
            (paper section 4).
    """

    name = "filesystem"
    read_tools = _planning.READ_TOOLS
    write_tools = _planning.WRITE_TOOLS
    state_in_workspace = True
    cluster_by = "category"

    def __init__(self) -> None:
        self._specs = load_tasks()

    def spec(self, task_id: str) -> FsTaskSpec:
        """The spec of ``task_id``.

        Raises:
            TaskError: unknown id; the message lists close matches.
        """
        spec = self._specs.get(task_id)
        if spec is None:
            close = difflib.get_close_matches(task_id, list(self._specs), n=4, cutoff=0.4)
            by_name = [t for t in self._specs if t.split("/")[-1] == task_id.split("/")[-1]]
            hints = sorted(set(close) | set(by_name))
            hint = f"; did you mean {', '.join(hints)}?" if hints else ""
            raise TaskError(
                f"unknown filesystem task {task_id!r}{hint} "
                f"(`controlscope tasks --env filesystem` lists all {len(self._specs)})"
            )
        return spec

    def tasks(self) -> list[Task]:
        """All tasks with default parameters, sorted by id."""
        return [make_task(self._specs[i]) for i in sorted(self._specs)]

    def task(self, task_id: str, **params: Any) -> Task:
        """One task with generator parameters (e.g. ``students=75``).

        Raises:
            TaskError: unknown id, unknown parameter, or a bad value; raised before anything runs.
        """
        return make_task(self.spec(task_id), params)

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        """Generate the task's initial state into ``workspace`` (existing and empty).

        The same task, parameters and seed give the same files, bytes and modification times.

        Returns:
            The answer key (JSON-serialisable).

        Raises:
            TaskError: bad seed, unknown task, bad parameters, a missing, non-empty or
                unwritable workspace.
        """
        spec = self.spec(task.id)
        params = _check_params(spec, task.params)
        rng = spec_rng(seed)
        root = prepare_workspace(workspace)
        try:
            return spec.generate(rng, root, params)
        except OSError as error:
            raise TaskError(
                f"cannot write the initial state of {task.id} in {root}: {error}"
            ) from error

    def start_server(self, workspace: Path) -> McpToolServer:
        """Start the npm MCP filesystem server confined to ``workspace``.

        Raises:
            TaskError: Node.js or the server is missing (run ``npm ci``), or no such directory.
            ToolServerError: the server did not start.
        """
        return start_filesystem_server(Path(workspace))

    def normalise_observation(self, text: str, *, since: float | None = None) -> str:
        """``text`` with the file times of ``get_file_info`` that no seed controls masked (see
        :func:`~controlscope.envs.filesystem.server.normalise_observation`)."""
        return normalise_observation(text, since=since)

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        """Check the terminal state; never raises.

        A verifier that crashes, or an unknown task, gives a verdict with one failed check whose
        reason carries the error, so a run is always scored.
        """
        try:
            spec = self.spec(task.id)
            checks = spec.verify(Path(workspace), answer_key)
            if not checks:
                checks = [Check(name="verifier", passed=False, reason="the verifier made no check")]
        except Exception as error:  # a verifier bug must not lose the run
            last = traceback.format_exception_only(type(error), error)[-1].strip()
            checks = [Check(name="verifier", passed=False, reason=f"verifier error: {last}")]
        return Verdict(task_id=task.id, checks=checks)

    def state_hash(self, task: Task, workspace: Path, *, since: float | None = None) -> str:
        """Hash of the workspace for replay checks (paper appendix A.4).

        Relative names and bytes always; modification times set to the past by the generator
        only for time-sensitive tasks, those older than a day before ``since`` (when the run
        started; None: now. See
        :func:`~controlscope.envs.filesystem.workspace.content_hash`).

        Raises:
            TaskError: unknown task or an unreadable workspace.
        """
        spec = self.spec(task.id)
        return content_hash(Path(workspace), historical_mtimes=spec.time_sensitive, now=since)

    def file_hashes(
        self, task: Task, workspace: Path, *, since: float | None = None
    ) -> dict[str, str]:
        """Each file's hash by relative path, by the rule of :meth:`state_hash` (see
        :func:`~controlscope.envs.filesystem.workspace.file_hashes`).

        Raises:
            TaskError: unknown task or an unreadable workspace.
        """
        spec = self.spec(task.id)
        return file_hashes(Path(workspace), historical_mtimes=spec.time_sensitive, now=since)

    def planner_example(self, fmt: PlannerFormat) -> str:
        """A two-turn worked example with the filesystem tools, written for ``fmt``."""
        return _planning.planner_example(fmt)

    def planner_note(self) -> str | None:
        """None: the planner's prompt speaks of files and the allowed directory."""
        return None

    def error_hint(self, error: str) -> str | None:
        """A reminder that the task's files are reachable only through the tools, when
        ``error`` shows code that looked for them locally; else None."""
        return _planning.error_hint(error)
