"""The ALFWorld MCP server: one game, typed primitive actions, its state in the workspace.

Started per run or branch as ``python -m controlscope.envs.alfworld.server WORKSPACE`` (the
environment's ``start_server``; a process group of its own, killed whole on close). It loads
the workspace's ``game.tw-pddl`` before it answers the MCP handshake (so the client's start-up
wait bounds the load), then serves the actions of :data:`~._actions.ACTIONS` with the SDK's
``MCPServer`` over stdio. Each action's result is the game's observation (paper section 4);
an invalid action is the game's own feedback, never a tool error. After every action the
server writes ``state.json`` in the workspace (atomically): actions taken, the game's success
signal and when it came, engine faults, the last observation and a digest of the game state.
The verifier and the state hash read it; agent code never sees the workspace.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from controlscope.envs._served import workspace_file
from controlscope.envs.alfworld._actions import ACTIONS, PARAM_DOCS, Action, command_for
from controlscope.envs.alfworld._engine import Game
from controlscope.envs.alfworld._game import GameFile

__all__ = ["GAME_FILE", "SERVER_NAME", "STATE_FILE", "build_server", "main", "write_state"]

GAME_FILE = "game.tw-pddl"
"""The game file's name in a workspace (the environment's set-up copies it there)."""

STATE_FILE = "state.json"
"""The file the server keeps the game's state in, in the workspace."""

SERVER_NAME = "controlscope-alfworld"
"""The server's name in the MCP handshake (recorded in ``run_start``)."""


def write_state(workspace: Path, game: Game) -> None:
    """Write ``state.json`` for ``game`` in ``workspace`` (a temporary file, then renamed).

    Raises:
        OSError: the workspace cannot be written.
    """
    state = {
        "actions": game.actions,
        "won": game.won,
        "won_at": game.won_at,
        "faults": [{"action": n, "command": c, "error": e} for n, c, e in game.faults],
        "last_observation": game.last,
        "state_digest": game.state_digest(),
    }
    fd, tmp = tempfile.mkstemp(dir=workspace, prefix=".state-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(state, out)
    os.replace(tmp, workspace / STATE_FILE)


def _tool(action: Action, play: Callable[[Action, dict[str, str]], str]) -> Callable[..., str]:
    """The tool function of ``action``: typed keyword parameters, the observation back."""

    def tool(**arguments: str) -> str:
        return play(action, arguments)

    described = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[str, Field(description=PARAM_DOCS[name])],
        )
        for name in action.params
    ]
    tool.__signature__ = inspect.Signature(described, return_annotation=str)  # type: ignore[attr-defined]
    tool.__name__ = action.name
    tool.__doc__ = action.description
    return tool


def build_server(game: Game, workspace: Path, *, put_template: str) -> MCPServer[Any]:
    """The MCP server of ``game``: one tool per action; ``state.json`` after every action.

    Args:
        game: the loaded game.
        workspace: where ``state.json`` is written.
        put_template: the game's put command (from its grammar).

    Returns:
        The server (run it with ``run("stdio")``, or connect to it in memory in tests).
    """
    server: MCPServer[Any] = MCPServer(
        SERVER_NAME,
        instructions="An ALFWorld household: each tool is one action; its result is what you see.",
    )

    def play(action: Action, arguments: dict[str, str]) -> str:
        result = game.step(command_for(action, arguments, put_template))
        write_state(workspace, game)
        return result.observation

    for action in ACTIONS:
        server.add_tool(_tool(action, play), name=action.name, structured_output=False)
    return server


def main(argv: list[str] | None = None) -> int:
    """Serve the game of ``WORKSPACE`` over stdio until the client closes the connection.

    Returns:
        0, or 2 when the workspace holds no game.
    """
    path = workspace_file(
        argv, module="controlscope.envs.alfworld.server", server=SERVER_NAME, name=GAME_FILE
    )
    if path is None:
        return 2
    workspace = path.parent
    game = Game.load(path)
    write_state(workspace, game)
    build_server(game, workspace, put_template=GameFile(path).put_template).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
