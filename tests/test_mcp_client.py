"""McpToolServer against the real npm filesystem server and an in-memory MCPServer."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from controlscope.core import ToolServer, ToolServerError
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.filesystem.server import start_filesystem_server


def _children() -> set[int]:
    """Pids of this process's direct children (Linux /proc)."""
    pids: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            pids.add(int(entry))
    return pids


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.txt").write_text("alpha\n")
    (ws / "sub" / "b.txt").write_text("beta\n")
    return ws


@pytest.fixture
def fs_server(workspace: Path) -> Iterator[McpToolServer]:
    server = start_filesystem_server(workspace, timeout_s=20)
    yield server
    server.close()


def test_real_server_lists_tools_and_reads(fs_server: McpToolServer, workspace: Path) -> None:
    assert isinstance(fs_server, ToolServer)
    tools = fs_server.list_tools()
    names = [t.name for t in tools]
    assert {"read_text_file", "read_multiple_files", "write_file", "create_directory"} <= set(names)
    read = next(t for t in tools if t.name == "read_text_file")
    assert "path" in read.input_schema["properties"]
    assert read.description
    assert fs_server.list_tools() == tools  # cached, same order

    root = fs_server.agent_roots[0]
    result = fs_server.call("read_text_file", {"path": f"{root}/a.txt"})
    assert not result.is_error
    assert result.text == "alpha\n"
    assert result.structured == {"content": "alpha\n"}
    assert result.elapsed_ms > 0

    # relative paths resolve against the workspace (the server's own rule)
    assert fs_server.call("read_text_file", {"path": "sub/b.txt"}).text == "beta\n"


def test_real_server_tool_errors_are_results(fs_server: McpToolServer, workspace: Path) -> None:
    outside = fs_server.call("read_text_file", {"path": "/etc/hostname"})
    assert outside.is_error
    assert "outside allowed directories" in outside.text

    missing = fs_server.call("read_text_file", {"path": "nope.txt"})
    assert missing.is_error and "ENOENT" in missing.text

    # write_file does not create parent directories
    nested = fs_server.call("write_file", {"path": "x/y/z.txt", "content": "hi"})
    assert nested.is_error
    assert not (workspace / "x").exists()

    ok = fs_server.call("write_file", {"path": "new.txt", "content": "hi"})
    assert not ok.is_error
    assert (workspace / "new.txt").read_text() == "hi"


def test_roots_not_advertised(fs_server: McpToolServer, workspace: Path) -> None:
    result = fs_server.call("list_allowed_directories", {})
    assert fs_server.agent_roots == ("/workspace",)
    assert "/workspace" in result.text
    assert "using allowed directories set from server args" in fs_server.stderr_text()


def test_killed_server_raises_quickly(workspace: Path) -> None:
    before = _children()
    server = start_filesystem_server(workspace, timeout_s=20)
    try:
        started = _children() - before
        assert len(started) == 1
        assert not server.call("read_text_file", {"path": "a.txt"}).is_error
        os.kill(started.pop(), signal.SIGKILL)
        time.sleep(0.1)
        t0 = time.perf_counter()
        with pytest.raises(ToolServerError) as info:
            server.call("read_text_file", {"path": "a.txt"})
        assert time.perf_counter() - t0 < 2.0
        message = str(info.value)
        assert "the server exited" in message or "the server closed its stdout" in message
        assert "Secure MCP Filesystem Server" in message  # the stderr tail is quoted
    finally:
        server.close()
        server.close()  # safe twice


def test_closed_server_raises(workspace: Path) -> None:
    server = start_filesystem_server(workspace, timeout_s=20)
    server.close()
    with pytest.raises(ToolServerError, match="closed"):
        server.call("read_text_file", {"path": "a.txt"})


def test_command_that_is_not_a_server_fails_clearly(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    with pytest.raises(ToolServerError) as info:
        McpToolServer.stdio(
            sys.executable,
            ["-c", "import sys; sys.stderr.write('boom: no server here\\n'); sys.exit(3)"],
            timeout_s=10,
        )
    assert time.perf_counter() - t0 < 10
    assert "boom: no server here" in str(info.value)


def test_missing_executable_fails_clearly() -> None:
    with pytest.raises(ToolServerError, match="could not start"):
        McpToolServer.stdio("/nonexistent/controlscope-no-such-binary", [], timeout_s=5)


def _demo_server() -> MCPServer:
    server = MCPServer("demo")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def fail(message: str) -> str:
        """Always raise a tool error."""
        raise ToolError(message)

    @server.tool()
    def slow(seconds: float) -> str:
        """Sleep (blocking), then answer."""
        time.sleep(seconds)
        return "done"

    return server


def test_in_memory_server_results_and_errors() -> None:
    with McpToolServer.in_memory(_demo_server(), timeout_s=10) as server:
        names = [t.name for t in server.list_tools()]
        assert names == ["add", "fail", "slow"]
        add = server.list_tools()[0]
        assert set(add.input_schema["properties"]) == {"a", "b"}

        result = server.call("add", {"a": 2, "b": 40})
        assert not result.is_error
        assert result.text == "42"
        assert result.structured == {"result": 42}

        failed = server.call("fail", {"message": "no such student"})
        assert failed.is_error
        assert "no such student" in failed.text

        bad_args = server.call("add", {"a": "two"})
        assert bad_args.is_error

        unknown = server.call("nope", {})
        assert unknown.is_error

        unsendable = server.call("add", {"a": object(), "b": 1})
        assert unsendable.is_error and "cannot be sent" in unsendable.text
        assert server.call("add", {"a": 1, "b": 1}).text == "2"  # the session survives


def test_call_timeout_raises_instead_of_hanging() -> None:
    with McpToolServer.in_memory(_demo_server(), timeout_s=0.3) as server:
        t0 = time.perf_counter()
        with pytest.raises(ToolServerError, match=r"timed out|no answer"):
            server.call("slow", {"seconds": 1.5})
        assert time.perf_counter() - t0 < 1.4


def test_silent_server_times_out_and_is_stopped() -> None:
    before = _children()
    t0 = time.perf_counter()
    with pytest.raises(ToolServerError, match=r"(?s)no session within.*silent server"):
        McpToolServer.stdio(
            sys.executable,
            [
                "-c",
                "import sys, time; print('silent server', file=sys.stderr, flush=True); "
                "time.sleep(60)",
            ],
            timeout_s=1,
        )
    assert time.perf_counter() - t0 < 8
    assert _children() - before == set()  # the process was stopped, not leaked


def test_close_stops_the_portal_thread() -> None:
    def portals() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("mcp-client:")}

    server = McpToolServer.in_memory(_demo_server(), timeout_s=10)
    assert "mcp-client:in-memory demo" in portals()
    server.close()
    assert "mcp-client:in-memory demo" not in portals()
    with pytest.raises(ToolServerError, match="closed"):
        server.list_tools()
