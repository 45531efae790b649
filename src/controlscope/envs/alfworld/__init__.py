"""ALFWorld: household games played on their own text engine, typed actions over MCP.

Paper sections 2, 4 and 5.2, appendix C.3, Table 7 and Figure 2. Needs the optional
``alfworld`` extra (``pip install 'controlscope[alfworld]'``: alfworld 0.4.2 and TextWorld) and
the game files (``ALFWORLD_DATA``, see :mod:`._data`).

Public API: :class:`AlfworldEnvironment` (the environment, registered as ``alfworld``), the
data location (:data:`DATA_ENV`, :func:`data_root`, :class:`AlfworldDataError`), the cohorts
and the excluded scenes (:data:`COHORTS`, :data:`DEVELOPMENT_SCENES`,
:data:`EXCLUDED_SCENES_ENV`), the actions (:data:`ACTIONS`), a game's expert plan from its
trajectory data as a program (:func:`expert_plan`, :func:`plan_program`), and the engine
(:class:`Game`, for tests and benchmarks). The server is :mod:`.server`.
"""

from controlscope.envs.alfworld._actions import ACTIONS, READ_TOOLS, WRITE_TOOLS, Action
from controlscope.envs.alfworld._data import (
    COHORTS,
    DATA_ENV,
    TASK_TYPES,
    AlfworldDataError,
    GameRecord,
    data_root,
)
from controlscope.envs.alfworld._engine import ENGINE_BROKEN, ENGINE_FAULT, Game, StepResult
from controlscope.envs.alfworld._expert import ExpertPlan, expert_plan, plan_program
from controlscope.envs.alfworld._game import GameFile
from controlscope.envs.alfworld.environment import (
    ACTION_BUDGET,
    DEVELOPMENT_SCENES,
    EXCLUDED_SCENES_ENV,
    REPAIRS,
    AlfworldEnvironment,
)

__all__ = [
    "ACTIONS",
    "ACTION_BUDGET",
    "COHORTS",
    "DATA_ENV",
    "DEVELOPMENT_SCENES",
    "ENGINE_BROKEN",
    "ENGINE_FAULT",
    "EXCLUDED_SCENES_ENV",
    "READ_TOOLS",
    "REPAIRS",
    "TASK_TYPES",
    "WRITE_TOOLS",
    "Action",
    "AlfworldDataError",
    "AlfworldEnvironment",
    "ExpertPlan",
    "Game",
    "GameFile",
    "GameRecord",
    "StepResult",
    "data_root",
    "expert_plan",
    "plan_program",
]
