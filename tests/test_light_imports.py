"""What a command that only reads logs imports: the MCP SDK is loaded when a tool server is
connected or started, not with the package (``controlscope export``, a panel's manifest read
back), while the tool server client still works once it is used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

PROBE = """
import json, sys
import {module}
sdk = [m for m in sys.modules if m == "mcp" or m.startswith(("mcp.", "mcp_types"))]
print(json.dumps(sorted(sdk)))
"""


def _loaded_mcp_modules(module: str) -> list[str]:
    """The MCP SDK modules a fresh interpreter holds after importing ``module``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "module",
    ["controlscope", "controlscope.cli._export", "controlscope.panel", "controlscope.envs"],
)
def test_reading_logs_does_not_load_the_mcp_sdk(module: str) -> None:
    assert _loaded_mcp_modules(module) == []


def test_the_tool_server_client_loads_the_sdk_when_used() -> None:
    from mcp.server.mcpserver import MCPServer

    from controlscope.envs import McpToolServer

    server = MCPServer("echo")

    @server.tool()
    def echo(text: str) -> str:
        return text

    with McpToolServer.in_memory(server, timeout_s=30) as client:
        assert [t.name for t in client.list_tools()] == ["echo"]
        result = client.call("echo", {"text": "hi"})
    assert (result.text, result.is_error) == ("hi", False)
