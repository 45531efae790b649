"""Review inside other agent frameworks.

Public API: :func:`code_mode_server` (an MCP server with one ``execute_python`` tool whose code
runs in a reviewed :class:`~controlscope.Executor`: ``controlscope serve``) and
:func:`execution_text` (an executed block as a tool result).
"""

from controlscope.integrations._code_mode import code_mode_server, execution_text

__all__ = ["code_mode_server", "execution_text"]
