"""``controlscope serve`` driven by the mcp SDK's real client over stdio: one
``execute_python`` tool listing the upstream tools, a scripted reviewer model patching the
second call (the result shows the new arguments), the session's run directory, bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import anyio
import mcp_types
import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import _session_support
import controlscope as cs
from controlscope._proc import descendants
from controlscope.cli import main as cli
from controlscope.models import ScriptedModel
from controlscope.record import read_events

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
files = _session_support.files  # the fixture, used by name


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))


def _serve(args: list[str]) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "controlscope.cli", "serve", *args], env=ENV
    )


def test_serve_over_stdio_with_a_patching_reviewer(files: Path, tmp_path: Path) -> None:
    config = _session_support.fs_config(files, tmp_path / "mcp.json")
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


def _ticket(review_url: str, deadline_s: float = 120) -> str:
    """The ticket of the boundary the review page shows, once one waits."""
    page = review_url.split("#", 1)[0]
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(page, timeout=30) as response:
            found = re.search(r'data-ticket="([^"]+)"', response.read().decode())
        if found:
            return found.group(1)
        time.sleep(0.1)
    raise AssertionError("no boundary reached the review page")


def _decide(review_url: str, body: dict[str, object]) -> int:
    base, key = review_url.split("/review#key=", 1)
    request = urllib.request.Request(
        f"{base}/_review/decide",
        json.dumps(body).encode(),
        {"Content-Type": "application/json", "X-Review-Key": key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def test_serve_with_a_person_reviewing_prints_the_review_page_on_stderr_only(
    files: Path, tmp_path: Path
) -> None:
    """``serve --reviewer human`` over stdio: the review page's address (with the secret) is on
    standard error, the MCP stream stays clean (the client's calls work), the person's patch
    shows in the tool's result, and the run records the reviewer as ``human:browser``."""
    config = _session_support.fs_config(files, tmp_path / "mcp.json")
    out, errors = tmp_path / "session", tmp_path / "stderr.txt"
    params = _serve(
        [
            *("--servers", str(config), "--out", str(out), "--scope", "arg"),
            *("--schedule", "every_boundary", "--reviewer", "human"),
        ]
    )
    a, b = str(files / "a.txt"), str(files / "b.txt")
    decided: list[int] = []

    def person() -> None:
        deadline = time.monotonic() + 120
        while "review page: " not in errors.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        url = errors.read_text().split("review page: ", 1)[1].split()[0]
        ticket = _ticket(url)
        patch = {"ticket": ticket, "operation": "patch_arguments", "arguments": {"path": b}}
        decided.append(_decide(url, patch))

    async def session() -> mcp_types.CallToolResult:
        with errors.open("a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write, read_timeout_seconds=120) as client,
            ):
                await client.initialize()
                return await client.call_tool(
                    "execute_python", {"code": f"print(read_text_file(path={a!r}))"}
                )

    errors.write_text("")  # the person reads it from the start
    thread = threading.Thread(target=person)
    thread.start()
    try:
        ran = anyio.run(session)
    finally:
        thread.join(150)
    assert decided == [200]
    text = _text(ran)
    assert "beta" in text and "alpha" not in text and "#key=" not in text
    assert f'ran with {{"path": "{b}"}} in place of {{"path": "{a}"}}' in text
    line = re.search(r"review page: http://127\.0\.0\.1:\d+/review#key=\S+", errors.read_text())
    assert line, errors.read_text()
    events = read_events(out)
    assert events[0].type == "run_start" and events[0].models["reviewer"] == "human:browser"
    assert events[-1].type == "run_end"


def test_serve_refuses_a_person_at_the_terminal_over_stdio_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "controlscope.cli", "serve", "--reviewer", "human:terminal"),
            *("--out", str(tmp_path / "s")),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "cannot review over stdio" in done.stderr
    assert not (tmp_path / "s").exists()


def _out_of_range() -> list[tuple[str, str]]:
    """Each numeric run setting with a value just out of its declared range, both ends."""
    cases = []
    for name, schema in cs.RunSettings.model_json_schema()["properties"].items():
        numbers = [s for s in schema.get("anyOf", [schema]) if s.get("type") in NUMBERS]
        if not numbers:
            continue
        number = numbers[0]
        low = number.get("minimum", number.get("exclusiveMinimum"))
        high = number.get("maximum", number.get("exclusiveMaximum"))
        drop = 1 if "minimum" in number else 0
        if low is not None:
            cases.append((name, f"{low - drop:g}"))
        if high is not None:
            cases.append((name, f"{high + (1 if 'maximum' in number else 0):g}"))
    return cases


NUMBERS = ("integer", "number")
OUT_OF_RANGE = _out_of_range()


def test_every_number_option_of_serve_out_of_range_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every settings option of ``serve`` is checked against its range as the other verbs'
    are, before anything starts: one line naming the option and its range, exit status 2."""
    assert len(OUT_OF_RANGE) >= 20  # every bounded setting is covered, both ends
    assert cli(["serve", "--max-calls", "-3"]) == 2
    assert capsys.readouterr().err == (
        "controlscope serve: argument --max-calls: expected an integer from 1 to 100,000, "
        "not '-3'\n"
    )
    for name, value in OUT_OF_RANGE:
        option = "--" + name.replace("_", "-")
        assert cli(["serve", option, value]) == 2, option
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert err.startswith(f"controlscope serve: argument {option}: expected "), err
        assert "validation error" not in err and "pydantic" not in err


def test_serve_warns_on_stderr_of_a_tool_named_like_a_builtin(tmp_path: Path) -> None:
    server = ROOT / "tests" / "fixtures" / "task_specs" / "notebook_server.py"
    config = tmp_path / "mcp.json"
    command = {"command": sys.executable, "args": [str(server), "--rename", "add_line=print"]}
    config.write_text(json.dumps({"mcpServers": {"nb": command}}))
    done = subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "serve", "--servers", str(config),
         "--scope", "keep", "--out", str(tmp_path / "s")],
        capture_output=True, text=True, env=ENV, timeout=120, check=False,
        stdin=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    warning = "tools named like Python builtins replace them in the agent's program: print"
    assert done.stderr.count(warning) == 1, done.stderr
    assert f"controlscope serve: warning: {warning}\n" in done.stderr and done.stdout == ""
