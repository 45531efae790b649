"""The OpenAI Agents SDK: an ``execute_python`` function tool whose code runs in a reviewed
:class:`~controlscope.Executor`.

The SDK's function tool is the block's entry: each call of it is one
:meth:`~controlscope.Executor.aexecute`, and its output (the tool call's output item the run
keeps) is :func:`~controlscope.integrations.execution_text`: a patched call shows the
arguments it ran with in place of those the code asked for.
"""

from __future__ import annotations

import json
from typing import Any

from controlscope._extras import require_extra

require_extra("openai-agents", "agents", "the OpenAI Agents SDK adapter")

from agents import FunctionTool  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

from controlscope.executor import Executor, ExecutorClosed  # noqa: E402
from controlscope.integrations._code_mode import (  # noqa: E402
    execute_python_description,
    execution_text,
)
from controlscope.planner import EXECUTE_PYTHON, EXECUTE_PYTHON_SPEC  # noqa: E402

__all__ = ["openai_agents_tool"]


def openai_agents_tool(executor: Executor, *, name: str = EXECUTE_PYTHON) -> FunctionTool:
    """An Agents SDK function tool that runs its ``code`` in ``executor``.

    The tool has no SDK timeout: each block is bounded by the executor's limits
    (``block_exec_s``, the execution budget, the session's wall-clock ceiling, each review's
    ``request_timeout_s``), and a block that overruns them is a ``timeout`` in the tool's
    output. An SDK timeout shorter than those would leave the block running in the worker
    while the model is told it ended.

    Args:
        executor: the reviewed executor (open); close it yourself when the agent is done.
        name: the tool's name.

    Returns:
        The tool; its output is the block's text, also when the block failed, the code was
        not a string or longer than a block may be, or the executor was closed meanwhile (the
        model reads why).

    Raises:
        ExecutorClosed: the executor is closed.
    """
    description = execute_python_description(executor)

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        code = _code_of(arguments)
        if not isinstance(code, str):
            return code.text
        try:
            run = await executor.aexecute(code)
        except (ExecutorClosed, ValueError) as err:  # closed, or a block over the bound
            return f"[error: {err}]"
        return execution_text(run)

    return FunctionTool(
        name=name,
        description=description,
        params_json_schema={**EXECUTE_PYTHON_SPEC.parameters, "additionalProperties": False},
        on_invoke_tool=invoke,
        strict_json_schema=True,
    )


class _Refusal:
    """Why a tool call's arguments were refused (the tool's output)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _code_of(arguments: str) -> str | _Refusal:
    """The ``code`` argument of a tool call's JSON arguments, or why there is none."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError as err:
        return _Refusal(f"[error: the arguments are not JSON ({err}); send {{'code': '...'}}]")
    code = parsed.get("code") if isinstance(parsed, dict) else None
    if not isinstance(code, str):
        given = "none was given" if code is None else f"not {type(code).__name__}"
        return _Refusal(f"[error: execute_python needs its code as a string: {given}]")
    return code
