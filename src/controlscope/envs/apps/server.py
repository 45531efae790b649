"""The apps' MCP server: every app's APIs as typed tools over one world's SQLite database.

Started per run or branch as ``python -m controlscope.envs.apps.server WORKSPACE`` (the
environment's ``start_server``; a process group of its own, killed whole on close). It opens
the workspace's ``apps.db`` (the world the environment's set-up copied there: each branch has
its own copy) and serves each API of :data:`~._apps.APIS` as one tool with the SDK's
``MCPServer`` over stdio. A tool's parameters are typed (JSON schema from the API's
specification); the SDK's check of the arguments against it answers a wrong type as a tool
error, and the app's own errors (a missing or foreign access token, an unknown id, a balance
too low) are tool errors with the app's status and message. Either way the observation is the
error and the request counts. A call that changes state is committed before its answer, so the
database file alone is the state; the server holds no other state.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
import sys
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from controlscope.envs._served import workspace_file
from controlscope.envs.apps._api import Api, AppError, Param, Session, token_owner
from controlscope.envs.apps._apps import APIS
from controlscope.envs.apps._schema import connect

__all__ = [
    "DB_FILE",
    "SERVER_NAME",
    "api_annotations",
    "build_server",
    "call_api",
    "main",
    "signature",
]

DB_FILE = "apps.db"
"""The world's database file in a workspace."""

SERVER_NAME = "controlscope-apps"
"""The server's name in the MCP handshake (recorded in ``run_start``)."""

_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "string_list": list[str],
    "integer_list": list[int],
    "any": str | int | float | bool | None,
    "json": Any,
}


def _annotation(param: Param) -> Any:
    """The parameter's Python annotation with its description and bounds (the tool's JSON
    schema is made from it)."""
    base: Any = Literal[param.choices] if param.choices else _TYPES[param.type]
    if not param.required and param.default is None:
        base = base | None
    field = Field(description=param.description, ge=param.minimum, le=param.maximum)
    return Annotated[base, field]


def signature(spec: Api) -> inspect.Signature:
    """The tool function's signature of ``spec``: keyword-only typed parameters (the tool's
    JSON schema is made from it)."""
    described = [
        inspect.Parameter(
            p.name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=_annotation(p),
            default=inspect.Parameter.empty if p.required else p.default,
        )
        for p in spec.params
    ]
    return inspect.Signature(described, return_annotation=str)


def call_api(db: sqlite3.Connection, spec: Api, arguments: dict[str, Any]) -> Any:
    """Make one API call on ``db``: the token checked, the implementation run, a write
    committed (rolled back on an error).

    Returns:
        The API's result (JSON data).

    Raises:
        AppError: the app's own error (a database error is a 500, an integer too large for
            the database a 422).
    """
    given = dict(arguments)
    try:
        user = token_owner(db, spec.app, given.pop("access_token", "")) if spec.token else None
        result = spec.fn(Session(db, spec.app, user), **given)
        if db.in_transaction:
            db.commit()
        return result
    except AppError:
        db.rollback()
        raise
    except sqlite3.Error as err:
        db.rollback()
        raise AppError(500, f"the app failed: {err}") from err
    except OverflowError as err:  # an integer past SQLite's 64 bits
        db.rollback()
        raise AppError(422, "a number is too large") from err


def _tool(spec: Api, db: sqlite3.Connection) -> Callable[..., Any]:
    """The tool function of ``spec``: typed keyword parameters, the result as JSON text."""

    async def tool(**arguments: Any) -> str:
        try:
            return json.dumps(call_api(db, spec, arguments), ensure_ascii=False)
        except AppError as err:
            raise ToolError(str(err)) from None

    tool.__signature__ = signature(spec)  # type: ignore[attr-defined]
    tool.__name__ = spec.tool
    tool.__doc__ = spec.description
    return tool


def api_annotations(spec: Api) -> ToolAnnotations:
    """The MCP tool annotations of ``spec``: an API that only returns information is
    read-only; one that changes an app's state is declared destructive and not idempotent (the
    server does not tell an additive write from a destructive one); none reaches beyond the
    world (``openWorldHint`` false)."""
    if not spec.writes:
        return ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
    )


def build_server(db: sqlite3.Connection) -> MCPServer[Any]:
    """The MCP server of one world: one tool per API, with its annotations
    (:func:`api_annotations`).

    Args:
        db: the world's open database (:func:`~._schema.connect`).

    Returns:
        The server (run it with ``run("stdio")``, or connect to it in memory in tests).
    """
    server: MCPServer[Any] = MCPServer(
        SERVER_NAME,
        instructions="A world of apps: each tool is one API of one app; start with api_docs.",
        log_level="WARNING",  # a failed call is the agent's observation, not the server's news
    )
    for spec in APIS.values():
        server.add_tool(
            _tool(spec, db),
            name=spec.tool,
            annotations=api_annotations(spec),
            structured_output=False,
        )
    return server


def main(argv: list[str] | None = None) -> int:
    """Serve the world of ``WORKSPACE`` over stdio until the client closes the connection.

    Returns:
        0, or 2 when the workspace holds no world.
    """
    path = workspace_file(
        argv, module="controlscope.envs.apps.server", server=SERVER_NAME, name=DB_FILE
    )
    if path is None:
        return 2
    db = connect(str(path))
    try:
        build_server(db).run("stdio")
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
