"""The MCP code-mode server: one tool, ``execute_python``, whose code runs in a reviewed
:class:`~controlscope.Executor` (what ``controlscope serve`` serves).

Any MCP client (Claude Desktop, an IDE, an agent framework's MCP tools) then gets code mode
with review inside: the tool's description lists the upstream tools' signatures as the
planner's prompt shows them, and its result is the block's printed output, its error and the
reviewer's decisions, so a patched call shows its new arguments in the observation.
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from controlscope.executor import Execution, Executor, ExecutorClosed
from controlscope.planner import EXECUTE_PYTHON, EXECUTE_PYTHON_SPEC

__all__ = ["code_mode_server", "execution_text"]


def execution_text(run: Execution) -> str:
    """One executed block as a tool result: status, printed output, every decision that
    changed a call (the arguments asked and run), and the error.

    Args:
        run: the execution.

    Returns:
        The text.
    """
    lines = [f"[block {run.block_id or '-'}: {run.status}; {len(run.calls)} tool calls]"]
    for call in run.calls:
        if call.requested is not None:
            lines.append(
                f"[review: call {call.call_index} {call.tool} ran with "
                f"{json.dumps(call.arguments, ensure_ascii=False)} in place of "
                f"{json.dumps(call.requested, ensure_ascii=False)} ({call.operation})]"
            )
    for block in run.blocks[1:]:
        lines.append(f"[review: the rest was replaced by block {block.block_id}]")
    if run.output:
        lines.append(run.output.rstrip("\n"))
    if run.error:
        lines.append(run.error.rstrip("\n"))
    if run.session_end is not None:
        lines.append(f"[the session ended: {run.session_end}]")
    return "\n".join(lines)


def code_mode_server(executor: Executor, *, name: str = "controlscope") -> MCPServer:
    """An MCP server whose one tool, ``execute_python``, runs its code in ``executor``.

    Args:
        executor: the reviewed executor (its tools are listed in the tool's description).
        name: the server's name.

    Returns:
        The server (run it with ``run_stdio_async`` or ``run_streamable_http_async``); a block
        that fails, or a session that ended, is a tool error.
    """
    server = MCPServer(name=name, instructions=_instructions())
    description = (
        f"{EXECUTE_PYTHON_SPEC.description} Every call of these functions may be reviewed "
        "(kept, its arguments patched, or the rest of the block replaced); the result says "
        "so.\n\n"
        f"{executor.signatures()}"
    )

    async def execute_python(code: str) -> str:
        try:
            run = await executor.aexecute(code)
        except ExecutorClosed as err:
            raise ToolError(str(err)) from None
        text = execution_text(run)
        if not run.ok:
            raise ToolError(text)
        return text

    server.add_tool(
        execute_python, name=EXECUTE_PYTHON, description=description, structured_output=False
    )
    return server


def _instructions() -> str:
    return (
        "Write Python that calls the functions listed in execute_python's description; "
        "variables persist between calls."
    )
