"""The expert plan of a game, from its ALFRED trajectory data, as a program of typed actions.

Each game's folder keeps ALFRED's ``traj_data.json``, whose ``plan.high_pddl`` is the expert's
high-level plan (``GotoLocation``, ``PickupObject``, ``PutObject``, ``HeatObject``,
``CoolObject``, ``CleanObject``, ``ToggleObject``). Its objects are ALFRED object ids, which the
game names through alfworld's demangling (``AlarmClock|+02.69|+01.23|+01.40`` -> ``alarmclock
3``); ``GotoLocation`` names a place, not a receptacle, so the receptacle is the one the next
step needs; and a closed receptacle is opened before anything is taken from or put in it (the
game's rules). An object the game places in no receptacle (on the floor) cannot be taken or
used in the text game (alfworld issue #107); the plan then uses the nearest object of the same
type that lies in a receptacle, and says so (:attr:`ExpertPlan.substitutions`). The result runs
as a program through the MCP server (tests and ``benchmarks/alfworld_env.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlscope.core import TaskError, read_json
from controlscope.envs.alfworld._game import MAX_GAME_BYTES, GameFile

__all__ = ["Call", "ExpertPlan", "expert_plan", "mangle", "plan_program"]

Call = tuple[str, dict[str, str]]
"""One primitive call: the tool's name and its arguments."""

_MANGLE = {"|": "_bar_", "+": "_plus_", "-": "_minus_", ".": "_dot_", ",": "_comma_"}
_NEEDS_OPEN = ("PickupObject", "PutObject")


def mangle(alfred_id: str) -> str:
    """An ALFRED object id as the game's PDDL names it (lower case, as its engine reads it)."""
    return "".join(_MANGLE.get(ch, ch) for ch in alfred_id).lower()


@dataclass
class _Plan:
    """The game as the plan leaves it: where objects are, what is open, where the agent is."""

    game: GameFile
    where: dict[str, str]
    opened: set[str]
    openable: set[str]
    at: str | None = None
    held: str | None = None
    calls: list[Call] = field(default_factory=list)
    alias: dict[str, str] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)

    def name(self, alfred_id: str) -> str:
        entity = mangle(alfred_id)
        if entity not in self.game.names:
            raise TaskError(f"{self.game.path}: the expert's {alfred_id!r} is not in the game")
        return self.alias.get(entity, entity)

    def reachable(self, alfred_id: str) -> str:
        """The object to take or use for ``alfred_id``: itself when it lies in a receptacle,
        else the nearest object of its type that does and that the plan has not taken yet
        (remembered for later steps)."""
        entity = self.name(alfred_id)
        if entity in self.where:
            return entity
        kind = {o: t for o, t in self.game.holding("objectType")}.get(entity)
        same = [
            o
            for o, t in self.game.holding("objectType")
            if t == kind and o in self.where and o not in self.taken
        ]
        if not same:
            raise TaskError(f"{self.game.path}: the expert's {alfred_id!r} lies in no receptacle")
        here = _position(entity)
        chosen = min(same, key=lambda o: (_distance(here, _position(o)), o))
        self.alias[entity] = chosen
        return chosen

    def emit(self, tool: str, **arguments: str) -> None:
        self.calls.append((tool, {k: self.game.names[v] for k, v in arguments.items()}))

    def go(self, receptacle: str | None) -> None:
        if receptacle is not None and receptacle != self.at:
            self.emit("go_to", receptacle=receptacle)
            self.at = receptacle

    def ensure_open(self, receptacle: str) -> None:
        if receptacle in self.openable and receptacle not in self.opened:
            self.emit("open", receptacle=receptacle)
            self.opened.add(receptacle)


def _target(plan: _Plan, step: dict[str, Any]) -> str | None:
    """The receptacle a step needs the agent at (None: none)."""
    action = step["action"]
    if action in ("PickupObject", "ToggleObject"):
        return plan.where.get(plan.reachable(step["objectId"]))
    if action == "PutObject":
        return plan.name(step["receptacleObjectId"])
    if action in ("HeatObject", "CoolObject", "CleanObject"):
        return plan.name(step["objectId"])
    return None


def _act(plan: _Plan, step: dict[str, Any]) -> None:
    """The calls of one non-moving step."""
    action = step["action"]
    if action == "PickupObject":
        obj = plan.reachable(step["objectId"])
        receptacle = plan.where.pop(obj)
        plan.ensure_open(receptacle)
        plan.emit("take", object=obj, receptacle=receptacle)
        plan.held = obj
        plan.taken.add(obj)
    elif action == "PutObject":
        obj, receptacle = plan.name(step["objectId"]), plan.name(step["receptacleObjectId"])
        plan.ensure_open(receptacle)
        plan.emit("put", object=obj, receptacle=receptacle)
        plan.where[obj], plan.held = receptacle, None
    elif action in ("HeatObject", "CoolObject", "CleanObject"):
        held = plan.name(step["cleanObjectId"]) if action == "CleanObject" else plan.held
        if held is None:
            raise TaskError(f"{plan.game.path}: the expert {action}s holding nothing")
        tool = action.removesuffix("Object").lower()
        plan.emit(tool, object=held, receptacle=plan.name(step["objectId"]))
    elif action == "ToggleObject":
        plan.emit("toggle", object=plan.reachable(step["objectId"]))
    elif action != "End":
        raise TaskError(f"{plan.game.path}: the expert's {action} has no action here")


@dataclass(frozen=True)
class ExpertPlan:
    """A game's expert plan as primitive calls.

    Attributes:
        calls: ``(tool, arguments)`` pairs, arguments named as the game names things.
        substitutions: objects of the trajectory the game places in no receptacle, each with
            the game's name of the object used instead.
    """

    calls: list[Call]
    substitutions: dict[str, str]


def expert_plan(game: GameFile, traj_data: Path) -> ExpertPlan:
    """The expert plan of ``game`` from its trajectory data.

    Args:
        game: the game file.
        traj_data: its ``traj_data.json``.

    Returns:
        The plan.

    Raises:
        TaskError: unreadable trajectory data, or a step that does not fit the game.
    """
    try:
        data = read_json(traj_data, MAX_GAME_BYTES)
        steps = [h["planner_action"] for h in data["plan"]["high_pddl"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TaskError(f"{traj_data}: no expert plan: {err}") from err
    plan = _Plan(
        game=game,
        where={obj: receptacle for obj, receptacle in game.holding("inReceptacle")},
        opened={args[0] for args in game.holding("opened")},
        openable={args[0] for args in game.holding("openable")},
    )
    try:
        for index, step in enumerate(steps):
            if step["action"] == "GotoLocation":
                after: dict[str, Any] = next(
                    (s for s in steps[index + 1 :] if s["action"] != "GotoLocation"), {}
                )
                plan.go(_target(plan, after) if after else None)
            else:
                _act(plan, step)
    except KeyError as err:
        raise TaskError(f"{traj_data}: the expert plan does not fit the game ({err})") from err
    names = game.names
    return ExpertPlan(plan.calls, {names[k]: names[v] for k, v in sorted(plan.alias.items())})


def _position(entity: str) -> tuple[float, ...]:
    """The coordinates in an ALFRED id as the game spells it (empty when it has none)."""
    parts = entity.replace("_plus_", "+").replace("_minus_", "-").replace("_dot_", ".")
    values: list[float] = []
    for part in parts.split("_bar_")[1:]:
        try:
            values.append(float(part))
        except ValueError:
            break
    return tuple(values)


def _distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=False))


def plan_program(calls: list[Call]) -> str:
    """A program that makes ``calls`` in order and prints each observation."""
    lines = []
    for tool, arguments in calls:
        args = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        lines.append(f"print({tool}({args}))")
    return "\n".join(lines) + "\n"
