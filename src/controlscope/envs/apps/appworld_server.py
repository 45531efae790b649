"""The MCP server of one real AppWorld task: AppWorld's APIs as typed tools, through the bridge.

Started per run or branch as ``python -m controlscope.envs.apps.appworld_server WORKSPACE``
(controlscope's interpreter; a process group of its own). It reads the workspace's
``appworld.json`` (task id, experiment name, AppWorld's interpreter and folder), starts the
bridge (:mod:`._appworld_bridge`, AppWorld's interpreter), opens the task, reads the
documentation of every API the task may use, and serves each as one tool ``{app}__{api}``
whose parameters are typed from that documentation (the same conventions as the apps of
:mod:`.server`). Each call is one AppWorld API call; an AppWorld error is a tool error with
AppWorld's message. Every call is appended to the workspace's ``calls.jsonl`` (the state hash
reads it); AppWorld saves its own state after every call, for its evaluator.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from controlscope.envs._served import workspace_file
from controlscope.envs.apps._api import Api, Param, ParamType
from controlscope.envs.apps._appworld_client import AppWorldSetup, Bridge
from controlscope.envs.apps.server import signature

__all__ = ["CALLS_FILE", "CONFIG_FILE", "SERVER_NAME", "api_of", "build_server", "main"]

CONFIG_FILE = "appworld.json"
"""The workspace's file naming the task and where AppWorld is."""

CALLS_FILE = "calls.jsonl"
"""The workspace's log of the calls made (tool, arguments, result)."""

SERVER_NAME = "controlscope-appworld"
"""The server's name in the MCP handshake."""

_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def _param(doc: dict[str, Any]) -> Param:
    """A parameter of AppWorld's documentation as ours (unknown types accept any JSON)."""
    raw = str(doc.get("type", "")).lower()
    kind = _TYPES.get(raw, raw)
    typed: ParamType = kind if kind in get_args(ParamType) else "json"  # type: ignore[assignment]
    required = bool(doc.get("required", False))
    return Param(
        name=str(doc["name"]),
        type=typed,
        description=str(doc.get("description", "")),
        required=required,
        default=None if required else doc.get("default"),
    )


def api_of(doc: dict[str, Any]) -> Api:
    """An AppWorld API's documentation as an :class:`~._api.Api` (its implementation is the
    bridge's)."""
    params = tuple(_param(p) for p in doc.get("parameters", []))
    return Api(
        app=str(doc["app_name"]),
        name=str(doc["api_name"]),
        description=str(doc.get("description", "")),
        params=params,
        returns=json.dumps(doc.get("response_schemas", {}))[:2000],
        writes=str(doc.get("method", "GET")).upper() != "GET",
        token=any(p.name == "access_token" for p in params),
        fn=lambda *a, **k: None,
    )


def _tool(spec: Api, bridge: Bridge, log: Path) -> Callable[..., Any]:
    async def tool(**arguments: Any) -> str:
        given = {k: v for k, v in arguments.items() if v is not None}
        answer = bridge.request("call", app=spec.app, api=spec.name, arguments=given)
        with log.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"tool": spec.tool, "arguments": given, **answer}) + "\n")
        if not answer.get("ok"):
            raise ToolError(str(answer.get("text", "")))
        return str(answer.get("text", ""))

    tool.__signature__ = signature(spec)  # type: ignore[attr-defined]
    tool.__name__ = spec.tool
    tool.__doc__ = spec.description
    return tool


def build_server(bridge: Bridge, docs: list[dict[str, Any]], workspace: Path) -> MCPServer[Any]:
    """The MCP server of an opened AppWorld task: one tool per documented API."""
    server: MCPServer[Any] = MCPServer(
        SERVER_NAME, instructions="AppWorld's apps: each tool is one API.", log_level="WARNING"
    )
    for doc in docs:
        spec = api_of(doc)
        server.add_tool(
            _tool(spec, bridge, workspace / CALLS_FILE), name=spec.tool, structured_output=False
        )
    return server


def main(argv: list[str] | None = None) -> int:
    """Serve the AppWorld task of ``WORKSPACE`` over stdio until the client closes.

    Returns:
        0, or 2 when the workspace names no task.
    """
    path = workspace_file(
        argv, module="controlscope.envs.apps.appworld_server", server=SERVER_NAME, name=CONFIG_FILE
    )
    if path is None:
        return 2
    workspace = path.parent
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        print(f"{SERVER_NAME}: no task in {workspace}: {err}", file=sys.stderr)
        return 2
    where = AppWorldSetup(config["python"], Path(config["root"]), config.get("pythonpath"))
    with Bridge(where, stderr=sys.stderr, own_group=False) as bridge:
        bridge.request("open", task_id=config["task_id"], experiment=config["experiment"])
        docs = bridge.request("docs")["docs"]
        build_server(bridge, docs, workspace).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
