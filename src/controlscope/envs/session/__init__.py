"""An agent's own session as an environment (what :class:`controlscope.Executor` runs in).

Public API: :class:`SessionEnvironment` (``session:RUN_DIR``: the session's goal and tools,
recorded in :data:`SESSION_FILE`; built again from a recording it answers calls from the
recorded observations), :func:`start_session_tools` (upstream MCP servers and Python
callables behind one tool server, :class:`SessionTools`), :class:`PythonTool`, and the
upstream servers' configuration (:class:`McpServer`, :func:`parse_mcp_servers`,
:func:`load_mcp_servers`: the ``mcpServers`` JSON format; :class:`ServerConfigError`).
"""

from controlscope.envs.session._config import (
    McpServer,
    ServerConfigError,
    first_line,
    load_mcp_servers,
    parse_mcp_servers,
)
from controlscope.envs.session._environment import (
    SESSION_FILE,
    SESSION_KIND,
    SESSION_TASK,
    RecordedTools,
    SessionEnvironment,
    SessionRecord,
)
from controlscope.envs.session._tools import (
    PYTHON_SOURCE,
    PythonTool,
    SessionTools,
    start_session_tools,
)

__all__ = [
    "PYTHON_SOURCE",
    "SESSION_FILE",
    "SESSION_KIND",
    "SESSION_TASK",
    "McpServer",
    "PythonTool",
    "RecordedTools",
    "ServerConfigError",
    "SessionEnvironment",
    "SessionRecord",
    "SessionTools",
    "first_line",
    "load_mcp_servers",
    "parse_mcp_servers",
    "start_session_tools",
]
