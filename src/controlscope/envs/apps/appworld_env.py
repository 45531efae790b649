"""The real AppWorld as an environment (``appworld``), where it and its data are installed.

Paper sections 4 and 5.3, appendix A.2: AppWorld's official tasks (``dev``, ``test_normal``,
``test_challenge``; three instances per scenario template) under the same V1/V2 protocols as
:mod:`.environment`'s apps, with AppWorld's own evaluator. AppWorld runs in a virtual
environment of its own (``APPWORLD_PYTHON``; it pins pydantic 1) over its data
(``APPWORLD_ROOT``), reached through :mod:`._appworld_bridge`; its APIs are served over MCP by
:mod:`.appworld_server`, one process per run or branch, each branch an experiment of its own
(AppWorld keeps each experiment's state apart). Without the package or the data every entry
point says what to do (:class:`AppWorldMissing`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from controlscope.core import (
    AnswerKey,
    Check,
    PlannerFormat,
    Task,
    TaskError,
    ToolSchema,
    Verdict,
)
from controlscope.envs._base import Environment
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.apps import _planning
from controlscope.envs.apps._appworld_client import (
    AppWorldMissing,
    AppWorldSetup,
    Bridge,
    appworld_setup,
)
from controlscope.envs.apps.appworld_server import CALLS_FILE, CONFIG_FILE
from controlscope.envs.apps.environment import APP_BUDGETS

__all__ = ["SPLITS", "AppWorldEnvironment", "AppWorldMissing"]

SPLITS = ("dev", "test_normal", "test_challenge")
"""AppWorld's splits listed as tasks (its ``train`` split is for training agents)."""

SERVER_TIMEOUT_S = 300.0
"""Seconds AppWorld may take to open a task and answer the handshake, and for one call."""

PLANNER_NOTE = (
    "The apps are reachable ONLY through their API functions, named app__api (e.g. "
    "spotify__login); find the ones you need with api_docs__show_api_descriptions(app_name=...) "
    "and api_docs__show_api_doc(app_name=..., api_name=...). Every API returns JSON text (use "
    "json.loads). Sign in with supervisor__show_account_passwords() and the app's login. "
    "Listing APIs return one page at a time (page_index, page_limit). When the task is done, "
    "call supervisor__complete_task, with answer=... when the task asks a question."
)


class AppWorldEnvironment(Environment):
    """AppWorld's official tasks (an :class:`~controlscope.envs.Environment` whose prompt
    lists some of its tools, :meth:`prompt_tools`).

    Attributes:
        name: ``appworld``.
        read_tools: AppWorld's read APIs are not known before a task opens: empty.
        write_tools: likewise empty (the local rule then finds no writer blocks).
    """

    name = "appworld"
    read_tools: frozenset[str] = frozenset()
    write_tools: frozenset[str] = frozenset()

    @functools.cached_property
    def _setup(self) -> AppWorldSetup:
        return appworld_setup()

    @functools.cached_property
    def _tasks(self) -> dict[str, Task]:
        with Bridge(self._setup) as bridge:
            found = bridge.request("tasks", splits=list(SPLITS))["tasks"]
        return {t["id"]: self._task(t) for t in found}

    def _task(self, row: dict[str, Any]) -> Task:
        task_id = str(row["id"])
        return Task(
            id=task_id,
            env=self.name,
            category=str(row["split"]),
            instruction=str(row["instruction"]),
            template=task_id.rsplit("_", 1)[0],
            budgets=APP_BUDGETS,
            metadata={"split": row["split"], "scenario": task_id.rsplit("_", 1)[0]},
        )

    def tasks(self) -> list[Task]:
        """Every task of the three splits, by split then id.

        Raises:
            AppWorldMissing: AppWorld or its data is not installed.
        """
        return list(self._tasks.values())

    def task(self, task_id: str, **params: Any) -> Task:
        """One official task.

        Raises:
            AppWorldMissing: AppWorld or its data is not installed.
            TaskError: unknown id or parameters given.
        """
        if params:
            raise TaskError(f"AppWorld tasks take no parameters, got {sorted(params)}")
        found = self._tasks.get(task_id)
        if found is None:
            raise TaskError(f"unknown AppWorld task {task_id!r} in {', '.join(SPLITS)}")
        return found

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        """Name the task and a fresh AppWorld experiment in ``workspace``'s ``appworld.json``
        (AppWorld builds the task's initial state when the server opens it).

        Raises:
            AppWorldMissing: AppWorld or its data is not installed.
            TaskError: a missing, non-empty or unwritable workspace.
        """
        where = self._setup
        folder = Path(workspace)
        if not folder.is_dir() or any(folder.iterdir()):
            raise TaskError(f"workspace {folder} must be an existing, empty directory")
        experiment = f"controlscope-{folder.name}"
        config = {
            "task_id": task.id,
            "experiment": experiment,
            "python": where.python,
            "root": str(where.root),
            "pythonpath": where.pythonpath,
        }
        (folder / CONFIG_FILE).write_text(json.dumps(config), encoding="utf-8")
        return {"task_id": task.id, "experiment": experiment}

    def start_server(self, workspace: Path) -> McpToolServer:
        """Start the task's MCP server (this interpreter; AppWorld behind it in its own).

        Raises:
            ToolServerError: the server or AppWorld did not start.
        """
        return McpToolServer.python_module(
            "controlscope.envs.apps.appworld_server", workspace, timeout_s=SERVER_TIMEOUT_S
        )

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        """AppWorld's own evaluator on the experiment's saved state; never raises."""
        try:
            with Bridge(self._setup) as bridge:
                found = bridge.request(
                    "evaluate", task_id=task.id, experiment=answer_key["experiment"]
                )
            reason = (
                f"{found.get('passes', 0)} of AppWorld's tests passed, "
                f"{found.get('failures', 0)} failed: {json.dumps(found.get('report'))}"
            )
            check = Check(name="appworld", passed=bool(found["success"]), reason=reason[:4000])
        except Exception as err:  # a failed evaluation is recorded, never a crash
            check = Check(name="evaluation_error", passed=False, reason=f"{err}"[:2000])
        return Verdict(task_id=task.id, checks=[check])

    def normalise_observation(self, text: str, *, since: float | None = None) -> str:
        """``text`` unchanged (AppWorld's clock is the task's own)."""
        return text

    def state_hash(self, task: Task, workspace: Path, *, since: float | None = None) -> str:
        """SHA-256 of the task's configuration and the calls made (AppWorld keeps its state in
        its experiment's folder; no file time is hashed, so ``since`` changes nothing)."""
        hashes = self.file_hashes(task, workspace)
        return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()

    def file_hashes(
        self, task: Task, workspace: Path, *, since: float | None = None
    ) -> dict[str, str]:
        """SHA-256 of ``appworld.json`` and ``calls.jsonl`` (the latter once a call was made).

        Raises:
            TaskError: the workspace names no task.
        """
        hashes = {}
        for name in (CONFIG_FILE, CALLS_FILE):
            path = Path(workspace) / name
            if path.is_file():
                hashes[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        if CONFIG_FILE not in hashes:
            raise TaskError(f"{workspace} names no AppWorld task")
        return hashes

    def planner_example(self, fmt: PlannerFormat) -> str:
        """The apps' worked example (AppWorld's APIs follow the same conventions)."""
        return _planning.planner_example(fmt)

    def planner_note(self) -> str | None:
        """AppWorld's apps are reachable only through their APIs."""
        return PLANNER_NOTE

    def prompt_tools(self, tools: list[ToolSchema]) -> list[ToolSchema]:
        """The tools the planner's prompt lists: AppWorld's documentation and supervisor APIs
        (the rest are found through the documentation)."""
        return [t for t in tools if t.name.split("__", 1)[0] in _planning.PROMPT_APPS]

    def error_hint(self, error: str) -> str | None:
        """None: AppWorld's errors say what went wrong."""
        return None
