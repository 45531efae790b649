"""``controlscope serve`` driven by the mcp SDK's real client over stdio: one
``execute_python`` tool listing the upstream tools, a scripted reviewer model patching the
second call (the result shows the new arguments), the session's run directory, bad input."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from controlscope._proc import descendants
from controlscope.envs.filesystem.server import find_server_script
from controlscope.models import ScriptedModel
from controlscope.record import read_events

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


def _serve(args: list[str]) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "controlscope.cli", "serve", *args], env=ENV
    )


def test_serve_over_stdio_with_a_patching_reviewer(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.txt").write_text("alpha\n")
    (files / "b.txt").write_text("beta\n")
    config = tmp_path / "mcp.json"
    server = {"command": "node", "args": [str(find_server_script()), str(files)]}
    config.write_text(json.dumps({"mcpServers": {"fs": server}}))
    patch = {"reason": "the other file", "arguments": {"path": str(files / "b.txt")}}
    answers = [
        ScriptedModel.tool_call("keep", {"reason": "fine"}).model_dump(mode="json"),
        ScriptedModel.tool_call("patch_arguments", patch).model_dump(mode="json"),
    ]
    script = tmp_path / "reviewer.json"
    script.write_text(json.dumps(answers))
    out = tmp_path / "session"
    params = _serve(
        [
            *("--servers", str(config), "--out", str(out), "--scope", "arg"),
            *("--schedule", "every_boundary", "--reviewer-model", f"scripted:{script}"),
        ]
    )
    a = str(files / "a.txt")
    code = f"x = read_text_file(path={a!r})\ny = read_text_file(path={a!r})\nprint(x + y)"

    async def session() -> tuple[list[mcp_types.Tool], str, mcp_types.CallToolResult]:
        async with Client(params, mode="legacy", read_timeout_seconds=120) as client:
            tools = (await client.list_tools()).tools
            ran = await client.call_tool("execute_python", {"code": code})
            failed = await client.call_tool("execute_python", {"code": "print(x)\n1/0"})
            return tools, _text(ran), failed

    tools, text, failed = anyio.run(session)
    assert [t.name for t in tools] == ["execute_python"]
    assert "def read_text_file(path: str" in (tools[0].description or "")
    assert "alpha\nbeta" in text
    assert f'ran with {{"path": "{files / "b.txt"}"}} in place of {{"path": "{a}"}}' in text
    assert failed.is_error and "ZeroDivisionError" in _text(failed) and "alpha" in _text(failed)
    events = read_events(out)
    assert events[0].type == "run_start" and events[-1].type == "run_end"
    kinds = [e.operation.kind for e in events if e.type == "realized_operation"]
    assert kinds == ["keep", "patch_arguments"]


def test_serve_refuses_a_bad_server_file_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"fs": {"url": "http://example.com/mcp"}}}))
    done = subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "serve", "--servers", str(config)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "unknown field 'url'" in done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_serve_over_streamable_http_ends_on_sigterm(tmp_path: Path) -> None:
    out, port = tmp_path / "session", _free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "controlscope.cli", "serve", "--transport", "http"),
            *("--port", str(port), "--scope", "keep", "--out", str(out)),
        ],
        env=ENV,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    async def session() -> str:
        async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=60) as client:
            ran = await client.call_tool("execute_python", {"code": "print(6 * 7)"})
            return _text(ran)

    try:
        _wait_listening(port, proc)
        text = anyio.run(session)
        below = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=90)
    finally:
        proc.kill()
        proc.wait()
    assert "42" in text
    assert read_events(out)[-1].type == "run_end"
    assert below and not [pid for pid in below if _proc_alive(pid)]


def _wait_listening(port: int, proc: subprocess.Popen[str]) -> None:
    """Wait (at most two minutes) until the server accepts connections on ``port``."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"the server does not listen on {port} (exit {proc.poll()})")


def _proc_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
