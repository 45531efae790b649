"""The ALFWorld environment: household games as tasks, one MCP server per run or branch.

Paper sections 4 and 5.2, appendix C.3: the agent writes a household plan as a program of
actions; reviews happen at action boundaries; 100 actions per task; every condition keeps the
same ordinary recovery (up to five repairs after a failed plan, ``TaskBudgets.repairs``); the
verdict is the game's own success signal. Tasks are the playable games of the two cohorts
(``valid_seen``, ``valid_unseen``); a task's scene is its bootstrap cluster (its template).

The paper's seen cohort leaves out 24 development scenes it does not list. They are a named,
recorded list here: :data:`DEVELOPMENT_SCENES` (empty), overridden by the environment variable
:data:`EXCLUDED_SCENES_ENV` or the ``excluded_scenes`` argument; the scenes in force are in
every task's metadata, so every run records them. ``docs/architecture.md`` says how to
reproduce an 87-task cohort.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import Any

from controlscope.core import (
    AnswerKey,
    Check,
    PlannerFormat,
    Task,
    TaskBudgets,
    TaskError,
    Verdict,
)
from controlscope.envs._base import Environment
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.alfworld import _planning
from controlscope.envs.alfworld._actions import READ_TOOLS, WRITE_TOOLS
from controlscope.envs.alfworld._data import (
    COHORTS,
    TASK_TYPES,
    GameRecord,
    data_root,
    scan_cohort,
)
from controlscope.envs.alfworld._game import GameFile
from controlscope.envs.alfworld.server import GAME_FILE, STATE_FILE

__all__ = [
    "ACTION_BUDGET",
    "DEVELOPMENT_SCENES",
    "EXCLUDED_SCENES_ENV",
    "REPAIRS",
    "AlfworldEnvironment",
    "excluded_scenes_from_env",
]

ACTION_BUDGET = 100
"""Actions per task (paper section 4)."""

REPAIRS = 5
"""Ordinary repairs after a failed plan (paper section 4)."""

DEVELOPMENT_SCENES: tuple[int, ...] = ()
"""The development scenes the paper's seen cohort leaves out (24 of valid_seen's 76 scenes,
holding 53 of its 140 games; scenes 1 and 28 are not among them). The paper does not list
them, so none are left out by default."""

EXCLUDED_SCENES_ENV = "CONTROLSCOPE_ALFWORLD_EXCLUDED_SCENES"
"""Scenes to leave out, as comma-separated scene numbers (overrides :data:`DEVELOPMENT_SCENES`)."""

SERVER_TIMEOUT_S = 120.0
"""Seconds the server may take to load its game and answer the handshake, and the default
wait for one action."""


def excluded_scenes_from_env() -> tuple[int, ...]:
    """The excluded scenes :data:`EXCLUDED_SCENES_ENV` names, else :data:`DEVELOPMENT_SCENES`.

    Raises:
        TaskError: the variable holds something other than scene numbers.
    """
    text = os.environ.get(EXCLUDED_SCENES_ENV)
    if text is None:
        return DEVELOPMENT_SCENES
    try:
        return tuple(sorted({int(part) for part in text.replace(" ", "").split(",") if part}))
    except ValueError:
        raise TaskError(
            f"${EXCLUDED_SCENES_ENV} must list scene numbers separated by commas, not {text!r}"
        ) from None


class AlfworldEnvironment(Environment):
    """The ALFWorld environment (an :class:`~controlscope.envs.Environment` with the default
    capabilities: branches replay their prefix, a panel clusters by template: a scene).

    Args:
        excluded_scenes: scenes whose games are left out of the task list; None: those of
            :func:`excluded_scenes_from_env`.

    Attributes:
        name: ``alfworld``.
        read_tools: the actions that only return information (look, inventory, examine).
        write_tools: the actions that can change the game.
        excluded_scenes: the scenes left out, sorted.
    """

    name = "alfworld"
    read_tools = READ_TOOLS
    write_tools = WRITE_TOOLS

    def __init__(self, *, excluded_scenes: Iterable[int] | None = None) -> None:
        chosen = excluded_scenes_from_env() if excluded_scenes is None else excluded_scenes
        self.excluded_scenes: tuple[int, ...] = tuple(sorted(set(chosen)))

    @cached_property
    def _records(self) -> dict[str, GameRecord]:
        """Every playable game of both cohorts by task id (the data found on first use)."""
        root = data_root()
        return {r.task_id: r for cohort in COHORTS for r in scan_cohort(root, cohort)}

    def tasks(self) -> list[Task]:
        """Every playable game of both cohorts outside the excluded scenes, sorted by id.

        Raises:
            AlfworldDataError: no game files found (the message says what to do).
        """
        records = self._records.values()
        return [self._task(r) for r in records if r.scene not in self.excluded_scenes]

    def record(self, task_id: str) -> GameRecord:
        """The game of ``task_id``.

        Raises:
            TaskError: unknown id (close matches named) or a game in an excluded scene.
        """
        record = self._records.get(task_id)
        if record is None:
            close = difflib.get_close_matches(task_id, list(self._records), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise TaskError(
                f"unknown alfworld task {task_id!r}{hint} (`controlscope tasks --env alfworld` "
                f"lists all {len(self._records)} playable games)"
            )
        if record.scene in self.excluded_scenes:
            raise TaskError(
                f"alfworld task {task_id!r} is in scene {record.scene}, which is excluded "
                f"(${EXCLUDED_SCENES_ENV}={','.join(map(str, self.excluded_scenes))})"
            )
        return record

    def task(self, task_id: str, **params: Any) -> Task:
        """One game as a task; ALFWorld games take no parameters.

        Raises:
            TaskError: unknown id, an excluded scene, or parameters given.
        """
        if params:
            raise TaskError(f"alfworld tasks take no parameters, got {sorted(params)}")
        return self._task(self.record(task_id))

    def _task(self, record: GameRecord) -> Task:
        game = GameFile(record.folder / GAME_FILE)
        return Task(
            id=record.task_id,
            env=self.name,
            category=TASK_TYPES[record.task_type],
            instruction=game.opening(),
            template=f"{record.cohort}/scene_{record.scene}",
            budgets=TaskBudgets(primitive_calls=ACTION_BUDGET, repairs=REPAIRS),
            metadata={
                "cohort": record.cohort,
                "task_type": record.task_type,
                "scene": record.scene,
                "game": record.game_path,
                "excluded_scenes": list(self.excluded_scenes),
                "shared_places": game.shared_places,
            },
        )

    def setup(self, task: Task, seed: int, workspace: Path) -> AnswerKey:
        """Copy the task's game into ``workspace`` (existing and empty). A game is fixed: the
        seed changes nothing (it must still be a valid seed).

        Returns:
            The game file's SHA-256 (``{"game_sha256": ...}``).

        Raises:
            TaskError: unknown task, a bad seed, or a missing, non-empty or unwritable
                workspace.
        """
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise TaskError(f"seed must be an integer in [0, 2**63), got {seed!r}")
        record = self.record(task.id)
        root = Path(workspace)
        if not root.is_dir() or any(root.iterdir()):
            raise TaskError(f"workspace {root} must be an existing, empty directory")
        try:
            shutil.copyfile(record.folder / GAME_FILE, root / GAME_FILE)
        except OSError as err:
            raise TaskError(f"cannot copy the game of {task.id} into {root}: {err}") from err
        return {"game_sha256": _sha256((root / GAME_FILE).read_bytes())}

    def start_server(self, workspace: Path) -> McpToolServer:
        """Start the game's MCP server on ``workspace`` (a Python process in its own process
        group; the start, game load included, bounded by :data:`SERVER_TIMEOUT_S`).

        Raises:
            ToolServerError: the server did not start (alfworld missing, a bad game file).
        """
        return McpToolServer.python_module(
            "controlscope.envs.alfworld.server", workspace, timeout_s=SERVER_TIMEOUT_S
        )

    def verify(self, task: Task, workspace: Path, answer_key: AnswerKey) -> Verdict:
        """The game's own success signal, from the server's ``state.json``; never raises."""
        state = _read_state(Path(workspace))
        if state is None:
            check = Check(name="goal", passed=False, reason="the game never started")
            return Verdict(task_id=task.id, checks=[check])
        won, actions = state.get("won") is True, state.get("actions")
        faults = state.get("faults") or []
        note = f"; {len(faults)} engine fault(s)" if faults else ""
        reason = (
            f"the game was won after {state.get('won_at')} actions{note}"
            if won
            else f"the game was not won in {actions} actions{note}"
        )
        won_at = state.get("won_at")
        return Verdict(
            task_id=task.id,
            checks=[Check(name="goal", passed=won, reason=reason)],
            goal_actions=won_at if won and isinstance(won_at, int) else None,
        )

    def normalise_observation(self, text: str, *, since: float | None = None) -> str:
        """``text`` unchanged: the game's observations hold no clock readings."""
        return text

    def state_hash(self, task: Task, workspace: Path, *, since: float | None = None) -> str:
        """SHA-256 of the game file and the game's state (its facts, whether it is won);
        equal for equal game states whatever the path to them (no file time is hashed, so
        ``since`` changes nothing).

        Raises:
            TaskError: the workspace holds no game.
        """
        hashes = self.file_hashes(task, workspace)
        return _sha256("\n".join(f"{k} {v}" for k, v in sorted(hashes.items())).encode())

    def file_hashes(
        self, task: Task, workspace: Path, *, since: float | None = None
    ) -> dict[str, str]:
        """The game file's SHA-256 and, once the server ran, the game state's digest (under
        ``state``).

        Raises:
            TaskError: the workspace holds no game.
        """
        try:
            hashes = {GAME_FILE: _sha256((Path(workspace) / GAME_FILE).read_bytes())}
        except OSError as err:
            raise TaskError(f"{workspace} holds no readable game: {err}") from err
        state = _read_state(Path(workspace))
        if state is not None:
            hashes["state"] = str(state.get("state_digest"))
        return hashes

    def planner_example(self, fmt: PlannerFormat) -> str:
        """A worked example: one plan program with the game's feedback."""
        return _planning.planner_example(fmt)

    def planner_note(self) -> str | None:
        """The household is reachable only through the actions; no files, no directory."""
        return _planning.PLANNER_NOTE

    def error_hint(self, error: str) -> str | None:
        """None: the game's feedback says what went wrong."""
        return None


def _read_state(workspace: Path) -> dict[str, Any] | None:
    """The server's ``state.json``, or None when it is missing or unreadable."""
    try:
        data = json.loads((workspace / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
