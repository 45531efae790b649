"""The app-API environment: a world of apps over MCP, scenario templates as tasks, native
evaluators over the apps' state.

Paper sections 4 and 5.3, appendix A.2 (AppWorld): the agent writes Python that calls many
apps' APIs; tasks come as scenario templates with three instances each; success is judged by a
native evaluator over the apps' state: the required changes, the answer given to the
supervisor, and the protected criteria (a diff of the whole database: any change the task does
not allow fails). AppWorld's own tasks cannot be had here, so this is a world of the same kind
in our own words (:mod:`.appworld` adapts the real one where it is installed).

Each task ``{template}/{n}`` is instance ``n`` (1 to 3) of a template: its world is drawn from a
seed fixed by the template and the instance (different people, data and numbers), so an
instance is the same in every run, as AppWorld's are; the run's seed changes nothing. A
workspace holds the instance's database (``apps.db``), copied from a per-process cache of its
bytes: each branch gets its own copy (``setup``), and the server of the branch works on it.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlscope.core import (
    APP_BLOCK_REQUESTS,
    APP_BLOCKS,
    AnswerKey,
    Check,
    PlannerFormat,
    Task,
    TaskBudgets,
    TaskError,
    ToolSchema,
    Verdict,
)
from controlscope.envs._base import Environment
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.apps import _planning
from controlscope.envs.apps._apps import APIS, READ_TOOLS, WRITE_TOOLS
from controlscope.envs.apps._diff import open_bytes, table_digests
from controlscope.envs.apps._template import Built, Evaluation, Template, evaluate
from controlscope.envs.apps._templates import TEMPLATES
from controlscope.envs.apps._world import base_world
from controlscope.envs.apps.server import DB_FILE

__all__ = [
    "APP_BUDGETS",
    "INSTANCES",
    "AppsEnvironment",
    "Instance",
    "instance",
    "instance_seed",
]

INSTANCES = 3
"""Instances per template (AppWorld has three)."""

APP_BUDGETS = TaskBudgets(
    primitive_calls=APP_BLOCKS * APP_BLOCK_REQUESTS,
    blocks=APP_BLOCKS,
    block_requests=APP_BLOCK_REQUESTS,
)
"""An app task's budgets (paper section 4, A.2): 40 natural blocks, 250 API requests per block,
and as many requests per task as 40 full blocks make; planning turns, execution seconds and
the wall-clock ceiling as everywhere."""

SERVER_TIMEOUT_S = 60.0
"""Seconds the server may take to start and answer the handshake, and the default wait for one
call."""


def instance_seed(template_id: str, n: int) -> int:
    """The world seed of instance ``n`` of ``template_id`` (fixed: the same world every run)."""
    return int(hashlib.sha256(f"{template_id}/{n}".encode()).hexdigest()[:12], 16)


@dataclass(frozen=True)
class Instance:
    """One task instance: its template, number, planted task and initial database.

    Attributes:
        template: the template.
        n: the instance number (1 to :data:`INSTANCES`).
        built: the instruction, reference solution, expected answer and facts.
        data: the initial database file's bytes.
    """

    template: Template
    n: int
    built: Built
    data: bytes

    @property
    def task_id(self) -> str:
        """``{template}/{n}``."""
        return f"{self.template.id}/{self.n}"

    @functools.cached_property
    def data_hash(self) -> str:
        """The initial state's hash, as :meth:`AppsEnvironment.state_hash` computes it."""
        with contextlib.closing(open_bytes(self.data)) as db:
            return combined(table_hashes(db))


@functools.cache
def instance(template_id: str, n: int) -> Instance:
    """Instance ``n`` of ``template_id``, built once per process.

    Raises:
        TaskError: unknown template or instance number.
    """
    template = TEMPLATES.get(template_id)
    if template is None or not 1 <= n <= INSTANCES:
        raise TaskError(f"no apps task {template_id}/{n}")
    world = base_world(instance_seed(template_id, n))
    built = template.build(world)
    return Instance(template, n, built, world.to_bytes())


def table_hashes(db: sqlite3.Connection) -> dict[str, str]:
    """Each table's digest (private tables left out), as ``apps.db/{table}``."""
    return {f"{DB_FILE}/{k}": v for k, v in table_digests(db).items()}


def combined(hashes: dict[str, str]) -> str:
    """One SHA-256 of named hashes."""
    text = "\n".join(f"{k} {v}" for k, v in sorted(hashes.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _split_id(task_id: str) -> tuple[str, int]:
    template, _, number = task_id.rpartition("/")
    if not number.isdigit():
        raise TaskError(f"an apps task id is TEMPLATE/N, not {task_id!r}")
    return template, int(number)


class AppsEnvironment(Environment):
    """The app-API environment (an :class:`~controlscope.envs.Environment` whose prompt lists
    some of its tools, :meth:`prompt_tools`).

    Attributes:
        name: ``apps``.
        read_tools: APIs that only return information.
        write_tools: APIs that change an app's state.
    """

    name = "apps"
    read_tools = READ_TOOLS
    write_tools = WRITE_TOOLS

    def tasks(self) -> list[Task]:
        """Every instance of every template, by template then instance."""
        return [self._task(instance(t, n)) for t in TEMPLATES for n in range(1, INSTANCES + 1)]

    def task(self, task_id: str, **params: Any) -> Task:
        """One instance as a task; app tasks take no parameters.

        Raises:
            TaskError: unknown id (close matches named) or parameters given.
        """
        if params:
            raise TaskError(f"apps tasks take no parameters, got {sorted(params)}")
        template, n = _split_id(task_id) if "/" in task_id else (task_id, 0)
        if template not in TEMPLATES or not 1 <= n <= INSTANCES:
            known = [f"{t}/{i}" for t in TEMPLATES for i in range(1, INSTANCES + 1)]
            close = difflib.get_close_matches(task_id, known, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise TaskError(
                f"unknown apps task {task_id!r}{hint} (`controlscope tasks --env apps` lists "
                f"all {len(known)})"
            )
        return self._task(instance(template, n))

    def _task(self, inst: Instance) -> Task:
        t = inst.template
        return Task(
            id=inst.task_id,
            env=self.name,
            category="+".join(t.apps),
            instruction=inst.built.instruction,
            template=t.id,
            budgets=APP_BUDGETS,
            metadata={
                "split": t.split,
                "difficulty": t.difficulty,
                "apps": list(t.apps),
                "instance": inst.n,
                "answer": t.answer_kind,
            },
        )

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        """Write the instance's database into ``workspace`` (existing and empty): the
        branch's own copy. An instance is fixed: the seed changes nothing (it must still be a
        valid seed).

        Returns:
            The evaluator's key: template, instance, expected answer, facts, and the initial
            state's hash.

        Raises:
            TaskError: unknown task, a bad seed, or a missing, non-empty or unwritable
                workspace.
        """
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise TaskError(f"seed must be an integer in [0, 2**63), got {seed!r}")
        inst = instance(*_split_id(task.id))
        root = Path(workspace)
        if not root.is_dir() or any(root.iterdir()):
            raise TaskError(f"workspace {root} must be an existing, empty directory")
        try:
            (root / DB_FILE).write_bytes(inst.data)
        except OSError as err:
            raise TaskError(f"cannot write the world of {task.id} into {root}: {err}") from err
        key = {
            "template": inst.template.id,
            "instance": inst.n,
            "answer": inst.built.answer,
            "facts": inst.built.facts,
            "initial_hash": inst.data_hash,
        }
        return dict(json.loads(json.dumps(key)))

    def start_server(self, workspace: Path) -> McpToolServer:
        """Start the apps' MCP server on ``workspace``'s database (a Python process in its own
        process group, started within :data:`SERVER_TIMEOUT_S`).

        Raises:
            ToolServerError: the server did not start.
        """
        return McpToolServer.python_module(
            "controlscope.envs.apps.server", workspace, timeout_s=SERVER_TIMEOUT_S
        )

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        """The native evaluator (:func:`~._template.evaluate`) on the terminal database
        against the initial one; never raises: an evaluator that fails is a failed
        ``evaluation_error`` check with the reason."""
        try:
            inst = instance(*_split_id(task.id))
            facts = {**answer_key.get("facts", {}), "answer": answer_key.get("answer")}
            path = Path(workspace) / DB_FILE
            if not path.is_file():
                raise FileNotFoundError(f"the workspace holds no {DB_FILE}")
            with (
                contextlib.closing(open_bytes(inst.data)) as before,
                contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as after,
            ):
                checks = evaluate(inst.template, facts, Evaluation(before, after))
        except Exception as err:  # a broken evaluator or state is a recorded failure
            why = f"{type(err).__name__}: {err}"[:2000]
            checks = [Check(name="evaluation_error", passed=False, reason=why)]
        return Verdict(task_id=task.id, checks=checks)

    def normalise_observation(self, text: str, *, since: float | None = None) -> str:
        """``text`` unchanged: the world's clock is its own, so observations hold no readings
        of the machine's."""
        return text

    def state_hash(self, task: Task, workspace: Path, *, since: float | None = None) -> str:
        """SHA-256 of every table's rows (equal for equal states whatever the file's layout;
        no file time is hashed, so ``since`` changes nothing).

        Raises:
            TaskError: the workspace holds no readable database.
        """
        return combined(self.file_hashes(task, workspace))

    def file_hashes(
        self, task: Task, workspace: Path, *, since: float | None = None
    ) -> dict[str, str]:
        """Each table's digest, as ``apps.db/{table}``.

        Raises:
            TaskError: the workspace holds no readable database.
        """
        path = Path(workspace) / DB_FILE
        if not path.is_file():
            raise TaskError(f"{workspace} holds no {DB_FILE}")
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                return table_hashes(db)
        except sqlite3.Error as err:
            raise TaskError(f"{path} cannot be read: {err}") from err

    def planner_example(self, fmt: PlannerFormat) -> str:
        """A worked example: an API looked up, a login, a paging loop, the answer."""
        return _planning.planner_example(fmt)

    def planner_note(self) -> str | None:
        """The apps are reachable only through their APIs; no files, no directory."""
        return _planning.PLANNER_NOTE

    def prompt_tools(self, tools: list[ToolSchema]) -> list[ToolSchema]:
        """The tools the planner's prompt lists: the documentation and the supervisor's APIs;
        the rest are found through the documentation (every tool stays callable)."""
        return [t for t in tools if t.name in APIS and APIS[t.name].app in _planning.PROMPT_APPS]

    def error_hint(self, error: str) -> str | None:
        """None: an API's error says what went wrong."""
        return None
