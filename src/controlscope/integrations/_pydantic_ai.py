"""Pydantic AI: an ``execute_python`` tool whose code runs in a reviewed
:class:`~controlscope.Executor`.

Each call of the tool is one :meth:`~controlscope.Executor.aexecute`; its return (the
``ToolReturnPart`` the run's messages keep) is
:func:`~controlscope.integrations.execution_text`: a patched call shows the arguments it ran
with in place of those the code asked for. The harness's ``CodeMode`` runs its code in the
Monty interpreter only (locally or a Monty server), so it takes no other executor: this tool
stands in for it.
"""

from __future__ import annotations

from typing import Any

from controlscope._extras import require_extra

require_extra("pydantic-ai", "pydantic_ai", "the Pydantic AI adapter")

from pydantic_ai import Tool  # noqa: E402

from controlscope.executor import Executor, ExecutorClosed  # noqa: E402
from controlscope.integrations._code_mode import (  # noqa: E402
    execute_python_description,
    execution_text,
)
from controlscope.planner import EXECUTE_PYTHON  # noqa: E402

__all__ = ["pydantic_ai_tool"]


def pydantic_ai_tool(executor: Executor, *, name: str = EXECUTE_PYTHON) -> Tool[Any]:
    """A Pydantic AI tool that runs its ``code`` in ``executor`` (``Agent(tools=[...])``, or
    in a ``FunctionToolset``).

    The tool has no Pydantic AI timeout: each block is bounded by the executor's limits
    (``block_exec_s``, the execution budget, the session's wall-clock ceiling, each review's
    ``request_timeout_s``), and a block that overruns them is a ``timeout`` in the tool's
    return. Code that is not a string is refused by Pydantic AI's own validation (a retry
    prompt to the model).

    Args:
        executor: the reviewed executor (open); close it yourself when the agent is done.
        name: the tool's name.

    Returns:
        The tool; its return is the block's text, also when the block failed, the code was
        longer than a block may be, or the executor was closed meanwhile (the model reads why).

    Raises:
        ExecutorClosed: the executor is closed.
    """
    description = execute_python_description(executor)

    async def execute_python(code: str) -> str:
        try:
            run = await executor.aexecute(code)
        except (ExecutorClosed, ValueError) as err:  # closed, or a block over the bound
            return f"[error: {err}]"
        return execution_text(run)

    return Tool(execute_python, takes_ctx=False, name=name, description=description)
