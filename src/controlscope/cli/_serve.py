"""``controlscope serve``: an MCP server with one tool, ``execute_python``, whose code runs in a
reviewed executor (stdio, or streamable HTTP).

Exit status: 0 when the client disconnects (stdio) or the server is stopped; 2 on bad input
(one line, before anything runs): a bad settings option, an ``mcpServers`` file that cannot be
used, a session that cannot start.
"""

from __future__ import annotations

import argparse

import anyio
from pydantic import ValidationError
from rich.console import Console

from controlscope.cli._console import NumberOption, fail, path_option
from controlscope.cli._settings_args import add_settings, settings_from_args
from controlscope.core import Port, RunSettings
from controlscope.executor import DEFAULT_GOAL, Executor, ExecutorError
from controlscope.integrations import code_mode_server
from controlscope.schedule import SCHEDULE_FORMS
from controlscope.view import is_loopback


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
        extra_help={"schedule": f"forms: {SCHEDULE_FORMS}"},
    )


def main(args: argparse.Namespace) -> int:
    """Serve until the client disconnects; return the exit status."""
    console = Console(stderr=True, soft_wrap=True)
    try:
        settings = settings_from_args(args, RunSettings)
    except (ValueError, ValidationError) as err:
        first = str(err).strip().splitlines()
        return fail(console, "serve", " ".join(first[:3]), 2)
    try:
        executor = Executor(servers=args.servers, settings=settings, goal=args.goal, out=args.out)
    except ExecutorError as err:
        return fail(console, "serve", str(err), 2)
    with executor:
        for problem in executor.problems:
            console.print(f"controlscope serve: {problem}", markup=False)
        server = code_mode_server(executor)
        if args.transport == "http" and not is_loopback(args.host):
            console.print(
                f"controlscope serve: warning: serving on {args.host}, not loopback: anyone who "
                "can reach this machine can run code in the session and call its tools",
                markup=False,
            )
        if args.transport == "stdio":
            anyio.run(server.run_stdio_async)
        else:
            anyio.run(lambda: server.run_streamable_http_async(host=args.host, port=args.port))
    return 0
