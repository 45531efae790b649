"""``controlscope serve``: an MCP server with one tool, ``execute_python``, whose code runs in a
reviewed executor (stdio, or streamable HTTP).

With ``--reviewer human`` (``human:browser``) a person reviews at the session's review page,
served on loopback; its address (with the session's secret) is printed on standard error, never
on the stdio MCP stream. ``human:terminal`` is refused over stdio (the terminal's input is the
MCP stream).

Exit status: 0 when the client disconnects (stdio) or the server is stopped; 2 on bad input
(one line, before anything runs): a bad settings option, an ``mcpServers`` file that cannot be
used, an HTTP address that cannot be listened on, a session that cannot start.
"""

from __future__ import annotations

import argparse
import contextlib
import socket

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from pydantic import ValidationError
from rich.console import Console

from controlscope.cli._console import NumberOption, fail, one_line, path_option
from controlscope.cli._settings_args import add_settings, settings_from_args
from controlscope.core import Port, RunSettings
from controlscope.executor import DEFAULT_GOAL, Executor, ExecutorError
from controlscope.integrations import code_mode_server
from controlscope.schedule import SCHEDULE_FORMS
from controlscope.view import ViewError, is_loopback, listen_on


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``serve``'s options: the upstream servers, the transport, the session's run
    directory and goal, and every run setting (scope, schedule, reviewer...)."""
    parser.add_argument(
        "--servers",
        type=path_option,
        default=None,
        metavar="FILE",
        help='the upstream MCP servers: an mcpServers JSON file ({"mcpServers": {NAME: '
        '{"command": ..., "args": [...]}}}, as Claude Desktop reads)',
    )
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="the HTTP transport's address")
    port = NumberOption(Port)
    parser.add_argument(
        "--port", type=port, default=8000, help=f"the HTTP transport's port ({port.span})"
    )
    parser.add_argument("--goal", default=DEFAULT_GOAL, help="what the session is for")
    parser.add_argument("--out", type=path_option, default=None, help="the session's run directory")
    add_settings(
        parser,
        RunSettings,
        exclude=("planner_format",),
        checked=True,
        extra_help={"schedule": f"forms: {SCHEDULE_FORMS}"},
    )


def main(args: argparse.Namespace) -> int:
    """Serve until the client disconnects; return the exit status."""
    console = Console(stderr=True, soft_wrap=True)
    try:
        settings = settings_from_args(args, RunSettings)
    except ValidationError as err:  # settings that do not go together
        return fail(console, "serve", one_line(err), 2)
    except ValueError as err:  # a malformed KEY=JSON item
        return fail(console, "serve", str(err), 2)
    if settings.reviewer == "human:terminal" and args.transport == "stdio":
        why = "a person at the terminal cannot review over stdio (its input is the MCP stream)"
        return fail(console, "serve", f"{why}: use --reviewer human (the review page)", 2)
    listening: socket.socket | None = None
    try:
        if args.transport == "http":  # bound first: a taken port is one line, no session
            listening = listen_on(args.host, args.port)
        executor = Executor(servers=args.servers, settings=settings, goal=args.goal, out=args.out)
    except (ViewError, ExecutorError) as err:
        if listening is not None:
            listening.close()
        return fail(console, "serve", str(err), 2)
    with executor, contextlib.ExitStack() as stack:
        for problem in executor.problems:
            console.print(f"controlscope serve: {problem}", markup=False)
        for warning in executor.warnings:
            console.print(f"controlscope serve: warning: {warning}", markup=False)
        if executor.review_url is not None:
            console.print(f"review page: {executor.review_url}", markup=False, highlight=False)
        server = code_mode_server(executor)
        if args.transport == "http" and not is_loopback(args.host):
            console.print(
                f"controlscope serve: warning: serving on {args.host}, not loopback: anyone who "
                "can reach this machine can run code in the session and call its tools",
                markup=False,
            )
        if listening is None:
            anyio.run(server.run_stdio_async)
        else:
            stack.callback(listening.close)
            anyio.run(_serve_http, server, listening, args.host)
    return 0


async def _serve_http(server: MCPServer, listening: socket.socket, host: str) -> None:
    """Serve ``server``'s streamable HTTP app on the socket already listening (as the SDK's
    ``run_streamable_http_async`` serves it on an address it binds itself)."""
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level=server.settings.log_level.lower())
    await uvicorn.Server(config).serve(sockets=[listening])
