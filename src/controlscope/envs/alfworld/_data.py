"""Where ALFWorld's game files are, and which games each cohort plays.

The data folder is the one the alfworld package uses: ``$ALFWORLD_DATA``, else its default
``~/.cache/alfworld``; it holds ``json_2.1.1/valid_seen`` and ``json_2.1.1/valid_unseen`` (the
evaluation splits; ``alfworld-download`` fetches them, or unpack a copy there). A trial folder
is playable by alfworld's own rule (``AlfredTWEnv.collect_game_files``): it has
``traj_data.json`` and ``game.tw-pddl``, its path names no ``movable`` or ``Sliced`` task, and
the game says ``"solvable": true``; every task type counts. The published data holds 140
playable valid_seen games in 76 scenes and 134 valid_unseen games in 4 scenes (paper section 4).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from controlscope._extras import require_extra
from controlscope.core import TaskError, read_json
from controlscope.envs.alfworld._game import MAX_GAME_BYTES

__all__ = [
    "COHORTS",
    "DATA_ENV",
    "TASK_TYPES",
    "AlfworldDataError",
    "GameRecord",
    "data_root",
    "scan_cohort",
]

DATA_ENV = "ALFWORLD_DATA"
"""The environment variable naming the data folder (the alfworld package's own)."""

DEFAULT_DATA = Path("~/.cache/alfworld")
"""The alfworld package's default data folder."""

COHORTS: dict[str, str] = {
    "valid_seen": "json_2.1.1/valid_seen",
    "valid_unseen": "json_2.1.1/valid_unseen",
}
"""Each cohort's folder in the data folder (paper section 4: the two path-defined cohorts)."""

TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "examine_in_light",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick_two",
}
"""alfworld's six task types -> the short names used as task categories."""


class AlfworldDataError(TaskError):
    """No ALFWorld game files where they were looked for (the message says what to do)."""


def data_root() -> Path:
    """The data folder: ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``.

    Raises:
        MissingExtra: the ``alfworld`` extra is not installed (the engine the games need).
        AlfworldDataError: neither holds the cohorts' folders; the message says where the
            files were looked for, how to get them and where to point ``ALFWORLD_DATA``.
    """
    require_extra("alfworld", "alfworld", "the alfworld environment")
    given = os.environ.get(DATA_ENV)
    root = Path(given).expanduser() if given else DEFAULT_DATA.expanduser()
    missing = [c for c, sub in COHORTS.items() if not (root / sub).is_dir()]
    if missing:
        where = f"${DATA_ENV}={given}" if given else f"{DEFAULT_DATA} (${DATA_ENV} is not set)"
        raise AlfworldDataError(
            f"no ALFWorld game files found in {where}: it lacks "
            f"{', '.join(COHORTS[c] for c in missing)}. Get the json_2.1.1 evaluation splits "
            "(valid_seen, valid_unseen) with `alfworld-download` (pip install "
            "'controlscope[alfworld]'), or unpack a copy of them, and set "
            f"{DATA_ENV} to the folder that holds json_2.1.1"
        )
    return root


@dataclass(frozen=True)
class GameRecord:
    """One playable game of a cohort.

    Attributes:
        cohort: ``valid_seen`` or ``valid_unseen``.
        task_folder: the task folder's name (``pick_and_place_simple-Mug-None-Desk-308``).
        trial: the trial folder's name (``trial_T20190909_210238_431966``).
        task_type: alfworld's task type (``pick_and_place_simple``...).
        scene: the ALFRED scene number (the bootstrap cluster).
        folder: the trial folder (absolute).
    """

    cohort: str
    task_folder: str
    trial: str
    task_type: str
    scene: int
    folder: Path

    @property
    def task_id(self) -> str:
        """``cohort/task_folder/trial``."""
        return f"{self.cohort}/{self.task_folder}/{self.trial}"

    @property
    def game_path(self) -> str:
        """The game file's path relative to the data folder."""
        return f"{COHORTS[self.cohort]}/{self.task_folder}/{self.trial}/game.tw-pddl"


def scan_cohort(root: Path, cohort: str) -> list[GameRecord]:
    """The playable games of ``cohort`` under ``root``, sorted by task id (read once per
    process and data folder: game files do not change under a run).

    Raises:
        AlfworldDataError: a trial's files cannot be read.
    """
    return list(_scan(Path(root).resolve(), cohort))


@functools.cache
def _scan(root: Path, cohort: str) -> tuple[GameRecord, ...]:
    games: list[GameRecord] = []
    base = root / COHORTS[cohort]
    for task_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        if "movable" in task_dir.name or "Sliced" in task_dir.name:
            continue
        for trial in sorted(p for p in task_dir.iterdir() if p.is_dir()):
            record = _record(cohort, task_dir.name, trial)
            if record is not None:
                games.append(record)
    return tuple(games)


def _record(cohort: str, task_folder: str, trial: Path) -> GameRecord | None:
    """The trial as a game record, or None when alfworld would not play it."""
    traj, game = trial / "traj_data.json", trial / "game.tw-pddl"
    if not traj.is_file() or not game.is_file():
        return None
    try:
        data = read_json(traj, MAX_GAME_BYTES)
        task_type, scene = str(data["task_type"]), int(data["scene"]["scene_num"])
        solvable = read_json(game, MAX_GAME_BYTES).get("solvable")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise AlfworldDataError(f"{trial}: its game files cannot be read: {err}") from err
    if solvable is not True or task_type not in TASK_TYPES:
        return None
    return GameRecord(cohort, task_folder, trial.name, task_type, scene, trial)
