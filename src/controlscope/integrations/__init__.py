"""Review inside other agent frameworks.

Public API: :func:`code_mode_server` (an MCP server with one ``execute_python`` tool whose code
runs in a reviewed :class:`~controlscope.Executor`: ``controlscope serve``),
:func:`execution_text` (an executed block as a tool result) and
:func:`execute_python_description` (the tool's description with the executor's tools); and one
adapter per framework, each behind an optional extra (importing one without its extra raises
:class:`~controlscope.MissingExtra`, one line naming the ``pip install`` to run):

- smolagents (``controlscope[smolagents]``): :func:`reviewed_code_agent`, a ``CodeAgent``
  whose code runs in the executor through :class:`ReviewedPythonExecutor` (smolagents'
  ``PythonExecutor``), its tools :func:`smolagents_tools`;
- the OpenAI Agents SDK (``controlscope[openai-agents]``): :func:`openai_agents_tool`, an
  ``execute_python`` function tool;
- Pydantic AI (``controlscope[pydantic-ai]``): :func:`pydantic_ai_tool`, an
  ``execute_python`` tool.
"""

import importlib
from typing import TYPE_CHECKING, Any

from controlscope.integrations._code_mode import (
    code_mode_server,
    execute_python_description,
    execution_text,
)

if TYPE_CHECKING:
    from controlscope.integrations._openai_agents import openai_agents_tool
    from controlscope.integrations._pydantic_ai import pydantic_ai_tool
    from controlscope.integrations._smolagents import (
        ExecutorTool,
        ReviewedPythonExecutor,
        reviewed_code_agent,
        smolagents_tools,
    )

_ADAPTERS = {
    **dict.fromkeys(
        ("ExecutorTool", "ReviewedPythonExecutor", "reviewed_code_agent", "smolagents_tools"),
        "controlscope.integrations._smolagents",
    ),
    "openai_agents_tool": "controlscope.integrations._openai_agents",
    "pydantic_ai_tool": "controlscope.integrations._pydantic_ai",
}
"""The adapters' names, imported on first use (each needs its framework, an optional extra)."""


def __getattr__(name: str) -> Any:
    """An adapter's public name (:data:`_ADAPTERS`), imported with its framework.

    Raises:
        AttributeError: not a public name of the package.
        MissingExtra: the adapter's framework is not installed (one line naming the extra).
    """
    module = _ADAPTERS.get(name)
    if module is None:
        raise AttributeError(f"module 'controlscope.integrations' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ExecutorTool",
    "ReviewedPythonExecutor",
    "code_mode_server",
    "execute_python_description",
    "execution_text",
    "openai_agents_tool",
    "pydantic_ai_tool",
    "reviewed_code_agent",
    "smolagents_tools",
]
