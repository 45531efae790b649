"""The typed primitive actions of the ALFWorld server and the game commands they make.

Each tool takes typed ids (an object such as ``apple 1``, a receptacle such as ``countertop 2``,
exactly as the game names them) and makes one game command (paper section 4: household plans as
programs of actions; typed arguments are what an argument patch edits). A name the game does not
know, or an action its rules do not allow, gives the game's own feedback (``Nothing happens.``)
and counts as an action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ACTIONS", "READ_TOOLS", "WRITE_TOOLS", "Action", "command_for"]


@dataclass(frozen=True)
class Action:
    """One primitive action.

    Attributes:
        name: the tool's name (and the proxy function's in agent code).
        params: its parameters, in order: ``object``, ``receptacle`` or ``target``.
        command: the game command, with ``{param}`` placeholders; ``{put}`` stands for the
            game's own put template.
        description: the tool's documentation.
        writes: whether it can change the game's state (a "writer block" of the local rule,
            paper appendix B); the others only return information.
    """

    name: str
    params: tuple[str, ...]
    command: str
    description: str
    writes: bool


_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_O = "object"
_R = "receptacle"

ACTIONS: tuple[Action, ...] = (
    Action("go_to", (_R,), "go to {receptacle}", "Go to a receptacle.", True),
    Action(
        "take",
        (_O, _R),
        "take {object} from {receptacle}",
        "Take an object from a receptacle.",
        True,
    ),
    Action("put", (_O, _R), "{put}", "Put the object you hold in or on a receptacle.", True),
    Action("open", (_R,), "open {receptacle}", "Open a receptacle (a fridge, a drawer...).", True),
    Action("close", (_R,), "close {receptacle}", "Close a receptacle.", True),
    Action(
        "toggle", (_O,), "use {object}", "Switch an object such as a desk lamp on or off.", True
    ),
    Action(
        "heat",
        (_O, _R),
        "heat {object} with {receptacle}",
        "Heat an object with a microwave.",
        True,
    ),
    Action(
        "cool", (_O, _R), "cool {object} with {receptacle}", "Cool an object with a fridge.", True
    ),
    Action(
        "clean",
        (_O, _R),
        "clean {object} with {receptacle}",
        "Clean an object with a sink basin.",
        True,
    ),
    Action("use", (_O,), "use {object}", "Use an object (a desk lamp is switched on).", True),
    Action(
        "examine",
        ("target",),
        "examine {target}",
        "Examine an object or a receptacle: what it is, what is in or on it.",
        False,
    ),
    Action("look", (), "look", "Look around where you are.", False),
    Action("inventory", (), "inventory", "List what you are carrying.", False),
)
"""Every action, in the order the server lists them."""

WRITE_TOOLS: frozenset[str] = frozenset(a.name for a in ACTIONS if a.writes)
"""The actions that can change the game's state."""

READ_TOOLS: frozenset[str] = frozenset(a.name for a in ACTIONS if not a.writes)
"""The actions that only return information."""

PARAM_DOCS: dict[str, str] = {
    _O: "an object's id as the game names it, e.g. 'apple 1'",
    _R: "a receptacle's id as the game names it, e.g. 'countertop 2'",
    "target": "an object's or a receptacle's id as the game names it",
}
"""What each parameter holds (its JSON schema description)."""


def command_for(action: Action, arguments: dict[str, str], put_template: str) -> str:
    """The game command ``action`` makes with ``arguments`` (given as the game names them).

    Args:
        action: the action.
        arguments: its arguments by parameter name (every parameter present).
        put_template: the game's put command (``put {o} in/on {r}`` or ``move {o} to {r}``).

    Returns:
        The command text.
    """
    template = action.command
    if template == "{put}":
        template = put_template.replace("{o}", "{object}").replace("{r}", "{receptacle}")
    # one pass: an id may hold any text, braces included
    return _PLACEHOLDER.sub(lambda m: arguments[m.group(1)], template)
